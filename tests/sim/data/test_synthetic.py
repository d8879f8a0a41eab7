"""Data sets of the simulator: reproducibility, distributions, partitions, user arrays."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from fastfair.sim.data.arrays import ArrayDataset, digits_dataset, partition_labels
from fastfair.sim.data.synthetic import SyntheticDataset


def test_synthetic_is_reproducible_per_client_in_any_order():
    d = SyntheticDataset(10**7, 1.0, 1.0, seed=3)
    ids = np.array([9_999_999, 5, 123_456])
    a = d.client_data(ids)
    b = d.client_data(ids[::-1])
    for k in range(3):
        rows_a = slice(a.offsets[k], a.offsets[k + 1])
        rows_b = slice(b.offsets[2 - k], b.offsets[3 - k])
        torch.testing.assert_close(a.x[rows_a], b.x[rows_b], rtol=0, atol=0)
        torch.testing.assert_close(a.y[rows_a], b.y[rows_b], rtol=0, atol=0)
    # Another seed gives other data.
    other = SyntheticDataset(10**7, 1.0, 1.0, seed=4).client_data(ids[:1])
    assert not torch.equal(other.x[:5], a.x[:5])


def test_a_fresh_cohort_reuses_the_memory_of_a_batch_no_one_holds():
    """Cohorts are generated into one host array, again only once every tensor of the last
    batch is gone: a batch still held keeps its values, and the data equal a new data set's."""
    ds = SyntheticDataset(1000, seed=3)
    first = ds.client_data(np.arange(0, 40))
    kept = first.x.clone()
    second = ds.client_data(np.arange(40, 80))  # first is alive: other memory
    assert second.x.data_ptr() != first.x.data_ptr()
    torch.testing.assert_close(first.x, kept, rtol=0, atol=0)
    view = second.x[5]
    pointer = second.x.data_ptr()
    del second
    dropped = ds.client_data(np.arange(80, 120)).x.data_ptr()  # dropped at once
    assert dropped != pointer  # a view of the second batch still holds its memory
    del view
    third = ds.client_data(np.arange(120, 150))  # fewer rows: fits
    assert third.x.data_ptr() == dropped
    fresh = SyntheticDataset(1000, seed=3).client_data(np.arange(120, 150))
    torch.testing.assert_close(third.x, fresh.x, rtol=0, atol=0)
    assert torch.equal(third.y, fresh.y)
    del third
    copied = copy.deepcopy(ds)  # starts with no buffer: never writes into the original's
    assert copied.client_data(np.arange(120, 150)).x.data_ptr() != dropped
    assert ds.client_data(np.arange(120, 150)).x.data_ptr() == dropped
    torch.testing.assert_close(pickle.loads(pickle.dumps(ds)).client_data(np.arange(5)).x,
                               ds.client_data(np.arange(5)).x, rtol=0, atol=0)


def test_synthetic_train_and_test_partition_each_client():
    d = SyntheticDataset(100, 0.5, 0.5, seed=0)
    ids = np.arange(20)
    train, test = d.client_data(ids, "train"), d.client_data(ids, "test")
    total = d.total_samples(ids)
    np.testing.assert_array_equal(train.counts + test.counts, total)
    np.testing.assert_array_equal(train.counts, d.num_samples(ids))
    np.testing.assert_array_equal(train.counts, np.floor(0.8 * total + 0.5).astype(np.int64))
    assert train.x.dtype == torch.float32 and train.y.dtype == torch.int64
    assert int(train.y.min()) >= 0 and int(train.y.max()) < 10


def test_synthetic_sizes_follow_the_power_law():
    d = SyntheticDataset(10**6, 1.0, 1.0, seed=1, max_samples=10**9)
    n = d.total_samples(np.arange(200_000))
    z = (np.log(n - 50 + 0.5) - 4.0) / 2.0  # floor(exp(4 + 2z)) + 50, inverted up to the floor
    assert n.min() >= 50
    assert abs(np.median(z)) < 0.02           # median of N(0, 1) is 0
    assert abs(np.mean(z > 1.0) - 0.1587) < 0.01  # P(Z > 1)
    capped = SyntheticDataset(10**6, 1.0, 1.0, seed=1,
                              max_samples=300).total_samples(np.arange(1000))
    assert capped.max() == 300


def test_synthetic_feature_covariance_and_labels():
    d = SyntheticDataset(400, 0.0, 0.0, seed=2, iid=True)
    # With alpha = beta = 0 and iid, features are N(0, diag(j^-1.2)).
    batch = d.client_data(np.arange(400))
    x = batch.x.double()
    assert x.shape[0] > 40_000
    expected = np.arange(1, 61) ** -1.2
    np.testing.assert_allclose(x.var(0).numpy(), expected, rtol=0.05)
    np.testing.assert_allclose(x.mean(0).numpy(), 0.0, atol=0.02)
    # Labels are the argmax of the shared linear model.
    W, b = d._shared_model
    torch.testing.assert_close(batch.y, torch.argmax(batch.x @ W + b, dim=1))


