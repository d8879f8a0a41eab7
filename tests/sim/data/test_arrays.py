"""``ArrayDataset`` takes samples of any shape, as an ``npz-clients`` folder does (float features
of any shape, integer token ids, a label per position), and ``partition_labels`` is public API
that splits one array of labels across clients under IID, Dirichlet and pathological schemes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fastfair.sim.data as data_api
from fastfair.sim import ModuleModel, Simulation, SimulationConfig
from fastfair.sim.data import ArrayDataset, partition_labels
from tests.helpers import ROOT
from tests.helpers.arrays import requires_cuda


def _images(rng, clients=4, n=12, shape=(1, 4, 4), classes=3):
    return [(rng.random((n, *shape)).astype(np.float32), rng.integers(0, classes, n))
            for _ in range(clients)]


def test_image_arrays_keep_their_sample_shape():
    rng = np.random.default_rng(0)
    d = ArrayDataset(_images(rng), num_classes=3)
    assert d.sample_shape == (1, 4, 4) and d.num_features == 16 and d.label_shape == ()
    assert d.vocab_size is None and d.num_clients == 4
    batch = d.client_data([2, 0])
    assert batch.x.shape == (2 * 10, 1, 4, 4) and batch.x.dtype == torch.float32
    assert batch.y.shape == (20,) and batch.y.dtype == torch.int64
    empty = d.client_data([])
    assert empty.x.shape == (0, 1, 4, 4) and empty.y.shape == (0,)


def test_image_arrays_train_with_the_default_model_and_a_module():
    rng = np.random.default_rng(1)
    d = ArrayDataset(_images(rng, clients=6, n=20), num_classes=3)
    config = SimulationConfig(clients=6, per_round=3, rounds=2, eval_every=1)
    sim = Simulation(config, dataset=d)                 # logreg over the 16 features
    sim.step()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(),
                              torch.nn.Linear(2 * 2 * 2, 3))
    sim = Simulation(config, dataset=d, model=ModuleModel(net))
    record = sim.step()
    assert 0.0 <= record["acc_mean"] <= 1.0


def test_integer_x_are_token_ids_with_a_label_per_position():
    rng = np.random.default_rng(2)
    clients = [(rng.integers(0, 7, (10, 5)), rng.integers(0, 4, (10, 5))) for _ in range(3)]
    d = ArrayDataset(clients)
    assert d.sample_shape == (5,) and d.label_shape == (5,)
    assert d.vocab_size == 1 + max(int(x.max()) for x, _ in clients) and d.num_classes == 4
    batch = d.client_data([0, 1], "test")
    assert batch.x.dtype == torch.int64 and batch.x.shape == (4, 5) and batch.y.shape == (4, 5)
    empty = d.client_data([])
    assert empty.x.dtype == torch.int64 and empty.y.shape == (0, 5)
    assert ArrayDataset(clients, vocab_size=50).vocab_size == 50

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.out = torch.nn.Embedding(50, 4), torch.nn.Linear(4, 4)

        def forward(self, ids):
            return self.out(self.embed(ids))

    torch.manual_seed(0)
    config = SimulationConfig(clients=3, per_round=2, rounds=1, eval_every=1)
    sim = Simulation(config, dataset=ArrayDataset(clients, vocab_size=50),
                     model=ModuleModel(Tagger()))
    assert 0.0 <= sim.step()["acc_mean"] <= 1.0
    with pytest.raises(ValueError, match="takes float features; the data set's samples are "
                       "token ids"):
        Simulation(config, dataset=d)                   # logreg: cast features to float


@pytest.mark.parametrize("make, error, message", [
    (lambda r: [(r.random((4, 1, 3, 3)), [0] * 4), (r.random((4, 1, 3, 2)), [0] * 4)],
     ValueError, r"same sample shape .*x \['n', 1, 3, 2\] float with y \['n'\]; "
                 r"x \['n', 1, 3, 3\] float"),
    (lambda r: [(r.random((4, 3)), [0] * 4), (r.integers(0, 5, (4, 3)), [0] * 4)],
     ValueError, r"kind of x \(float features or integer token ids\)"),
    (lambda r: [(r.integers(0, 5, (4, 3)), [0] * 4), (r.integers(0, 5, (4, 3)), [[0] * 3] * 4)],
     ValueError, r"and label shape; got x \['n', 3\] ids with y \['n', 3\]"),
    (lambda r: [(np.array([[1, -2]] * 4), [0] * 4)],
     ValueError, r"train\[0\]: x holds token ids \(integers\), which must be >= 0; got -2"),
    (lambda r: [(r.random(4), [0] * 4)],
     ValueError, r"train\[0\] must be x \[n, F\] and y \[n\] .*one feature per sample: x \[n, 1\]"),
    (lambda r: [(r.integers(0, 256, (4, 1, 3, 3)).astype(np.uint8), [0] * 4)],
     ValueError, r"train\[0\]: x is uint8 of shape \(4, 1, 3, 3\), which looks like image "
                 r"pixels: pass float features, e.g. x.astype\(np.float32\) / 255"),
    (lambda r: [(np.array([["a", "b"]] * 4), [0] * 4)],
     TypeError, r"train\[0\]: x must hold float features or integer token ids; got dtype <U1"),
])
def test_arrays_that_disagree_are_refused_naming_the_client(make, error, message):
    with pytest.raises(error, match=message):
        ArrayDataset(make(np.random.default_rng(0)))


def test_single_arrays_are_refused_with_the_way_to_split_them():
    # ArrayDataset(x, y), as a TensorDataset takes them: train is then x, each row a "client".
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 3, 4, 4)).astype(np.float32), rng.integers(0, 3, 40)
    with pytest.raises(TypeError, match=r"train\[0\] must be client 0's pair \(x, y\); got "
                       r"ndarray\. .*ArrayDataset\(\[\(x\[p\], y\[p\]\) for p in "
                       r"partition_labels\(y, num_clients, 'iid', seed=0\)\]\)"):
        ArrayDataset(x, y)
    pairs = [(x[p], y[p]) for p in partition_labels(y, 4, "iid", seed=0)]
    with pytest.raises(TypeError, match=r"test\[1\] must be client 1's pair"):
        ArrayDataset(pairs, [pairs[0], (x, y, y), *pairs[2:]])
    assert ArrayDataset(pairs).sample_shape == (3, 4, 4)  # the way the message gives


def test_vocab_size_is_checked():
    ids = [(np.array([[0, 9]] * 4), [0] * 4)]
    with pytest.raises(ValueError, match="token ids must be < vocab_size=5; x holds 9"):
        ArrayDataset(ids, vocab_size=5)
    with pytest.raises(ValueError, match="vocab_size is for token ids .* drop vocab_size"):
        ArrayDataset([(np.ones((4, 2)), [0] * 4)], vocab_size=5)


def test_test_arrays_check_their_image_values():
    rng = np.random.default_rng(3)
    train = _images(rng, clients=2)
    test = [(x.copy(), y) for x, y in train]
    test[1][0][3, 0, 1, 2] = np.inf
    with pytest.raises(ValueError, match=r"test\[1\]: x has inf at sample 3"):
        ArrayDataset(train, test=test)


# ------------------------------------------------------------------------ partition_labels
def test_partition_labels_is_public_and_documented():
    assert "partition_labels" in data_api.__all__ and data_api.partition_labels is partition_labels
    doc = partition_labels.__doc__
    for section in ("Parameters", "Returns", "Raises", "Examples", "Dirichlet(alpha * 1_K)",
                    "K * classes_per_client"):
        assert section in doc, section
    assert "partition_labels" in (ROOT / "docs" / "simulator.md").read_text()


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "pathological"])
def test_partition_labels_covers_every_sample_once_for_your_own_arrays(scheme):
    rng = np.random.default_rng(4)
    y = rng.integers(0, 5, 300)
    x = rng.random((300, 1, 2, 2)).astype(np.float32)
    parts = partition_labels(list(y), 10, scheme, seed=7, alpha=0.3)
    together = np.concatenate(parts)
    assert np.array_equal(np.sort(together), np.arange(300))
    assert all(np.array_equal(p, np.sort(p)) and p.dtype == np.int64 for p in parts)
    again = partition_labels(y, 10, scheme, seed=7, alpha=0.3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    if scheme == "iid":
        assert {len(p) for p in parts} == {30}
    if scheme == "pathological":
        assert max(len(np.unique(y[p])) for p in parts) <= 4  # 2 shards, each may straddle
    d = ArrayDataset([(x[p], y[p]) for p in parts], num_classes=5)
    assert d.num_clients == 10 and d.sample_shape == (1, 2, 2)


@pytest.mark.parametrize("labels, kwargs, error, message", [
    (np.zeros((10, 2), dtype=np.int64), {}, ValueError, r"labels must be \[n\] class labels"),
    (np.zeros(10), {}, TypeError, r"labels must be integer class labels; got dtype float64"),
    (np.zeros(10, dtype=np.int64), {"num_clients": 6}, ValueError,
     r"num_clients must be in \[1, 5\] for 10 samples; got 6"),
    (np.zeros(10, dtype=np.int64), {"scheme": "random"}, ValueError, "scheme must be 'iid'"),
    (np.zeros(10, dtype=np.int64), {"alpha": 0.0}, ValueError, "alpha must be > 0"),
])
def test_partition_labels_refuses_bad_arguments(labels, kwargs, error, message):
    arguments = {"num_clients": 2, "scheme": "dirichlet", **kwargs}
    with pytest.raises(error, match=message):
        partition_labels(labels, arguments["num_clients"], arguments["scheme"], seed=0,
                         alpha=arguments.get("alpha", 0.5))


def _image_clients(clients: int = 7, seed: int = 0):
    rng = np.random.default_rng(seed)
    part = [(rng.normal(size=(n, 3, 4, 4)).astype(np.float32), rng.integers(0, 5, size=n))
            for n in rng.integers(1, 30, size=clients)]
    return ArrayDataset(part, test=[(x[:2], y[:2]) for x, y in part], num_classes=5)


def _pixel_clients(clients: int = 6, seed: int = 1):
    """A vision-style data set whose stored images are uint8 pixels."""
    from fastfair.sim.data.vision import SplitArrays

    rng = np.random.default_rng(seed)
    images = {s: rng.integers(0, 256, size=(n, 3, 4, 4), dtype=np.uint8)
              for s, n in (("train", 120), ("test", 40))}
    labels = {s: rng.integers(0, 4, size=len(images[s])) for s in images}
    return SplitArrays(images, labels, (3, 4, 4), 4, clients=clients, partition="iid")


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("make", [_image_clients, _pixel_clients])
def test_a_resident_split_gathers_the_batch_copied_from_the_host(split, make):
    from fastfair.sim.data.base import ResidentSplit

    d = make()
    resident = ResidentSplit(*d._whole(split), torch.device("cpu"))
    for ids in (np.array([3, 0, 5, 3]), np.arange(6), np.array([], dtype=np.int64)):
        expected, got = d.client_data(ids, split), resident.gather(ids)
        assert got.x.dtype == expected.x.dtype == torch.float32
        assert torch.equal(got.x, expected.x) and torch.equal(got.y, expected.y)
        np.testing.assert_array_equal(got.offsets, expected.offsets)


def test_a_split_is_sized_and_copied_once_then_looked_up():
    from fastfair.sim.data.base import resident_split

    d, calls = _image_clients(), []

    def size():
        calls.append("size")
        return 1

    def whole():
        calls.append("whole")
        return d._whole("train")

    first = resident_split(d, "train", torch.device("cpu"), size, whole)
    again = resident_split(d, "train", torch.device("cpu"), size, whole)
    assert first is again and calls == ["size", "whole"]
    assert torch.equal(first.gather(np.array([2])).x, d.client_data(np.array([2])).x)


@requires_cuda
@pytest.mark.parametrize("make", [_image_clients, _pixel_clients])
def test_cuda_cohorts_are_gathered_from_one_copy_on_the_device(make):
    d = make()
    ids = np.array([5, 1, 1, 4])
    host = d.client_data(ids, "train")
    first = d.client_data(ids, "train", device=torch.device("cuda"))
    kept = d._on_device[("train", "cuda")]
    again = d.client_data(np.array([2]), "train", device=torch.device("cuda"))
    assert d._on_device[("train", "cuda")] is kept and first.x.device.type == "cuda"
    assert torch.equal(first.x.cpu(), host.x) and torch.equal(first.y.cpu(), host.y)
    assert torch.equal(again.x.cpu(), d.client_data(np.array([2]), "train").x)
