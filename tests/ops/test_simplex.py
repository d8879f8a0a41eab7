"""Euclidean simplex projection against hand cases and the sort-based reference."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair import ops, reference
from tests.helpers.arrays import requires_cuda, torch


def test_hand_cases():
    np.testing.assert_allclose(ops.project_simplex(np.array([0.5, 0.9, -1.0])), [0.3, 0.7, 0.0],
                               atol=1e-15)
    np.testing.assert_array_equal(ops.project_simplex(np.array([-7.0])), [1.0])
    np.testing.assert_allclose(ops.project_simplex(np.full(4, 3.0)), [0.25] * 4, rtol=1e-15)
    on = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(ops.project_simplex(on), on, atol=1e-16)
    np.testing.assert_array_equal(ops.project_simplex(np.array([0.0, 5.0, 1.0])), [0, 1, 0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(2,), (101,), (5, 64), (3, 20000)])
def test_random_against_reference(rng, dtype, shape):
    v = (rng.standard_normal(shape) * rng.choice([0.01, 1.0, 100.0])).astype(dtype)
    p = ops.project_simplex(v)
    want = reference.project_simplex(v)
    assert p.dtype == v.dtype and p.shape == v.shape
    atol = 1e-13 if dtype == "float64" else 2e-7
    np.testing.assert_allclose(p, want, rtol=0, atol=atol * max(1.0, float(np.abs(v).max())))
    np.testing.assert_allclose(np.asarray(p, dtype=np.float64).sum(axis=-1), 1.0,
                               atol=1e-12 if dtype == "float64" else 1e-5 * shape[-1] ** 0.5)


def test_ties_extremes_and_strided_rows(rng):
    v = rng.integers(0, 4, size=(50, 30)).astype(np.float64) / 4  # many ties
    np.testing.assert_allclose(ops.project_simplex(v), reference.project_simplex(v), atol=1e-15)
    np.testing.assert_array_equal(ops.project_simplex(np.array([-1e30, 1e30, 3.0])), [0, 1, 0])
    np.testing.assert_array_equal(ops.project_simplex(np.array([-1e30, -1e30])), [0.5, 0.5])
    # Shift invariance: a common offset of 1e6 changes nothing beyond its rounding (1e6 * 2^-52).
    v = rng.standard_normal(100)
    np.testing.assert_allclose(ops.project_simplex(v + 1e6), ops.project_simplex(v), atol=1e-9)
    wide = rng.standard_normal((6, 40))
    np.testing.assert_allclose(ops.project_simplex(wide[::2]),
                               reference.project_simplex(wide[::2]), atol=1e-14)
    t = torch.from_numpy(wide)
    np.testing.assert_allclose(ops.project_simplex(t).numpy(), reference.project_simplex(wide),
                               atol=1e-14)


def test_errors():
    with pytest.raises(ValueError, match="v must be finite; got nan at position 1"):
        ops.project_simplex(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match=r"finite; got inf at position \[1, 0\]"):
        ops.project_simplex(np.array([[0.0, 1.0], [np.inf, 0.0]]))
    with pytest.raises(ValueError, match="no entries"):
        ops.project_simplex(np.zeros(0))
    with pytest.raises(ValueError, match="float32 or float64"):
        ops.project_simplex(np.zeros(3, dtype=np.int32))


@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_matches_reference(rng, dtype):
    v = rng.standard_normal((7, 3000)).astype(dtype)
    p = ops.project_simplex(torch.from_numpy(v).cuda()).cpu().numpy()
    np.testing.assert_allclose(p, reference.project_simplex(v),
                               atol=1e-13 if dtype == "float64" else 2e-7)


def test_reference_handles_any_magnitude():
    """The reference shifts by the row maximum before its cumulative sums: u_1 - (u_1 - 1) no
    longer rounds to 0 (an IndexError) beyond 2^53."""
    v = np.array([1e17, 1e17 - 1e3, -1e17])
    np.testing.assert_array_equal(reference.project_simplex(v), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(reference.project_simplex(np.array([3e30])), [1.0])
