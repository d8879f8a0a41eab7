"""The compiled kernels on NumPy arrays alone, against the float64 references (no torch
anywhere: the no-torch CI leg runs these in a venv without it)."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair import ops, reference
from tests.helpers.tolerances import assert_close, assert_softmax_close

DTYPES = ["float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_weighted_average_stacked_lists_and_base(rng, dtype):
    X = rng.standard_normal((7, 33)).astype(dtype)
    w = rng.random(7)
    scale = np.abs(w) @ np.abs(X.astype(np.float64))
    got = ops.weighted_average(X, w)
    assert isinstance(got, np.ndarray) and got.dtype == dtype and got.shape == (33,)
    assert_close(got, reference.weighted_average(X, w), dtype, scale)
    base = rng.standard_normal(33).astype(dtype)
    want = reference.weighted_average(X, w, base=base, lr=0.5)
    bound = np.abs(base.astype(np.float64)) + 0.5 * scale
    got = ops.weighted_average(X, w, base=base, lr=0.5)   # the server step, in place
    assert got is base
    assert_close(got, want, dtype, bound)
    # m clients of L arrays each, written into preallocated outputs
    lists = [[x[:10].reshape(2, 5), x[10:]] for x in X]
    out = [np.empty((2, 5), dtype), np.empty(23, dtype)]
    got = ops.weighted_average(lists, w, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    for g, e, s in zip(got, reference.weighted_average(lists, w),
                       [scale[:10].reshape(2, 5), scale[10:]]):
        assert_close(g, e, dtype, s)


def test_accumulator_streams_numpy_updates(rng):
    X, w = rng.standard_normal((5, 12)), rng.random(5)
    acc = ops.Accumulator()
    for x, wi in zip(X, w):
        acc.add(x, wi)
    assert acc.count == 5 and acc.total_weight == pytest.approx(w.sum())
    assert_close(acc.result(), reference.weighted_average(X, w / w.sum()), "float64",
                 np.abs(w / w.sum()) @ np.abs(X))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [1.0, -3.5])
def test_softmax_and_logsumexp(rng, dtype, scale):
    x = (rng.standard_normal((3, 50)) * 4).astype(dtype)
    want = reference.softmax(x, scale)
    argument = scale * x.astype(np.float64) - reference.logsumexp(x, scale)[..., None]
    got = ops.softmax(x, scale=scale)
    assert isinstance(got, np.ndarray) and got.dtype == dtype
    assert_softmax_close(got, want, dtype, argument)
    lse = ops.logsumexp(x, scale=scale)
    np.testing.assert_allclose(np.asarray(lse, np.float64), reference.logsumexp(x, scale),
                               rtol=1e-12 if dtype == "float64" else 1e-6, atol=1e-12)


def test_eg_step_dense_and_sparse(rng):
    G, g = rng.standard_normal(40), rng.standard_normal(40)
    want_G = G + g
    p = ops.eg_step(G, g, eta=0.3)                 # G is updated in place
    np.testing.assert_array_equal(G, want_G)
    argument = -0.3 * want_G - reference.logsumexp(want_G, -0.3)
    assert_softmax_close(p, reference.softmax(want_G, -0.3), "float64", argument)
    ids, vals = np.array([3, 17, 29]), rng.standard_normal(3)
    want_G, want_p = reference.eg_step(G.copy(), eta=0.3, ids=ids, values=vals)
    p = ops.eg_step(G, eta=0.3, ids=ids, values=vals)
    np.testing.assert_array_equal(G, want_G)
    argument = -0.3 * want_G - reference.logsumexp(want_G, -0.3)
    assert_softmax_close(p, want_p, "float64", argument)


@pytest.mark.parametrize("dtype", DTYPES)
def test_project_simplex(rng, dtype):
    v = (rng.standard_normal((4, 37)) * 3).astype(dtype)
    p = ops.project_simplex(v)
    assert isinstance(p, np.ndarray) and p.dtype == v.dtype and p.shape == v.shape
    atol = 1e-13 if dtype == "float64" else 2e-7
    np.testing.assert_allclose(p, reference.project_simplex(v), rtol=0,
                               atol=atol * max(1.0, float(np.abs(v).max())))
    np.testing.assert_allclose(np.asarray(p, np.float64).sum(-1), 1.0,
                               atol=1e-12 if dtype == "float64" else 1e-5)


def test_sampling_matches_reference():
    for K, m in [(1, 1), (10, 3), (100_000, 500)]:
        ids = ops.sample_clients(K, m, seed=12345, round=7)
        assert isinstance(ids, np.ndarray)
        np.testing.assert_array_equal(ids, reference.sample_clients(K, m, seed=12345, round=7))
    prob = np.linspace(0.0, 1.0, 1000)
    mask = ops.sample_available(prob, seed=3, round=2)
    np.testing.assert_array_equal(mask, reference.sample_available(prob, seed=3, round=2))
    mask = ops.sample_available(0.25, seed=3, round=2, num_clients=1000)
    np.testing.assert_array_equal(mask, reference.sample_available(np.full(1000, 0.25), seed=3,
                                                                   round=2))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="v must be finite; got nan at position 1"):
        ops.project_simplex(np.array([0.0, np.nan]))
