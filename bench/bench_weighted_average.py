"""Weighted averaging: fastfair against the ways people write it today.

Run: ``python -m pytest bench/bench_weighted_average.py -q -s`` (add ``-k list`` or ``-k flat``).
Every figure is reported beside the copy floor of the same run (bench/conftest.py). The
``cuda`` cases (same shapes, on the GPU, floor from its device-to-device copy) run where fastfair
was built with ``FASTFAIR_CUDA=ON`` and a GPU is visible.
"""

from __future__ import annotations

import operator
from functools import reduce

import numba
import numpy as np
import pytest
import torch

from bench.conftest import best_time, gpu_time, sizes
from fastfair import ops

FLAT_CASES = sizes([(100, 10**4), (100, 10**5), (100, 10**6), (1000, 10**5)], [(10, 10**4)])
FLAT_IMPLS = ["fastfair", "torch (w[:,None]*X).sum(0)", "torch.mv", "numpy w @ X", "numba loop",
              "flower-style loop"]


@numba.njit(parallel=True, cache=False)
def _numba_weighted_sum(X, w, out):
    n, d = X.shape
    block = 2048
    for b in numba.prange((d + block - 1) // block):
        lo, hi = b * block, min(d, (b + 1) * block)
        acc = np.zeros(hi - lo, dtype=np.float32)
        for i in range(n):
            wi = np.float32(w[i])
            for j in range(lo, hi):
                acc[j - lo] += wi * X[i, j]
        out[lo:hi] = acc


def flower_aggregate(results):
    """Flower's ``aggregate()``: per-client per-layer weighted copies, then a reduce per layer
    (``operator.add`` is ``np.add`` on NumPy arrays and also takes CUDA tensors)."""
    total = sum(n for _, n in results)
    weighted = [[layer * n for layer in layers] for layers, n in results]
    return [reduce(operator.add, layer_updates) / total for layer_updates in zip(*weighted)]


def _flat_impl(impl, X, w):
    Xt, wt = torch.from_numpy(X), torch.from_numpy(w.astype(np.float32))
    out = np.empty(X.shape[1], dtype=np.float32)
    w32 = w.astype(np.float32)
    if impl == "fastfair":
        return lambda: ops.weighted_average(X, w, out=out)
    if impl == "torch (w[:,None]*X).sum(0)":
        return lambda: (wt[:, None] * Xt).sum(0)
    if impl == "torch.mv":
        return lambda: torch.mv(Xt.T, wt)
    if impl == "numpy w @ X":
        return lambda: w32 @ X
    if impl == "numba loop":
        _numba_weighted_sum(X[:2, :8], w[:2], out[:8])  # compile outside the timing
        return lambda: _numba_weighted_sum(X, w, out)
    if impl == "flower-style loop":
        counts = (w * 1e6).astype(np.int64)
        results = [([X[i]], int(counts[i])) for i in range(X.shape[0])]
        return lambda: flower_aggregate(results)
    raise ValueError(impl)


@pytest.fixture(scope="module")
def flat_data():
    cache = {}

    def get(n, d):
        if (n, d) not in cache:
            cache.clear()
            rng = np.random.default_rng(0)
            cache[(n, d)] = (rng.random((n, d), dtype=np.float32), rng.random(n) / n)
        return cache[(n, d)]

    return get


@pytest.mark.parametrize("impl", FLAT_IMPLS)
@pytest.mark.parametrize("n,d", FLAT_CASES)
def test_flat_fp32(benchmark, floor_report, flat_data, n, d, impl):
    X, w = flat_data(n, d)
    fn = _flat_impl(impl, X, w)
    benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)
    seconds = min(best_time(fn, repeat=5), benchmark.stats.stats.min)
    floor_report.add(f"flat fp32 N={n} D={d:.0e} (N*D={n * d:.0e})", impl, seconds, (n * d + d) * 4,
                     reference=impl == "torch.mv")


FLAT_CUDA_IMPLS = ["fastfair", "torch (w[:,None]*X).sum(0)", "torch.mv", "cupy w @ X",
                   "flower-style loop (torch)"]


