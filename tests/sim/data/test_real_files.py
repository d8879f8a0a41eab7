"""The readers on the real data sets of ``../shared/data``, read as users hold them (the tests
skip, saying why, where that folder is absent): MNIST's IDX files, LEAF's FEMNIST and
Shakespeare output, UCI Adult and CIFAR-10's JPEG copy as an image folder."""

from __future__ import annotations

import gzip
import hashlib
import logging
import shutil

import numpy as np
import pytest

from fastfair.sim.data.adult import AdultDataset
from fastfair.sim.data.catalog import open_files
from fastfair.sim.data.image_folder import ImageFolder
from fastfair.sim.data.leaf import LeafDataset
from fastfair.sim.data.vision import VisionDataset
from tests.helpers import ROOT
from tests.helpers.shared_data import extract, shared_data

#: The published MD5 of MNIST's decompressed files (the .gz wrappers differ from the
#: distributed ones, so only their content is compared).
MNIST_MD5 = {"train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
             "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
             "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
             "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637"}
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck"]


@pytest.fixture(scope="module")
def femnist_dir(tmp_path_factory):
    archive = shared_data("femnist") / "femnist_leaf_niid_sf005_35shards_20train.tar.gz"
    return extract(archive, tmp_path_factory.mktemp("femnist"))


@pytest.fixture(scope="module")
def shakespeare_dir(tmp_path_factory):
    archive = shared_data("shakespeare") / "shakespeare_leaf_niid_10users.tar.gz"
    return extract(archive, tmp_path_factory.mktemp("shakespeare"),
                   wanted=lambda name: name.endswith(".json"))


