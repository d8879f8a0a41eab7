"""Loaders of the standard on-disk formats, on small files written in those formats: LEAF JSON,
torchvision's IDX files and CIFAR pickles, per-client .npz files."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch

from fastfair.sim.data.catalog import count_clients, open_files
from fastfair.sim.data.leaf_json import LeafFile, parse_unit_pixels
from fastfair.sim.data.vision import read_cifar_batch, read_idx
from tests.helpers import sim_files as sf


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def _rows(batch, k):
    return slice(int(batch.offsets[k]), int(batch.offsets[k + 1]))


def test_femnist_reads_every_user_exactly(tmp_path, rng):
    data = sf.split_users(rng, sf.femnist_users(rng, [12, 3, 25, 7, 9, 14, 4]))
    sf.write_leaf(tmp_path, data)
    d = open_files("femnist", str(tmp_path))
    users = list(data["train"])
    assert d.num_clients == 7 and d.sample_shape == (1, 28, 28) and d.num_classes == 62
    np.testing.assert_array_equal(d.num_samples(np.arange(7)),
                                  [len(data["train"][u]["y"]) for u in users])
    order = np.array([5, 0, 6, 2])          # any order, across files
    for split in ("train", "test"):
        batch = d.client_data(order, split)
        for k, client in enumerate(order):
            entry = data[split][users[client]]
            x = torch.tensor(entry["x"], dtype=torch.float64).reshape(-1, 1, 28, 28)
            torch.testing.assert_close(batch.x[_rows(batch, k)].double(), x, rtol=0, atol=1e-7)
            assert batch.y[_rows(batch, k)].tolist() == entry["y"]


def test_leaf_opens_from_headers_and_reads_a_client_when_sampled(tmp_path, rng):
    data = sf.split_users(rng, sf.femnist_users(rng, [5, 6, 7]))
    sf.write_leaf(tmp_path, data, per_file=1)
    users = list(data["train"])
    # Break the second user's entry: opening (headers only) and the other users still work.
    path = sorted((tmp_path / "train").glob("*.json"))[1]
    text = path.read_text()
    cut = text.index('"x"', text.index('"user_data"'))
    path.write_text(text[:cut] + '"x": [[2.5, "oops"]], "y": [1]}}}')
    d = open_files("femnist", str(tmp_path))
    assert d.num_clients == 3 and count_clients("femnist", str(tmp_path)) == 3
    assert d.client_data([0, 2]).counts.tolist() == [len(data["train"][u]["y"])
                                                    for u in (users[0], users[2])]
    with pytest.raises(ValueError, match="expected samples of 784 numbers each"):
        d.client_data([1])


def test_leaf_finds_entries_out_of_order_and_far_from_the_guess(tmp_path, rng):
    users = sf.femnist_users(rng, [40, 1, 1, 1, 30, 2, 1, 50])
    names = list(users)
    shuffled = {u: users[u] for u in reversed(names)}   # user_data in reverse order of users
    (tmp_path / "f.json").write_text(json.dumps(
        {"users": names, "num_samples": [len(users[u]["y"]) for u in names],
         "user_data": shuffled}))
    leaf = LeafFile(str(tmp_path / "f.json"))
    for i in (3, 0, 7, 5):
        x, y = leaf.numeric_entry(i)
        assert json.loads(y) == users[names[i]]["y"]
        np.testing.assert_array_equal(parse_unit_pixels(x, 784),
                                      np.rint(np.array(users[names[i]]["x"]) * 255))


def test_leaf_header_and_entry_errors_name_the_problem(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"user_data": {}, "users": [], "num_samples": []}))
    with pytest.raises(ValueError, match="before 'user_data'"):
        LeafFile(str(tmp_path / "a.json"))
    (tmp_path / "b.json").write_text(json.dumps({"users": ["u", "v"], "num_samples": [1, 1],
                                                 "user_data": {"u": {"x": [[0.0]], "y": [0]}}}))
    with pytest.raises(ValueError, match="'v' is listed in 'users' but has no entry"):
        LeafFile(str(tmp_path / "b.json")).numeric_entry(1)
    with pytest.raises(ValueError, match=r"no train files: .*/train/\*.json .* or .*\*train\*"):
        open_files("femnist", str(tmp_path / "a.json").rsplit("/", 1)[0])


def test_unit_pixels_are_exact_and_other_numbers_fall_back_to_float():
    pixels = np.arange(256, dtype=np.uint8).reshape(1, 256)
    text = json.dumps((pixels / 255).tolist()).encode()
    out = parse_unit_pixels(text, 256)
    assert out.dtype == np.uint8 and np.array_equal(out, pixels)
    other = parse_unit_pixels(b"[[0.5, 1e-3, 0.3], [1e-9, 0, 1]]", 3)
    assert other.dtype == np.float32
    np.testing.assert_array_equal(other, np.float32([[0.5, 1e-3, 0.3], [1e-9, 0, 1]]))
    for text, where in ((b"[[0.5, 1e-3, -1.0], [0, 0, 1]]", "sample 0 has -1 at pixel 2"),
                        (b"[[0.5, 1e-3, 0.0], [2.0, 0, 1]]", "sample 1 has 2 at pixel 0")):
        with pytest.raises(ValueError, match=rf"pixels must lie in \[0, 1\].*{where}"):
            parse_unit_pixels(text, 3)
    with pytest.raises(ValueError, match="samples of 3 numbers"):
        parse_unit_pixels(b"[[0.5, 1.0], [0.5, 1.0, 0.0, 1.0]]", 3)


def test_shakespeare_next_character_ids(tmp_path, rng):
    data = sf.split_users(rng, sf.shakespeare_users(rng, [6, 4]))
    sf.write_leaf(tmp_path, data)
    d = open_files("shakespeare", str(tmp_path))
    assert d.sample_shape == (80,) and d.label_shape == (80,) and d.vocab_size == 81
    batch = d.client_data([1])
    entry = data["train"][list(data["train"])[1]]
    ids = [[(sf.LETTERS + "~").index(c) if c in sf.LETTERS else 80 for c in s]
           for s in entry["x"]]
    assert batch.x.tolist() == ids and batch.x.dtype == torch.int64
    nxt = [sf.LETTERS.index(c) if c in sf.LETTERS else 80 for c in entry["y"]]
    assert batch.y[:, :-1].tolist() == [row[1:] for row in ids]
    assert batch.y[:, -1].tolist() == nxt


def test_sent140_word_ids_are_left_padded_hashes(tmp_path, rng):
    data = sf.split_users(rng, sf.sent140_users(rng, [5, 3]))
    sf.write_leaf(tmp_path, data)
    d = open_files("sent140", str(tmp_path))
    batch = d.client_data([0])
    rows = data["train"]["user0"]["x"]
    for row, ids in zip(rows, batch.x.tolist()):
        words = len(row[4].replace("!", " ! ").replace("?", " ? ").split()[:25])
        assert ids[25 - words:] and all(i > 0 for i in ids[25 - words:])
        assert all(i == 0 for i in ids[:25 - words])
        assert max(ids) < d.vocab_size
    # The same word always gets the same id.
    same = d.client_data([0, 1]).x
    assert same.unique().numel() <= 11


def test_celeba_reads_images_named_by_the_json(tmp_path, rng):
    data = sf.split_users(rng, sf.celeba_users(rng, [3, 4], tmp_path / "raw" / "img_align_celeba"))
    sf.write_leaf(tmp_path, data)
    d = open_files("celeba", str(tmp_path))
    batch = d.client_data([1])
    assert batch.x.shape == (3, 3, 84, 84) and d.num_classes == 2
    assert batch.y.tolist() == [int(v) for v in data["train"]["101"]["y"]]
    assert 0.0 <= float(batch.x.min()) and float(batch.x.max()) <= 1.0
    sf.write_leaf(tmp_path / "no_images", data)
    with pytest.raises(ValueError, match="img_align_celeba"):
        open_files("celeba", str(tmp_path / "no_images"))


def test_leaf_clients_are_a_seeded_subset(tmp_path, rng):
    sf.write_leaf(tmp_path, sf.split_users(rng, sf.femnist_users(rng, [3] * 9)))
    a = open_files("femnist", str(tmp_path), 4, seed=1)
    b = open_files("femnist", str(tmp_path), 4, seed=2)
    assert a.num_clients == 4 and a.users != b.users and set(a.users) < set(
        open_files("femnist", str(tmp_path)).users)
    with pytest.raises(ValueError, match=r"clients must be in \[1, 9\]"):
        open_files("femnist", str(tmp_path), 10)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_files_round_trip(tmp_path, rng, compress):
    images = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    sf.write_idx(tmp_path / "img", images, compress)
    path = str(tmp_path / "img") + (".gz" if compress else "")
    np.testing.assert_array_equal(read_idx(path), images)
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01" + b"\x00" * 8)   # float IDX
    with pytest.raises(ValueError, match="not an IDX file of uint8"):
        read_idx(str(tmp_path / "bad"))


@pytest.mark.parametrize("name,folder", [("mnist", "MNIST"), ("fmnist", "FashionMNIST")])
@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "pathological"])
def test_mnist_layouts_split_by_every_scheme(tmp_path, rng, name, folder, scheme):
    sf.write_mnist(tmp_path, folder, rng, compress=name == "fmnist")
    d = open_files(name, str(tmp_path), 10, partition=scheme, dirichlet_alpha=0.3,
                   classes_per_client=2)
    train = d.client_data(np.arange(10))
    assert train.x.shape == (600, 1, 28, 28) and train.counts.sum() == 600
    images = read_idx(str(tmp_path / folder / "raw" / "train-images-idx3-ubyte")
                      + (".gz" if name == "fmnist" else ""))
    rows = d.parts["train"][3]
    torch.testing.assert_close(train.x[_rows(train, 3)],
                               torch.from_numpy(images[rows]).float().unsqueeze(1) / 255)
    if scheme == "pathological":   # two shards of the label-sorted samples, each <= 2 classes
        classes = [len(np.unique(d.labels["train"][p])) for p in d.parts["train"]]
        assert max(classes) <= 4 and np.mean(classes) < 3.5
    # Each client's test classes are among its training classes, in about the same mix.
    for k in range(10):
        seen = set(d.labels["train"][d.parts["train"][k]])
        assert set(d.labels["test"][d.parts["test"][k]]) <= seen
    assert sum(len(p) for p in d.parts["test"]) == 100


@pytest.mark.parametrize("classes", [10, 100])
def test_cifar_pickles(tmp_path, rng, classes):
    sf.write_cifar(tmp_path, rng, classes=classes)
    name = "cifar10" if classes == 10 else "cifar100"
    d = open_files(name, str(tmp_path), 5, partition="iid")
    assert d.sample_shape == (3, 32, 32) and d.num_classes == classes
    assert d.client_data(np.arange(5)).counts.sum() == 500
    folder = tmp_path / ("cifar-10-batches-py" if classes == 10 else "cifar-100-python")
    first = folder / ("data_batch_1" if classes == 10 else "train")
    images, labels = read_cifar_batch(str(first), "labels" if classes == 10 else "fine_labels")
    with open(first, "rb") as f:
        raw = pickle.load(f, encoding="latin1")
    np.testing.assert_array_equal(images.reshape(len(labels), -1), raw["data"])


def test_cifar_unpickler_runs_no_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({"data": Evil(), "labels": []}, protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="refusing to load .*print"):
        read_cifar_batch(str(path), "labels")


def test_vision_files_missing_say_where_and_how(tmp_path):
    with pytest.raises(ValueError, match="pass --download or see docs/data.md"):
        open_files("cifar10", str(tmp_path), 5)
    with pytest.raises(ValueError, match="train-images-idx3-ubyte"):
        open_files("mnist", str(tmp_path), 5)
    try:
        import torchvision  # noqa: F401
    except Exception:  # absent, or built for another torch: --download says so
        with pytest.raises(ValueError, match="--download uses torchvision"):
            open_files("mnist", str(tmp_path), 5, download=True)
    else:
        pytest.skip("torchvision imports here; --download would fetch MNIST")


@pytest.mark.parametrize("with_test", [True, False])
def test_npz_clients(tmp_path, rng, with_test):
    sf.write_npz_clients(tmp_path, rng, [10, 5, 8], with_test=with_test, shape=(2, 3))
    d = open_files("npz-clients", str(tmp_path))
    assert d.num_clients == 3 and d.sample_shape == (2, 3) and d.vocab_size is None
    with np.load(tmp_path / "client_001.npz") as z:
        x, y = z["x"], z["y"]
        test = (z["x_test"], z["y_test"]) if with_test else (x[4:], y[4:])
        train = (x, y) if with_test else (x[:4], y[:4])
    for split, (xs, ys) in (("train", train), ("test", test)):
        batch = d.client_data([1], split)
        np.testing.assert_array_equal(batch.x.numpy(), xs)
        np.testing.assert_array_equal(batch.y.numpy(), ys)


def test_npz_tokens_and_errors(tmp_path, rng):
    for k in range(2):
        np.savez(tmp_path / f"c{k}.npz", x=rng.integers(0, 50 + k, (4, 7)), y=rng.integers(0, 2, 4))
    d = open_files("npz-clients", str(tmp_path))
    top = max(int(np.load(tmp_path / f"c{k}.npz")["x"].max()) for k in range(2))
    assert d.vocab_size == top + 1
    assert d.client_data([0]).x.dtype == torch.int64
    np.savez(tmp_path / "c2.npz", x=np.zeros((3, 7), np.float32), y=np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="same sample shape, kind"):
        open_files("npz-clients", str(tmp_path))
    (tmp_path / "c2.npz").unlink()
    np.savez(tmp_path / "c3.npz", x=np.zeros((3, 7), np.int64))
    with pytest.raises(ValueError, match="must hold x and y"):
        open_files("npz-clients", str(tmp_path))


def test_download_makes_its_data_dir_and_names_the_data_extra(tmp_path, monkeypatch):
    import sys
    import types

    from fastfair.sim.config import SimulationConfig
    from fastfair.sim.data.vision import download

    target = tmp_path / "not" / "yet"
    config = SimulationConfig(dataset="mnist", data_dir=str(target), download=True)
    assert config.download and not target.exists()        # made when the files are fetched
    fetched = []

    class MNIST:
        def __init__(self, root, train, download):
            assert download and (tmp_path / "not" / "yet").is_dir()
            fetched.append(train)

    fake = types.ModuleType("torchvision")
    fake.datasets = types.SimpleNamespace(MNIST=MNIST, FashionMNIST=None, CIFAR10=None,
                                          CIFAR100=None)
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    download("mnist", str(target))
    assert fetched == [True, False]
    monkeypatch.setitem(sys.modules, "torchvision", None)   # not installed
    with pytest.raises(ValueError, match=r'pip install "fastfair\[data\]"'):
        download("mnist", str(tmp_path / "other"))
    with pytest.raises(ValueError, match="data_dir .* must be an existing folder"):
        SimulationConfig(dataset="mnist", data_dir=str(target / "absent"))


def test_open_files_with_download_makes_the_folder_before_fetching(tmp_path, monkeypatch):
    import sys
    import types

    target = tmp_path / "newdir"
    roots = []

    class MNIST:  # fetches nothing: the reader then names the missing files
        def __init__(self, root, train, download):
            roots.append(os.path.isdir(root))

    fake = types.ModuleType("torchvision")
    fake.datasets = types.SimpleNamespace(MNIST=MNIST, FashionMNIST=None, CIFAR10=None,
                                          CIFAR100=None)
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    with pytest.raises(ValueError, match="train-images-idx3-ubyte"):
        open_files("mnist", str(target), 5, download=True)
    assert target.is_dir() and roots == [True, True]


def test_the_leaf_reader_logs_a_digest_of_its_clients(tmp_path, rng, caplog):
    import hashlib
    import logging

    from fastfair.sim.data.leaf import LeafDataset, clients_digest

    data = sf.split_users(rng, sf.femnist_users(rng, [12, 3, 25]))
    sf.write_leaf(tmp_path / "a", data, per_file=2)
    sf.write_leaf(tmp_path / "b", data, per_file=1)       # other files, same clients
    lines = "".join(sorted(f"{u}\t{len(data['train'][u]['y'])}\t{len(data['test'][u]['y'])}\n"
                           for u in data["train"]))
    expected = hashlib.sha256(lines.encode()).hexdigest()[:16]
    with caplog.at_level(logging.INFO, logger="fastfair.sim.data"):
        a = LeafDataset("femnist", str(tmp_path / "a"))
    assert a.digest == expected == LeafDataset("femnist", str(tmp_path / "b")).digest
    n_train, n_test = (sum(len(d["y"]) for d in data[s].values()) for s in ("train", "test"))
    assert (f"3 clients, {n_train} training and {n_test} test samples; clients digest "
            f"{expected}") in caplog.text
    fewer = LeafDataset("femnist", str(tmp_path / "a"), clients=2, seed=0)
    assert fewer.digest != expected                        # the clients read, not the files
    assert clients_digest(["b", "a"], [1, 2], [3, 4]) == clients_digest(["a", "b"], [2, 1], [4, 3])
    assert clients_digest(["a"], [1], [3]) != clients_digest(["a"], [1], [4])
    with pytest.raises(ValueError, match="one entry per client; got 2, 1 and 1"):
        clients_digest(["a", "b"], [1], [2])