def _flat_cuda_impl(impl, X, w):
    out = torch.empty(X.shape[1], dtype=X.dtype, device=X.device)
    if impl == "fastfair":
        return lambda: ops.weighted_average(X, w, out=out)
    if impl == "torch (w[:,None]*X).sum(0)":
        return lambda: (w[:, None] * X).sum(0)
    if impl == "torch.mv":
        return lambda: torch.mv(X.T, w)
    if impl == "cupy w @ X":
        cupy = pytest.importorskip("cupy")
        Xc, wc = cupy.from_dlpack(X), cupy.from_dlpack(w)
        return lambda: wc @ Xc
    if impl == "flower-style loop (torch)":
        counts = (w * 1e6).long().tolist()
        results = [([X[i]], counts[i]) for i in range(X.shape[0])]
        return lambda: flower_aggregate(results)
    raise ValueError(impl)


@pytest.mark.parametrize("impl", FLAT_CUDA_IMPLS)
@pytest.mark.parametrize("n,d", FLAT_CASES)
def test_flat_fp32_cuda(cuda_floor_report, n, d, impl):
    g = torch.Generator(device="cuda").manual_seed(0)
    X = torch.rand(n, d, device="cuda", generator=g)
    w = torch.rand(n, device="cuda", generator=g) / n
    seconds = gpu_time(_flat_cuda_impl(impl, X, w))
    cuda_floor_report.add(f"flat fp32 N={n} D={d:.0e} (N*D={n * d:.0e})", impl, seconds,
                          (n * d + d) * 4, reference=impl == "torch.mv")


def _resnet18_shapes() -> list:
    """Parameter shapes of a ResNet-18-like model (11.5M parameters in 53 arrays)."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    for cin, cout in [(64, 64), (64, 64), (64, 128), (128, 128), (128, 256), (256, 256),
                      (256, 512), (512, 512)]:
        shapes += [(cout, cin, 3, 3), (cout,), (cout,), (cout, cout, 3, 3), (cout,), (cout,)]
    shapes += [(1000, 512), (1000,)]
    return shapes


LIST_IMPLS = ["fastfair", "torch._foreach_add_", "flower-style loop"]


def list_shapes() -> list:
    """The list case's parameter shapes: ResNet-18-like, or four small arrays in smoke mode."""
    return sizes(_resnet18_shapes(), [(16, 3, 3, 3), (16,), (10, 16), (10,)])


@pytest.fixture(scope="module")
def list_data():
    n = sizes(100, 4)
    shapes = list_shapes()
    total = sum(int(np.prod(s)) for s in shapes)
    gen = torch.Generator().manual_seed(0)
    clients = [[torch.rand(s, generator=gen) for s in shapes] for _ in range(n)]
    w = np.full(n, 1.0 / n)
    return clients, w, total


def _list_impl(impl, clients, w):
    """The list case's implementations over ``clients`` (per-client lists of tensors, CPU or
    CUDA) with host weights ``w``."""
    n = len(clients)
    if impl == "fastfair":
        out = [torch.empty_like(t) for t in clients[0]]
        w_like = torch.as_tensor(w, device=clients[0][0].device)
        return lambda: ops.weighted_average(clients, w_like, out=out)
    if impl == "torch._foreach_add_":
        acc = [torch.empty_like(t) for t in clients[0]]

        def foreach():
            torch._foreach_zero_(acc)
            for i in range(n):
                torch._foreach_add_(acc, clients[i], alpha=float(w[i]))
        return foreach
    on_cpu = clients[0][0].device.type == "cpu"
    results = [([t.numpy() if on_cpu else t for t in c], 1) for c in clients]
    return lambda: flower_aggregate(results)


def _list_case(clients, total):
    return f"list {len(clients)} x {total / 1e6:.1f}M params ({len(clients[0])} arrays)"


@pytest.mark.parametrize("impl", LIST_IMPLS)
def test_list_of_arrays(benchmark, floor_report, list_data, impl):
    clients, w, total = list_data
    fn = _list_impl(impl, clients, w)
    benchmark.pedantic(fn, rounds=3, iterations=1, warmup_rounds=1)
    floor_report.add(_list_case(clients, total), impl, benchmark.stats.stats.min,
                     (len(clients) + 1) * total * 4, reference=impl == "torch._foreach_add_")


@pytest.mark.parametrize("impl", LIST_IMPLS)
def test_list_of_arrays_cuda(cuda_floor_report, list_data, impl):
    clients, w, total = list_data
    clients = [[t.cuda() for t in c] for c in clients]
    cuda_floor_report.add(_list_case(clients, total), impl,
                          gpu_time(_list_impl(impl, clients, w), calls=3),
                          (len(clients) + 1) * total * 4, reference=impl == "torch._foreach_add_")
