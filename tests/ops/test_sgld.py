"""sgld_step, fedevg_server_step and FedEvg's beta schedule: golden values, float64 references,
reproducibility (thread count, batch split), noise moments, FedAvg reduction, errors, CUDA."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair import _C, ops
from fastfair.reference import sgld as ref
from tests.helpers.arrays import make_array, requires_cuda
from tests.helpers.tolerances import GAUSSIAN_F32_ATOL, assert_close, to_numpy64

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------------------- beta schedule
# docs/algorithms.md §3.2, T = 500, beta 10 -> 0.01 (given to 4 decimals there).
BETA_GOLDEN = {0: 9.9991, 250: 9.937, 450: 9.6075, 490: 8.1024, 495: 6.4038, 498: 2.5075,
               499: 0.01}


@pytest.mark.parametrize("impl", [ops.cosine_beta_schedule, ref.cosine_beta_schedule])
def test_beta_schedule_golden(impl):
    beta = impl(500, 10.0, 0.01)
    assert beta.shape == (500,)
    for t, value in BETA_GOLDEN.items():
        assert abs(beta[t] - value) <= 5e-4 + 1e-12, (t, beta[t], value)
    assert np.all(np.diff(beta) <= 0)  # beta only falls


def test_beta_schedule_matches_reference():
    for T, end in [(1, 0.01), (7, 1.0), (200, 0.01)]:
        np.testing.assert_allclose(ops.cosine_beta_schedule(T, 10.0, end),
                                   ref.cosine_beta_schedule(T, 10.0, end), rtol=0, atol=1e-12)
    assert ops.cosine_beta_schedule(3, 10.0, 0.5)[-1] == pytest.approx(0.5, abs=1e-12)


# ---------------------------------------------------------------------------- sgld_step
def _case(rng, shape, dtype, framework="numpy"):
    x = make_array(rng.uniform(-0.5, 1.5, shape), dtype, framework)
    g = make_array(rng.normal(0, 4, shape), dtype, framework)
    return x, g


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("per_sample", [False, True])
def test_sgld_matches_reference(rng, dtype, framework, per_sample):
    shape = (9, 3, 5, 7)  # D = 105: rows straddle the 64-element blocks
    x, g = _case(rng, shape, dtype, framework)
    step = rng.uniform(0.1, 1.0, 9) if per_sample else 0.3
    noise = rng.uniform(0.0, 0.5, 9) if per_sample else 0.2
    kw = dict(step=step, noise_std=noise, seed=2 ** 40 + 17, offset=1234567, grad_clip=3.0,
              clamp=(0.0, 1.0))
    expected = ref.sgld_step(to_numpy64(x), to_numpy64(g), **kw)
    out = ops.sgld_step(x, g, **kw)
    assert out is x  # in place by default
    if dtype == "float64":
        assert_close(out, expected, dtype)
    else:
        np.testing.assert_allclose(to_numpy64(out), expected, rtol=0,
                                   atol=GAUSSIAN_F32_ATOL * float(np.max(noise)) + 4e-7)


def test_sgld_out_leaves_x_and_no_clip_no_clamp(rng):
    x, g = _case(rng, (4, 33), "float64")
    x0 = x.copy()
    x.setflags(write=False)
    out = np.empty_like(x)
    ops.sgld_step(x, g, step=0.5, noise_std=0.1, seed=3, offset=0, out=out)
    np.testing.assert_array_equal(x, x0)
    assert_close(out, ref.sgld_step(x0, g, step=0.5, noise_std=0.1, seed=3, offset=0), "float64")


def test_sgld_without_noise_is_exact(rng):
    x, g = _case(rng, (5, 16), "float32")
    expected = np.clip(x - np.float32(0.25) * np.clip(g, -1, 1), -0.2, 1.2)
    ops.sgld_step(x, g, step=0.25, noise_std=0.0, seed=0, offset=0, grad_clip=1.0,
                  clamp=(-0.2, 1.2))
    np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sgld_independent_of_threads_and_batch_split(rng, dtype):
    N, D = 37, 300  # 11100 elements: several parallel tiles
    x, g = _case(rng, (N, D), dtype)
    kw = dict(step=0.1, noise_std=1.0, seed=99, grad_clip=2.0)
    before = _C.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            _C.set_num_threads(threads)
            results.append(ops.sgld_step(x, g, offset=5, out=np.empty_like(x), **kw))
    finally:
        _C.set_num_threads(before)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    for cut in (1, 13, 36):  # rows [0, cut) and [cut, N) in two calls
        a = ops.sgld_step(x[:cut], g[:cut], offset=5, out=np.empty_like(x[:cut]), **kw)
        b = ops.sgld_step(x[cut:], g[cut:], offset=5 + cut * D, out=np.empty_like(x[cut:]), **kw)
        np.testing.assert_array_equal(np.concatenate([a, b]), results[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_noise_moments(dtype):
    n = 1 << 20
    z = ops.sgld_step(np.zeros((n // 64, 64), dtype), np.zeros((n // 64, 64), dtype), step=0.0,
                      noise_std=1.0, seed=7, offset=3).reshape(-1).astype(np.float64)
    # 5-sigma bounds of the sample mean, variance, skewness and kurtosis of N(0, 1).
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)
    assert abs(np.mean(z ** 3)) < 5 * np.sqrt(15 / n)
    assert abs(np.mean(z ** 4) - 3) < 5 * np.sqrt(96 / n)
    # Tails: P(|z| > 1.96) = 0.05 within 5 binomial sigmas.
    assert abs(np.mean(np.abs(z) > 1.959964) - 0.05) < 5 * np.sqrt(0.05 * 0.95 / n)
    # Neighbouring elements (the two halves of one Box-Muller pair) are uncorrelated.
    assert abs(np.mean(z[0::2] * z[1::2])) < 5 / np.sqrt(n / 2)
    # Another offset gives another stream.
    z2 = ops.sgld_step(np.zeros((64, 64), dtype), np.zeros((64, 64), dtype), step=0.0,
                       noise_std=1.0, seed=7, offset=3 + n).reshape(-1)
    assert not np.allclose(z2, z[:4096])


def test_sgld_errors(rng):
    x, g = _case(rng, (3, 4), "float32")
    with pytest.raises(ValueError, match="noise_std"):
        ops.sgld_step(x, g, step=0.1, noise_std=-1.0, seed=0, offset=0)
    with pytest.raises(ValueError, match="grad_clip"):
        ops.sgld_step(x, g, step=0.1, noise_std=0.0, seed=0, offset=0, grad_clip=0.0)
    with pytest.raises(ValueError, match="grad"):
        ops.sgld_step(x, g[:2], step=0.1, noise_std=0.0, seed=0, offset=0)
    with pytest.raises(ValueError, match="step"):
        ops.sgld_step(x, g, step=np.ones(2), noise_std=0.0, seed=0, offset=0)
    with pytest.raises(ValueError, match="clamp"):
        ops.sgld_step(x, g, step=0.1, noise_std=0.0, seed=0, offset=0, clamp=(1.0, 0.0))
    with pytest.raises(ValueError, match="C-contiguous"):
        ops.sgld_step(x.T, g.T, step=0.1, noise_std=0.0, seed=0, offset=0)
    with pytest.raises(ValueError, match="float32 or float64"):
        ops.sgld_step(x.astype(np.float16), g.astype(np.float16), step=0.1, noise_std=0.0,
                      seed=0, offset=0)
    # In place, the array written is x: a read-only x is named as such (it used to say "out").
    ro = x.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="x is read-only"):
        ops.sgld_step(ro, g, step=0.1, noise_std=0.0, seed=0, offset=0)
    out = ops.sgld_step(ro, g, step=0.1, noise_std=0.0, seed=0, offset=0, out=np.empty_like(x))
    np.testing.assert_allclose(out, x - 0.1 * g, rtol=1e-6)
    with pytest.raises(ValueError, match="out must have the shape of x"):
        ops.sgld_step(x, g, step=0.1, noise_std=0.0, seed=0, offset=0,
                      out=np.empty((3, 5), x.dtype))
    with pytest.raises(TypeError, match="seed must be an integer"):
        ops.sgld_step(x, g, step=0.1, noise_std=0.0, seed=1.5, offset=0)
    with pytest.raises(TypeError, match="offset must be an integer"):
        ops.sgld_step(x, g, step=0.1, noise_std=0.0, seed=1, offset="0")
    with pytest.raises(TypeError, match="step must be a real number"):
        ops.sgld_step(x, g, step="0.1", noise_std=0.0, seed=1, offset=0)
    with pytest.raises(ValueError, match=r"step must have shape \[m\] \(one axis\)"):
        ops.sgld_step(x, g, step=np.ones((3, 1)), noise_std=0.0, seed=1, offset=0)


# ---------------------------------------------------------------------------- FedEvg server
def _server_case(rng, m=4, M=6, shape=(3, 5), dtype="float32"):
    x = rng.uniform(0, 1, (M,) + shape).astype(dtype)
    G = rng.normal(0, 2, (m, M) + shape).astype(dtype)
    e = np.exp(rng.choice([-1.0, 0.0, 1.0], size=(m, M)))
    w = rng.integers(1, 50, m).astype(np.float64)
    return x, G, e, w


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clamp", [(0.0, 1.0), None])
def test_fedevg_server_matches_float64_reference(rng, dtype, clamp):
    x, G, e, w = _server_case(rng, dtype=dtype)
    kw = dict(step=9.6, noise_std=0.01, seed=5, offset=77, clamp=clamp)
    expected = ref.fedevg_server_step(x.astype(np.float64), G, e, w, **kw)
    out = ops.fedevg_server_step(x, G, e, w, out=np.empty_like(x), **kw)
    scale = 9.6 * np.abs(G).max(0) + np.abs(x) + 1.0
    if dtype == "float64":
        assert_close(out, expected, dtype, scale=scale)
    else:
        np.testing.assert_allclose(out, expected, rtol=0,
                                   atol=4e-6 * float(scale.max()) + 0.01 * GAUSSIAN_F32_ATOL)


def test_fedevg_server_equal_energies_is_fedavg_of_gradients(rng):
    # With every e_ij equal the mixture is the FedAvg average of the clients' gradients
    # (weights n_i / sum n), so the step is x - beta * weighted_average(G, w / sum w).
    x, G, _, w = _server_case(rng, m=5, M=8, dtype="float64")
    e = np.full((5, 8), np.e)
    out = ops.fedevg_server_step(x, G, e, w, step=2.0, noise_std=0.0, seed=0, offset=0,
                                 clamp=None, out=np.empty_like(x))
    avg = ops.weighted_average(G.reshape(5, -1), w / w.sum()).reshape(x.shape)
    assert_close(out, x - 2.0 * avg, "float64", scale=np.abs(x) + 2.0 * np.abs(G).max(0))


def test_fedevg_server_torch_and_per_sample_step(rng):
    x, G, e, w = _server_case(rng, m=3, M=5, shape=(70,), dtype="float32")
    step = rng.uniform(1, 10, 5)
    xt = torch.from_numpy(x.copy())
    ops.fedevg_server_step(xt, torch.from_numpy(G), torch.from_numpy(e), torch.from_numpy(w),
                           step=step, noise_std=0.0, seed=1, offset=0)
    expected = ref.fedevg_server_step(x, G, e, w, step=step, noise_std=0.0, seed=1, offset=0)
    np.testing.assert_allclose(xt.numpy(), expected, rtol=0, atol=5e-5)


def test_fedevg_server_errors_leave_x_untouched(rng):
    x, G, e, w = _server_case(rng)
    x0 = x.copy()
    bad = e.copy()
    bad[2, 3] = 0.0
    with pytest.raises(ValueError, match=r"e must be finite and > 0.*\[2, 3\]"):
        ops.fedevg_server_step(x, G, bad, w, step=1.0, noise_std=0.1, seed=0, offset=0)
    with pytest.raises(ValueError, match="w must have a positive sum"):
        ops.fedevg_server_step(x, G, e, np.zeros_like(w), step=1.0, noise_std=0.1, seed=0,
                               offset=0)
    with pytest.raises(ValueError, match="w must be finite and >= 0"):
        ops.fedevg_server_step(x, G, e, -w, step=1.0, noise_std=0.1, seed=0, offset=0)
    np.testing.assert_array_equal(x, x0)
    with pytest.raises(ValueError, match=r"G must have shape \[m, \*x.shape\]"):
        ops.fedevg_server_step(x, G[:, :2].copy(), e, w, step=1.0, noise_std=0.1, seed=0, offset=0)
    with pytest.raises(ValueError, match=r"e must have shape \[m, M\]"):
        ops.fedevg_server_step(x, G, e[:, :2], w, step=1.0, noise_std=0.1, seed=0, offset=0)


# ---------------------------------------------------------------------------- CUDA
@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_matches_cpu(rng, dtype):
    x, g = _case(rng, (33, 3, 8, 8), dtype, "torch")
    kw = dict(step=0.2, noise_std=0.3, seed=11, offset=101, grad_clip=3.0, clamp=(0.0, 1.0))
    cpu = ops.sgld_step(x.clone(), g, **kw)
    gpu = ops.sgld_step(x.cuda(), g.cuda(), **kw).cpu()
    tol = 1e-12 if dtype == "float64" else GAUSSIAN_F32_ATOL
    np.testing.assert_allclose(gpu.double().numpy(), cpu.double().numpy(), rtol=0, atol=tol)
    xs, G, e, w = _server_case(rng, dtype=dtype)
    skw = dict(step=5.0, noise_std=0.01, seed=2, offset=0)
    cpu = ops.fedevg_server_step(torch.from_numpy(xs), torch.from_numpy(G), e, w,
                                 out=torch.empty(xs.shape, dtype=getattr(torch, dtype)), **skw)
    gpu = ops.fedevg_server_step(torch.from_numpy(xs).cuda(), torch.from_numpy(G).cuda(), e, w,
                                 **skw).cpu()
    np.testing.assert_allclose(gpu.double().numpy(), cpu.double().numpy(), rtol=0, atol=1e-4)
