"""Arrays at the edges of what the binding reads: empty batches (C-contiguous, however the
producer exports their strides), and arrays DLPack cannot carry (big-endian, meta, sparse), whose
errors name the argument and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair import ops

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("make", [np.zeros, torch.zeros], ids=["numpy", "torch"])
def test_an_empty_batch_of_rows_is_accepted(make):
    """NumPy exports a (0, K) array with zero strides; it is C-contiguous (nothing is addressed)
    and was refused as 'must be contiguous within each row'."""
    x = make((0, 5), dtype=np.float64 if make is np.zeros else torch.float64)
    assert tuple(ops.softmax(x).shape) == (0, 5)
    assert tuple(ops.logsumexp(x).shape) == (0,)
    assert tuple(ops.project_simplex(x).shape) == (0, 5)
    G = make((0, 5), dtype=np.float64 if make is np.zeros else torch.float64)
    assert tuple(ops.eg_step(G, x, eta=0.1).shape) == (0, 5)
    assert tuple(ops.eg_step(G, eta=0.1, ids=np.zeros((0, 2), np.int64),
                             values=np.zeros((0, 2))).shape) == (0, 5)


def test_softmax_regression_on_a_cohort_without_rows():
    """Clients with no samples (x of shape (0, F)) keep their models; their loss is NaN."""
    F, C, K = 3, 4, 2
    params = np.random.default_rng(0).standard_normal((K, F * C + C)).astype(np.float32)
    before = params.copy()
    loss = np.zeros(K)
    ops.softmax_regression_sgd(np.zeros((0, F), np.float32), np.zeros(0, np.int64),
                               np.zeros(K + 1, np.int64), np.arange(K, dtype=np.int64),
                               np.arange(K, dtype=np.int64), np.full(K, 2, np.int64), params,
                               batch_size=4, lr=0.1, received_loss=loss)
    assert np.array_equal(params, before) and np.all(np.isnan(loss))


def test_an_empty_update_batch_still_says_why():
    with pytest.raises(ValueError, match="X has no rows: at least one client update is needed"):
        ops.weighted_average(np.zeros((0, 5), np.float32), [])


def test_big_endian_arrays_are_named_with_the_fix():
    x = np.zeros(5, dtype=">f8")
    with pytest.raises(ValueError, match=r"x has non-native byte order.*astype"):
        ops.softmax(x)
    with pytest.raises(ValueError, match=r"X has non-native byte order"):
        ops.weighted_average(np.zeros((2, 3), dtype=">f4"), [1, 1])
    with pytest.raises(ValueError, match=r"X\[1\]\[0\] has non-native byte order"):
        ops.weighted_average([[np.zeros(3, "<f4")], [np.zeros(3, ">f4")]], [1, 1])


def test_meta_tensors_are_named_with_the_fix():
    with pytest.raises(ValueError, match=r"x is on meta.*CPU or a CUDA device"):
        ops.softmax(torch.zeros(5, device="meta"))
    with pytest.raises(ValueError, match=r"X is on meta"):
        ops.weighted_average(torch.zeros((2, 3), device="meta"), [1, 1], out=torch.zeros(3))
    with pytest.raises(ValueError, match=r"out is on meta"):
        ops.weighted_average(torch.zeros((2, 3)), [1, 1], out=torch.zeros(3, device="meta"))


def test_sparse_tensors_are_named_with_the_fix():
    with pytest.raises(ValueError, match=r"x is a sparse tensor.*to_dense\(\)"):
        ops.softmax(torch.zeros(5).to_sparse())
    with pytest.raises(ValueError, match=r"X\[0\]\[0\] is a sparse tensor.*to_dense\(\)"):
        ops.weighted_average([[torch.zeros(5).to_sparse()]], [1.0])
    with pytest.raises(ValueError, match=r"X is a sparse tensor"):
        ops.weighted_average(torch.zeros((2, 3)).to_sparse(), [1.0, 1.0])
