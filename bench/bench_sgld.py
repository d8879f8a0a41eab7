"""Batched SGLD and the FedEvg server step: fastfair against torch eager.

Run: ``python -m pytest bench/bench_sgld.py -q -s`` (``-k sgld`` or ``-k fedevg``). Every figure
is reported beside the copy floor of the same run (bench/conftest.py). ``fastfair (no noise)``
is the same fused pass without the normal variates: the gap to ``fastfair`` is what the Philox +
Box-Muller path costs. The ``cuda`` cases repeat the SGLD cases on the GPU.
"""

from __future__ import annotations

import pytest
import torch

from bench.conftest import best_time, gpu_time, sizes
from fastfair import ops

SAMPLES = sizes([256, 1024, 4096, 16384, 65536], [256])
SGLD_IMPLS = ["fastfair", "fastfair (no noise)", "torch eager"]
STEP, NOISE, CLIP = 1.0, 0.01, 3.0


@pytest.fixture(scope="module", params=SAMPLES)
def images(request):
    n = request.param
    g = torch.Generator().manual_seed(n)
    x = torch.rand(n, 3, 32, 32, generator=g)
    grad = torch.randn(n, 3, 32, 32, generator=g)
    return n, x, grad


def _sgld(impl, x, grad):
    if impl == "fastfair":
        return lambda: ops.sgld_step(x, grad, step=STEP, noise_std=NOISE, seed=1, offset=0,
                                     grad_clip=CLIP, clamp=(0.0, 1.0))
    if impl == "fastfair (no noise)":
        return lambda: ops.sgld_step(x, grad, step=STEP, noise_std=0.0, seed=1, offset=0,
                                     grad_clip=CLIP, clamp=(0.0, 1.0))
    return lambda: x.copy_((x - STEP * grad.clamp(-CLIP, CLIP)
                            + NOISE * torch.randn_like(x)).clamp_(0.0, 1.0))


@pytest.mark.parametrize("impl", SGLD_IMPLS)
def test_sgld_step_cuda(cuda_floor_report, images, impl):
    n, x, grad = images
    x, grad = x.cuda(), grad.cuda()
    cuda_floor_report.add(f"sgld_step {n} x 3x32x32 fp32", impl, gpu_time(_sgld(impl, x, grad)),
                          3 * x.numel() * 4, reference=impl == "torch eager")


@pytest.mark.parametrize("impl", SGLD_IMPLS)
def test_sgld_step(benchmark, floor_report, images, impl):
    n, x, grad = images
    fn = _sgld(impl, x, grad)
    benchmark.pedantic(fn, rounds=3, iterations=1, warmup_rounds=1)
    seconds = min(best_time(fn, repeat=3), benchmark.stats.stats.min)
    # In place: read x and grad, write x.
    floor_report.add(f"sgld_step {n} x 3x32x32 fp32", impl, seconds, 3 * x.numel() * 4,
                     reference=impl == "torch eager")


SERVER_CASES = sizes([(10, 100, 3 * 32 * 32), (10, 1000, 3 * 32 * 32), (100, 1000, 3 * 32 * 32)],
                     [(4, 10, 3 * 8 * 8)])


def _torch_server(x, G, e, w, beta, delta):
    a = w[:, None] * e
    a = a / a.sum(0, keepdim=True)
    g = torch.einsum("im,imd->md", a.float(), G)
    x.copy_((x - beta * g + delta * torch.randn_like(x)).clamp_(0.0, 1.0))


@pytest.mark.parametrize("case", SERVER_CASES, ids=lambda c: f"m{c[0]}-M{c[1]}")
@pytest.mark.parametrize("impl", ["fastfair", "torch eager"])
def test_fedevg_server_step(benchmark, floor_report, case, impl):
    m, M, D = case
    g = torch.Generator().manual_seed(m * M)
    x = torch.rand(M, D, generator=g)
    G = torch.randn(m, M, D, generator=g)
    e = torch.exp(torch.randint(-1, 2, (m, M), generator=g).double())
    w = torch.randint(1, 100, (m,), generator=g).double()
    if impl == "fastfair":
        def fn():
            ops.fedevg_server_step(x, G, e, w, step=9.6, noise_std=0.01, seed=3, offset=0)
    else:
        def fn():
            _torch_server(x, G, e, w, 9.6, 0.01)
    benchmark.pedantic(fn, rounds=3, iterations=1, warmup_rounds=1)
    seconds = min(best_time(fn, repeat=3), benchmark.stats.stats.min)
    floor_report.add(f"fedevg server m={m} M={M} D={D}", impl, seconds, (m * M * D + 2 * M * D) * 4,
                     reference=impl == "torch eager")
