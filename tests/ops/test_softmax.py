"""logsumexp / softmax / eg_step against hand values and the float64 reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fastfair
from fastfair import ops, reference
from tests.helpers.arrays import requires_cuda, torch
from tests.helpers.tolerances import TOLERANCES, assert_softmax_close

BLOCK = 1 << 16  # elements per pass-1 block: sizes around it cross block boundaries


def check(x: np.ndarray, p, lse, dtype: str, scale: float = 1.0) -> None:
    z = scale * x.astype(np.float64)
    ref_lse = reference.logsumexp(x, scale)
    assert_softmax_close(p, reference.softmax(x, scale), dtype, z - ref_lse[..., None])
    rtol, unit = TOLERANCES[dtype]
    tol = (rtol + 4 * unit) * (np.abs(ref_lse) + 1.0)
    assert np.all(np.abs(np.asarray(lse, dtype=np.float64) - ref_lse) <= tol)


def test_hand_cases():
    p = ops.softmax(np.log(np.array([1.0, 2.0, 3.0])))
    np.testing.assert_allclose(p, [1 / 6, 2 / 6, 3 / 6], rtol=1e-15)
    assert ops.logsumexp(np.zeros(2)) == pytest.approx(math.log(2), rel=1e-15)
    assert ops.logsumexp(np.array([-np.inf, 0.0, -np.inf])) == 0.0
    np.testing.assert_array_equal(ops.softmax(np.array([-np.inf, 5.0, -np.inf])), [0, 1, 0])
    np.testing.assert_array_equal(ops.softmax(np.array([3.5], dtype=np.float32)), [1.0])
    assert ops.logsumexp(np.array([3.5])) == 3.5
    # Scale: softmax(-eta * G) of the EG step.
    np.testing.assert_allclose(ops.softmax(np.array([0.0, 1.0]), scale=-math.log(3)),
                               [0.75, 0.25], rtol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1,), (7,), (BLOCK + 17,), (3, 1000), (2, 2 * BLOCK + 5)])
def test_random_against_reference(rng, dtype, shape):
    x = (rng.standard_normal(shape) * 20).astype(dtype)
    if x.size > 3:
        x.reshape(-1)[::5] = -np.inf
        x.reshape(-1)[1] = 3.0  # keep a finite entry in every row
    p = ops.softmax(x)
    assert p.dtype == x.dtype and p.shape == x.shape
    check(x, p, ops.logsumexp(x), dtype)


def test_torch_inputs_and_out(rng):
    x = torch.from_numpy(rng.standard_normal((4, 300)))
    out = torch.empty(4, 300, dtype=torch.float64)
    p = ops.softmax(x, out=out)
    assert p is out
    check(x.numpy(), p.numpy(), ops.logsumexp(x).numpy(), "float64")


def test_per_row_scale(rng):
    x = rng.standard_normal((3, 50))
    scale = [1.0, -2.0, 0.5]
    p = ops.softmax(x, scale=scale)
    for b in range(3):
        check(x[b], p[b], ops.logsumexp(x[b], scale=scale[b]), "float64", scale[b])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_extreme_magnitudes(dtype):
    x = np.array([1e30, -1e30, 1e30, 0.0, -np.inf], dtype=dtype)
    np.testing.assert_array_equal(ops.softmax(x), [0.5, 0, 0.5, 0, 0])
    assert ops.logsumexp(x) == pytest.approx(float(np.float64(x[0]) + math.log(2)), rel=1e-15)
    y = np.array([-1e30, -1e30 * 0.999], dtype=dtype)
    np.testing.assert_array_equal(ops.softmax(y), [0, 1])


def test_huge_entries_with_a_scale():
    """The shift is taken before the scale: a fused s * x - max(s * x) left the rounding error of
    s * x_max (half an ulp of |z|) as the exponent of the largest entries (it gave [0, 0, 0])."""
    x = np.array([1e15, 1e15, 5e14], np.float32)
    np.testing.assert_array_equal(ops.softmax(x, scale=0.73), [0.5, 0.5, 0.0])
    assert ops.logsumexp(x, scale=0.73) == reference.logsumexp(x, 0.73)
    y = np.array([1e19, 1e19, 5e18])
    np.testing.assert_array_equal(ops.softmax(y, scale=0.73), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(ops.softmax(y, scale=-0.73), [0.0, 0.0, 1.0])
    # z overflows float32 but not float64: a finite log-sum-exp and a well-defined softmax.
    big = np.array([3e38, 3e38, 0.0], np.float32)
    np.testing.assert_array_equal(ops.softmax(big, scale=2.0), [0.5, 0.5, 0.0])
    assert ops.logsumexp(big, scale=2.0) == pytest.approx(2 * 3e38, rel=1e-7)
    # scale = 0: uniform over finite entries; an infinite entry makes z = 0 * inf = NaN.
    np.testing.assert_array_equal(ops.softmax(np.array([1e300, -5.0]), scale=0.0), [0.5, 0.5])
    with pytest.raises(ValueError, match="NaN at position 1"):
        ops.softmax(np.array([1.0, np.inf]), scale=0.0)


def test_any_magnitude_and_scale_on_every_isa(cpu_isa):
    """Random rows of any magnitude and scale against the float64 reference, on every CPU
    instruction-set copy (the fused multiply-add that broke the shift exists only in some)."""
    rng = np.random.default_rng(7)
    for dtype, top in (("float32", 37), ("float64", 300)):
        for _ in range(200):
            mag = 10.0 ** rng.uniform(-3, top)
            x = (rng.choice([1.0, 0.5, 1 - 1e-7, -1.0], size=int(rng.integers(1, 40))) * mag)
            x = x.astype(dtype)
            s = float(rng.choice([-1, 1]) * 10.0 ** rng.uniform(-3, 1))
            z = s * x.astype(np.float64)
            if not np.all(np.isfinite(z)):
                continue
            lse = reference.logsumexp(x, s)
            assert_softmax_close(ops.softmax(x, scale=s), reference.softmax(x, s), dtype, z - lse)
            got = float(ops.logsumexp(x, scale=s))
            assert abs(got - lse) <= 1e-6 * (abs(lse) + 1.0), (dtype, mag, s, got, lse)


def test_thread_count_does_not_change_results(rng):
    x = rng.standard_normal((2, 3 * BLOCK + 11)).astype(np.float32)
    before = fastfair.get_num_threads()
    try:
        fastfair.set_num_threads(1)
        p1, l1 = ops.softmax(x), ops.logsumexp(x)
        fastfair.set_num_threads(2)
        p2, l2 = ops.softmax(x), ops.logsumexp(x)
    finally:
        fastfair.set_num_threads(before)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(l1, l2)


def test_errors():
    with pytest.raises(ValueError, match="^x must not contain NaN; got NaN at position 2"):
        ops.softmax(np.array([0.0, 1.0, np.nan]))
    with pytest.raises(ValueError, match=r"^scale \* x must not contain NaN"):
        ops.softmax(np.array([0.0, 1.0, np.nan]), scale=2.0)
    with pytest.raises(ValueError, match=r"NaN at position \[1, 0\]"):
        ops.logsumexp(np.array([[0.0, 1.0], [np.nan, 0.0]]))
    with pytest.raises(ValueError, match=r"\+inf at position 1"):
        ops.softmax(np.array([0.0, np.inf]))
    with pytest.raises(ValueError, match="-inf everywhere"):
        ops.logsumexp(np.full(5, -np.inf))
    with pytest.raises(ValueError, match="empty"):
        ops.softmax(np.zeros(0))
    with pytest.raises(ValueError, match="float32 or float64"):
        ops.softmax(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="contiguous"):
        ops.softmax(np.zeros((4, 4))[:, ::2])
    with pytest.raises(ValueError, match="shape"):
        ops.softmax(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="scale must be finite"):
        ops.softmax(np.zeros(3), scale=float("nan"))


# ---------------------------------------------------------------------------------------------
# eg_step


@pytest.mark.parametrize("shape", [(9,), (BLOCK + 3,), (3, 40)])
def test_eg_dense_against_reference(rng, shape):
    G = rng.standard_normal(shape)
    g = rng.standard_normal(shape)
    want_G, want_p = reference.eg_step(G, g, eta=0.7)
    p = ops.eg_step(G, g, eta=0.7)
    np.testing.assert_array_equal(G, want_G)  # G + g in float64, bit for bit
    assert_softmax_close(p, want_p, "float64",
                         -0.7 * want_G - reference.logsumexp(want_G, -0.7)[..., None])


def test_eg_dense_float32_and_float32_output(rng):
    G = rng.standard_normal(100)
    g = rng.standard_normal(100)
    out = np.empty(100, dtype=np.float32)
    want_G, want_p = reference.eg_step(G, g, eta=1.5)
    ops.eg_step(G, g, eta=1.5, out=out)
    np.testing.assert_allclose(out, want_p, rtol=2e-6, atol=1e-38)
    G32, g32 = (rng.standard_normal(64).astype(np.float32),
                rng.standard_normal(64).astype(np.float32))
    want_G, want_p = reference.eg_step(G32, g32, eta=0.5)
    p = ops.eg_step(G32, g32, eta=0.5)
    np.testing.assert_array_equal(G32, (np.asarray(want_G)).astype(np.float32))
    assert_softmax_close(p, want_p, "float32", -0.5 * want_G - reference.logsumexp(want_G, -0.5))


def test_eg_sparse_against_reference(rng):
    G = rng.standard_normal((2, 500))
    ids = np.array([[3, 17, 499, 0], [5, 6, 7, 8]])
    values = rng.standard_normal((2, 4))
    want_G, want_p = reference.eg_step(G, eta=[0.3, 0.9][0], ids=ids, values=values)
    p = ops.eg_step(G, eta=0.3, ids=ids, values=values)
    np.testing.assert_array_equal(G, want_G)
    assert_softmax_close(p, want_p, "float64",
                         -0.3 * want_G - reference.logsumexp(want_G, -0.3)[:, None])
    # One problem, ids as a list, m = K and m = 0.
    G1 = np.zeros(4)
    p = ops.eg_step(G1, eta=1.0, ids=[0, 1, 2, 3], values=[1.0, 1.0, 1.0, 2.0])
    np.testing.assert_allclose(p, reference.softmax(np.array([1.0, 1, 1, 2]), -1.0), rtol=1e-15)
    p = ops.eg_step(G1, eta=1.0, ids=np.zeros(0, dtype=np.int64), values=[])
    np.testing.assert_allclose(p, reference.softmax(np.array([1.0, 1, 1, 2]), -1.0), rtol=1e-15)


def test_eg_errors_leave_state_unchanged(rng):
    G = rng.standard_normal(10)
    before = G.copy()
    with pytest.raises(ValueError, match="distinct; client 3 appears at positions 0 and 2"):
        ops.eg_step(G, eta=1.0, ids=[3, 4, 3], values=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"in \[0, 10\); got 10 at position 1"):
        ops.eg_step(G, eta=1.0, ids=[3, 10], values=[1.0, 2.0])
    with pytest.raises(ValueError, match="values must be finite"):
        ops.eg_step(G, eta=1.0, ids=[3], values=[np.nan])
    g = np.zeros(10)
    g[4] = np.nan
    with pytest.raises(ValueError, match=r"-eta \* \(G \+ g\) must not contain NaN; got NaN at "
                                         "position 4"):
        ops.eg_step(G, g, eta=1.0)
    np.testing.assert_array_equal(G, before)
    # The update itself is valid but the softmax of the result is not: rolled back.
    H = np.array([-np.inf, 1.0, 2.0])
    with pytest.raises(ValueError, match=r"-eta \* G \(after G\[ids\] \+= values\) must not "
                                         r"contain \+inf .* at position 0"):
        ops.eg_step(H, eta=1.0, ids=[2], values=[1.0])
    np.testing.assert_array_equal(H, [-np.inf, 1.0, 2.0])
    ro = G.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="either a dense gradient"):
        ops.eg_step(G, g, eta=1.0, ids=[1], values=[1.0])
    with pytest.raises(ValueError, match="one value per id"):
        ops.eg_step(G, eta=1.0, ids=[1, 2], values=[1.0])
    with pytest.raises(TypeError, match="integer ids"):
        ops.eg_step(G, eta=1.0, ids=[1.5], values=[1.0])
    with pytest.raises(ValueError, match="read-only"):
        ops.eg_step(ro, np.zeros(10), eta=1.0)



@requires_cuda
@pytest.mark.parametrize("rows", [1, 4, 5, 9])
def test_cuda_per_row_scales(rng, rows):
    """Up to four row scales travel in the kernel parameters, more in a device table: both give
    each row its own eta, as on the CPU."""
    G = rng.standard_normal((rows, 300))
    g = rng.standard_normal((rows, 300))
    eta = list(rng.uniform(0.1, 2.0, rows))
    p_cpu = ops.eg_step(G.copy(), g, eta=eta)
    Gc = torch.from_numpy(G).cuda()
    p = ops.eg_step(Gc, torch.from_numpy(g).cuda(), eta=eta)
    np.testing.assert_allclose(p.cpu().numpy(), p_cpu, rtol=1e-12, atol=1e-300)
    np.testing.assert_array_equal(Gc.cpu().numpy(), G + g)

@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_matches_cpu(rng, dtype):
    x = (rng.standard_normal((3, 2 * BLOCK + 9)) * 10).astype(dtype)
    x[0, ::3] = -np.inf
    xc = torch.from_numpy(x).cuda()
    check(x, ops.softmax(xc).cpu().numpy(), ops.logsumexp(xc).cpu().numpy(), dtype)
    G = rng.standard_normal(1000)
    g = rng.standard_normal(1000)
    Gc, gc = torch.from_numpy(G).cuda(), torch.from_numpy(g).cuda()
    want_G, want_p = reference.eg_step(G, g, eta=0.4)
    p = ops.eg_step(Gc, gc, eta=0.4)
    np.testing.assert_array_equal(Gc.cpu().numpy(), want_G)
    np.testing.assert_allclose(p.cpu().numpy(), want_p, rtol=1e-12)
    p = ops.eg_step(Gc, eta=0.4, ids=[1, 5], values=[0.5, -0.5])
    want_G, want_p = reference.eg_step(want_G, eta=0.4, ids=[1, 5], values=[0.5, -0.5])
    np.testing.assert_allclose(p.cpu().numpy(), want_p, rtol=1e-12)
    assert torch.isnan(ops.logsumexp(torch.full((4,), float("nan"), device="cuda"))).item()