def test_mnist_reads_gzipped_in_a_plain_folder_and_plain_in_torchvision_layout(tmp_path):
    source = shared_data("mnist")
    gz = VisionDataset("mnist", str(source), 10, partition="iid")
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, md5 in MNIST_MD5.items():
        content = gzip.decompress((source / f"{name}.gz").read_bytes())
        assert hashlib.md5(content).hexdigest() == md5, f"{name}: not the published MNIST"
        (raw / name).write_bytes(content)
    plain = VisionDataset("mnist", str(tmp_path), 10, partition="iid")
    for split, n in (("train", 60_000), ("test", 10_000)):
        assert gz.images[split].shape == (n, 1, 28, 28)
        np.testing.assert_array_equal(gz.images[split], plain.images[split])
        np.testing.assert_array_equal(gz.labels[split], plain.labels[split])
    np.testing.assert_array_equal(np.bincount(gz.labels["test"]),
                                  [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
    assert gz.num_samples(np.arange(10)).sum() == 60_000


def test_femnist_subset_reads_every_writer_and_reports_the_test_only_ones(femnist_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="fastfair.sim.data"):
        data = LeafDataset("femnist", str(femnist_dir))
    assert data.num_clients == 105
    dropped = [r.getMessage() for r in caplog.records if "no training data" in r.getMessage()]
    assert len(dropped) == 1 and "79 users of the test files (2403 test samples)" in dropped[0]
    ids = np.arange(105)
    train, test = data.client_data(ids, "train"), data.client_data(ids, "test")
    assert train.x.shape == (14_708, 1, 28, 28) and test.x.shape == (1_685, 1, 28, 28)
    assert 0 <= float(train.x.min()) and float(train.x.max()) <= 1
    assert int(train.y.max()) < 62 and (test.counts > 0).all()


@pytest.mark.parametrize("layout", ["flat", "leaf"])
def test_shakespeare_test_counts_are_the_records_leaf_writes(shakespeare_dir, tmp_path, caplog,
                                                             layout):
    folder = shakespeare_dir
    if layout == "leaf":                       # preprocess.sh's train/ and test/ folders
        folder = tmp_path
        for split in ("train", "test"):
            (tmp_path / split).mkdir()
            shutil.copy(shakespeare_dir / f"all_data_niid_023_keep_64_{split}_9.json",
                        tmp_path / split)
    with caplog.at_level(logging.WARNING, logger="fastfair.sim.data"):
        data = open_files("shakespeare", str(folder))
        ids = np.arange(data.num_clients)
        test = data.client_data(ids, "test")
        data.client_data(ids, "test")
    assert data.num_clients == 10
    assert data.num_samples(ids).sum() == 41_990
    assert test.counts.sum() == 3_881 and test.x.shape == (3_881, 80)
    notes = [r.getMessage() for r in caplog.records if "79 windows fewer" in r.getMessage()]
    assert len(notes) == 1, notes
    # The labels are the windows shifted by one, then the next character.
    np.testing.assert_array_equal(test.y[:, :-1], test.x[:, 1:])


def test_adult_reads_uci_files_with_afl_split_and_any_column():
    folder = str(shared_data("adult"))
    afl = AdultDataset(folder, partition="column:education=Doctorate")
    assert afl.num_features == 108 and afl.num_clients == 2
    np.testing.assert_array_equal(afl.num_samples(np.arange(2)), [413, 32_148])
    train, test = afl.client_data(np.arange(2), "train"), afl.client_data(np.arange(2), "test")
    assert test.counts.tolist() == [181, 16_100]
    assert int(train.y.sum()) == 7_841 and int(test.y.sum()) == 3_846   # >50K rows
    numeric = train.x[:, 0]                                            # age, standardised
    assert abs(float(numeric.mean())) < 1e-4 and abs(float(numeric.std()) - 1) < 1e-3
    one_hot = train.x[:, 1:10]                                         # workclass, ? included
    assert afl.feature_names[1:10][0] == "workclass=?"
    np.testing.assert_array_equal(one_hot.sum(1), np.ones(32_561))
    by_sex = AdultDataset(folder, partition="column:sex")
    assert by_sex.client_names == ["sex = Female", "sex = Male"]
    assert by_sex.num_samples(np.arange(2)).sum() == 32_561


def test_adult_categorical_encoding_has_the_q_ffl_authors_99_features():
    # litian96/fair_flearn data/adult/create_dataset.py: input_shape [1, 8, 1, 16, 1, 7, 14, 6,
    # 5, 2, 1, 1, 1, 41], the numeric (1) columns left out: 99 one-hot features, a "?" none.
    folder = str(shared_data("adult"))
    data = AdultDataset(folder, partition="column:education=Doctorate", features="categorical")
    assert data.num_features == 99
    widths = {}
    for name in data.feature_names:
        column = name.split("=")[0]
        widths[column] = widths.get(column, 0) + 1
    assert widths == {"workclass": 8, "education": 16, "marital-status": 7, "occupation": 14,
                      "relationship": 6, "race": 5, "sex": 2, "native-country": 41}
    train = data.client_data(np.arange(2), "train")
    np.testing.assert_array_equal(data.num_samples(np.arange(2)), [413, 32_148])
    x = train.x.numpy()
    # the authors' client split: the feature "education=Doctorate" is 1 on client 0's rows only
    doctorate = x[:, data.feature_names.index("education=Doctorate")]
    assert doctorate[:413].all() and not doctorate[413:].any()
    # UCI's 2,399 training rows with a "?" (30,162 complete): all zeros where it is
    missing = 8 - x.sum(1)
    values, counts = np.unique(missing, return_counts=True)
    assert values.tolist() == [0, 1, 2, 3] and counts.tolist() == [30_162, 563, 1_809, 27]


def test_cifar10_jpeg_copy_reads_as_an_image_folder(tmp_path, monkeypatch):
    archive = shared_data("cifar10") / "cifar10_jpeg_q75.tar.gz"
    # The test split comes first in the archive: every name of it is counted, and the first 40
    # images of its first three classes are extracted (one folder, split 80/20 per class).
    seen = []

    def wanted(name: str) -> bool:
        seen.append(name)
        parts = name.split("/")
        return parts[1] in CIFAR10_CLASSES[:3] and int(parts[2][:4]) < 40

    extract(archive, tmp_path, wanted=wanted, stop=lambda name: name.startswith("train"))
    assert sum(n.endswith(".jpg") for n in seen) == 10_000
    assert sorted({n.split("/")[1] for n in seen if n.endswith(".jpg")}) == CIFAR10_CLASSES
    monkeypatch.setenv("FASTFAIR_CACHE_DIR", str(tmp_path / "cache"))
    data = ImageFolder(str(tmp_path / "test"), 4, partition="iid")
    assert data.classes == CIFAR10_CLASSES[:3] and data.sample_shape == (3, 32, 32)
    assert data.num_samples(np.arange(4)).sum() == 96
    assert data.client_data(np.arange(4), "test").counts.sum() == 24


@pytest.mark.parametrize("name, digest", [("femnist", "c517d005d28c8899"),
                                          ("shakespeare", "ff82880d4be85527")])
def test_the_tables_leaf_subsets_have_the_digests_docs_data_lists(name, digest, request):
    folder = request.getfixturevalue(f"{name}_dir")
    assert LeafDataset(name, str(folder)).digest == digest
    assert f"`{digest}`" in (ROOT / "docs" / "data.md").read_text()