def test_synthetic_labels_follow_each_clients_own_model():
    d = SyntheticDataset(50, 1.0, 1.0, seed=5)
    ids = np.array([3, 41, 7])
    batch = d.client_data(ids, "test")
    W, b, v = d._model(ids, torch.device("cpu"))
    for k in range(3):
        rows = slice(int(batch.offsets[k]), int(batch.offsets[k + 1]))
        torch.testing.assert_close(batch.y[rows], torch.argmax(batch.x[rows] @ W[k] + b[k], 1))


def test_bad_ids_and_arguments():
    d = SyntheticDataset(10)
    with pytest.raises(ValueError, match="client id 10 is out of range"):
        d.client_data([1, 10])
    with pytest.raises(ValueError, match="split must be"):
        d.client_data([1], "valid")
    with pytest.raises(ValueError, match="num_clients must be >= 1"):
        SyntheticDataset(0)


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "pathological"])
def test_partitions_cover_every_sample_once(scheme):
    labels = np.repeat(np.arange(10), 50)
    parts = partition_labels(labels, 20, scheme, seed=0, alpha=0.3, classes_per_client=2)
    allidx = np.concatenate(parts)
    assert len(parts) == 20 and min(len(p) for p in parts) >= 2
    np.testing.assert_array_equal(np.sort(allidx), np.arange(500))


def test_partition_skew():
    labels = np.repeat(np.arange(10), 200)
    patho = partition_labels(labels, 50, "pathological", seed=1, classes_per_client=2)
    assert max(len(np.unique(labels[p])) for p in patho) <= 2
    skewed = partition_labels(labels, 50, "dirichlet", seed=1, alpha=0.05)
    flat = partition_labels(labels, 50, "dirichlet", seed=1, alpha=100.0)

    def mean_classes(parts):
        return np.mean([len(np.unique(labels[p])) for p in parts])

    assert mean_classes(skewed) < 4 < 9 < mean_classes(flat)
    with pytest.raises(ValueError, match="scheme must be"):
        partition_labels(labels, 5, "random", seed=0)


def test_digits_dataset():
    d = digits_dataset(30, "dirichlet", seed=0, alpha=0.5)
    assert (d.num_clients, d.num_features, d.num_classes) == (30, 64, 10)
    ids = np.arange(30)
    train, test = d.client_data(ids), d.client_data(ids, "test")
    assert int(train.counts.sum() + test.counts.sum()) == 1797
    assert float(train.x.max()) <= 1.0 and float(train.x.min()) >= 0.0


def test_array_dataset():
    rng = np.random.default_rng(0)
    clients = [(rng.random((n, 3)), rng.integers(0, 4, n)) for n in (5, 10, 1)]
    d = ArrayDataset(clients, num_classes=4)
    np.testing.assert_array_equal(d.num_samples([0, 1, 2]), [4, 8, 1])
    b = d.client_data([2, 0])
    np.testing.assert_array_equal(b.counts, [1, 4])
    torch.testing.assert_close(b.x[1:], torch.as_tensor(clients[0][0][:4], dtype=torch.float32))
    with pytest.raises(ValueError, match="same number of features"):
        ArrayDataset([(np.ones((2, 3)), [0, 1]), (np.ones((2, 4)), [0, 1])])
    with pytest.raises(ValueError, match=r"train\[0\]: labels must be < num_classes=2; its y"):
        ArrayDataset([(np.ones((2, 3)), [0, 5])], num_classes=2)
    with pytest.raises(ValueError, match=r"train\[0\] must be x \[n, F\] and y \[n\]"):
        ArrayDataset([(np.ones((2, 3)), [0, 1, 1])])


def test_array_dataset_refuses_labels_that_are_not_integers():
    x = np.ones((3, 2))
    # Integer-valued floats are labels; 1.7 was silently truncated to class 1.
    assert ArrayDataset([(x, [0.0, 1.0, 2.0])]).client_data([0], "train").y.tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"train\[1\]: y must hold integer class labels; got "
                       r"1\.7 at position 2"):
        ArrayDataset([(x, [0, 1, 2]), (x, np.array([0.0, 1.0, 1.7]))])
    with pytest.raises(ValueError, match=r"test\[0\]: y must hold integer class labels; got nan"):
        ArrayDataset([(x, [0, 1, 2])], test=[(x, torch.tensor([0.0, float("nan"), 1.0]))])
    with pytest.raises(TypeError, match=r"train\[0\]: y must hold integer class labels; got "
                       "dtype <U1"):
        ArrayDataset([(x, ["a", "b", "c"])])
