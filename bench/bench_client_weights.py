"""Client-weight ops (softmax, logsumexp, eg_step, dr_gradient, dr_lazy_step, the AAggFF-D
round, sample_clients, sample_available, project_simplex) against torch, NumPy and Numba, each
beside the copy floor of the same run and its reference (pure PyTorch where one exists).

Run: ``python -m pytest bench/bench_client_weights.py -q -s -p no:cacheprovider``. Heavy sizes
(K = 10^8) need about 3 GB of memory.

Floors (bytes moved): softmax = three K-length streams (read x twice, write p once); logsumexp =
one stream; the AAggFF-D round and sampling are latency-bound, so their floor row uses the bytes
they touch (the lazy round: m ids, m responses, m weights, m state reads and writes). The
``cuda`` cases run the same ops on the GPU against torch, floored by its device-to-device copy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fastfair
from bench.conftest import best_time, gpu_time, sizes
from fastfair import ops

torch = pytest.importorskip("torch")
numba = pytest.importorskip("numba")

SIZES = sizes([10 ** 6, 10 ** 7, 10 ** 8], [10 ** 4])
MEDIUM = sizes([10 ** 6, 10 ** 7], [10 ** 4])
M = sizes(1000, 100)  # sampled clients per round


@numba.njit(parallel=True, fastmath=True, cache=False)
def _numba_softmax(x, out):
    m = -np.inf
    for i in numba.prange(x.shape[0]):  # numba turns this into a parallel max reduction
        m = max(m, x[i])
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += math.exp(np.float64(x[i] - m))
    inv = 1.0 / s
    for i in numba.prange(x.shape[0]):
        out[i] = math.exp(x[i] - m) * inv


def _numpy_softmax(x, out):
    np.subtract(x, x.max(), out=out)
    np.exp(out, out=out)
    out *= 1.0 / out.sum(dtype=np.float64)


@pytest.mark.parametrize("K", SIZES)
def test_softmax(floor_report, K):
    x = np.random.default_rng(0).standard_normal(K).astype(np.float32)
    out = np.empty_like(x)
    xt = torch.from_numpy(x)
    streams = 3 * 4 * K
    case = f"softmax f32 K=1e{round(math.log10(K))}"
    threads = fastfair.get_num_threads()
    floor_report.add(case, "fastfair", best_time(lambda: ops.softmax(x, out=out)), streams)
    if threads > 1:
        fastfair.set_num_threads(1)
        try:
            floor_report.add(case, "fastfair (1 thread)",
                             best_time(lambda: ops.softmax(x, out=out)), streams)
        finally:
            fastfair.set_num_threads(threads)
    floor_report.add(case, "torch.softmax", best_time(lambda: torch.softmax(xt, 0)), streams,
                     reference=True)
    floor_report.add(case, "numpy", best_time(lambda: _numpy_softmax(x, out), repeat=3), streams)
    _numba_softmax(x[:16], out[:16])
    floor_report.add(case, "numba (parallel, fastmath)",
                     best_time(lambda: _numba_softmax(x, out), repeat=3), streams)
    lcase = f"logsumexp f32 K=1e{round(math.log10(K))}"
    floor_report.add(lcase, "fastfair", best_time(lambda: ops.logsumexp(x)), 4 * K)
    floor_report.add(lcase, "torch.logsumexp", best_time(lambda: torch.logsumexp(xt, 0)), 4 * K,
                     reference=True)


@pytest.mark.parametrize("K", MEDIUM)
def test_eg_step_dense(floor_report, K):
    rng = np.random.default_rng(1)
    G, g = rng.standard_normal(K), rng.standard_normal(K) * 1e-9
    p = np.empty(K)
    Gt, gt = torch.from_numpy(G.copy()), torch.from_numpy(g)
    case = f"eg_step dense f64 K=1e{round(math.log10(K))}"
    # Reads G and g twice, writes G and p once: 6 float64 streams.
    floor_report.add(case, "fastfair", best_time(lambda: ops.eg_step(G, g, eta=0.1, out=p)),
                     6 * 8 * K)
    floor_report.add(case, "torch (add_, softmax)",
                     best_time(lambda: torch.softmax(Gt.add_(gt) * -0.1, 0)), 6 * 8 * K,
                     reference=True)


@pytest.mark.parametrize("K", MEDIUM)
def test_eg_step_sparse(floor_report, K):
    """The sparse form: ``G[ids] += values`` for m clients, then the softmax over all K."""
    rng = np.random.default_rng(5)
    G = rng.standard_normal(K)
    ids = ops.sample_clients(K, M, seed=5, round=0)
    values = rng.standard_normal(M) * 1e-9
    p = np.empty(K)
    Gt, idt, vt = torch.from_numpy(G.copy()), torch.from_numpy(ids), torch.from_numpy(values)
    case = f"eg_step sparse f64 K=1e{round(math.log10(K))} m={M}"
    # The softmax reads G twice and writes p once.
    floor_report.add(case, "fastfair",
                     best_time(lambda: ops.eg_step(G, eta=0.1, ids=ids, values=values, out=p)),
                     3 * 8 * K)
    floor_report.add(case, "torch (index_add_, softmax)",
                     best_time(lambda: torch.softmax(Gt.index_add_(0, idt, vt) * -0.1, 0)),
                     3 * 8 * K, reference=True)


def _torch_dr_gradient(r, ids, p, c):
    """AAggFF-D's dense DR gradient (docs/algorithms.md §2.5.3) in plain PyTorch."""
    rbar = r.mean()
    rhat = torch.full_like(p, float(rbar))
    rhat[ids] = rbar + (r - rbar) / c
    den = 1.0 + rbar * p.sum()
    return -rhat / den + rbar * (p @ (rhat - rbar)) / den ** 2


@pytest.mark.parametrize("K", MEDIUM)
def test_dr_gradient(floor_report, K):
    rng = np.random.default_rng(6)
    ids = ops.sample_clients(K, M, seed=6, round=0)
    r = rng.uniform(0, M / K, M)
    p, g = np.full(K, 1.0 / K), np.empty(K)
    rt, idt, pt = torch.from_numpy(r), torch.from_numpy(ids), torch.from_numpy(p)
    case = f"dr_gradient K=1e{round(math.log10(K))} m={M}"
    # Reads p, writes g.
    floor_report.add(case, "fastfair",
                     best_time(lambda: ops.dr_gradient(r, ids, p, sample_prob=M / K, out=g)),
                     2 * 8 * K)
    floor_report.add(case, "torch", best_time(lambda: _torch_dr_gradient(rt, idt, pt, M / K)),
                     2 * 8 * K, reference=True)


def _torch_dr_lazy_step(D, ids, r, c, eta):
    """AAggFF-D's O(m) lazy round (docs/algorithms.md §2.5.6) in plain PyTorch."""
    rbar = r.mean()
    D.index_add_(0, ids, -(r - rbar) / (c * (1.0 + rbar)))
    return torch.softmax(D[ids] * -eta, 0)


@pytest.mark.parametrize("K", sizes([10 ** 6, 10 ** 8], [10 ** 4]))
def test_dr_lazy_step(floor_report, K):
    """The O(m) round alone, over 50 precomputed cohorts (fresh state entries each call)."""
    rng = np.random.default_rng(7)
    cohorts = [ops.sample_clients(K, M, seed=7, round=t) for t in range(50)]
    r = rng.uniform(0, M / K, M)
    D, q = np.zeros(K), np.empty(M)
    Dt, rt = torch.zeros(K, dtype=torch.float64), torch.from_numpy(r)
    cohorts_t = [torch.from_numpy(c) for c in cohorts]
    case = f"dr_lazy_step K=1e{round(math.log10(K))} m={M}"
    calls = iter(range(10 ** 9))

    def fast():
        ids = cohorts[next(calls) % 50]
        ops.dr_lazy_step(D, ids, r, sample_prob=M / K, eta=0.1, out=q)

    def reference():
        _torch_dr_lazy_step(Dt, cohorts_t[next(calls) % 50], rt, M / K, 0.1)

    # m ids, m responses, m weights, m state reads and writes.
    floor_report.add(case, "fastfair", best_time(fast, repeat=50), 5 * 8 * M)
    floor_report.add(case, "torch (index_add_, softmax)", best_time(reference, repeat=50),
                     5 * 8 * M, reference=True)


def _authors_round(G, p, ids, r, c):
    """The authors' dense formulation: the K x K Jacobian of h(r) = -r / (1 + <p, r>) at r0."""
    K = G.shape[0]
    rbar = r.mean()
    rhat = np.full(K, rbar)
    rhat[ids] = rbar + (r - rbar) / c
    r0 = np.full(K, rbar)
    den = 1.0 + p @ r0
    jac = -np.eye(K) / den + np.outer(r0, p) / den ** 2
    G += -r0 / den + jac @ (rhat - r0)
    z = -0.1 * G
    e = np.exp(z - z.max())
    return e / e.sum()


@pytest.mark.parametrize("K", sizes([10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7, 10 ** 8], [10 ** 4]))
def test_aaggffd_round(floor_report, K):
    m = M
    rng = np.random.default_rng(2)
    r = rng.uniform(0, m / K, m)
    case = f"AAggFF-D round K=1e{round(math.log10(K))} m={m}"
    D = np.zeros(K)
    q = np.empty(m)
    rounds = iter(range(10 ** 6))

    def lazy():
        ids = ops.sample_clients(K, m, seed=0, round=next(rounds))
        ops.dr_lazy_step(D, ids, r, sample_prob=m / K, eta=0.1, out=q)

    floor_report.add(case, "fastfair lazy O(m) (+ sampling)", best_time(lazy, repeat=50),
                     5 * 8 * m)
    ids = ops.sample_clients(K, m, seed=0, round=0)
    floor_report.add(case, "fastfair lazy O(m) step alone",
                     best_time(lambda: ops.dr_lazy_step(D, ids, r, sample_prob=m / K, eta=0.1,
                                                        out=q), repeat=50), 5 * 8 * m)
    G, p, g = np.zeros(K), np.full(K, 1.0 / K), np.empty(K)

    def dense():
        ops.dr_gradient(r, ids, p, sample_prob=m / K, out=g)
        ops.eg_step(G, g, eta=0.1, out=p)

    # dr_gradient: read p, write g; eg_step: 6 streams.
    floor_report.add(case, "fastfair dense O(K)", best_time(dense, repeat=3), 8 * 8 * K)
    if K * K * 8 * 2 <= 4 * 2 ** 30:  # the K x K Jacobian (and its product) must fit in 4 GiB
        Ga, pa = np.zeros(K), np.full(K, 1.0 / K)
        floor_report.add(case, "authors' K x K formulation",
                         best_time(lambda: _authors_round(Ga, pa, ids, r, m / K), repeat=1),
                         8 * K * K, reference=True)


def test_sampling(floor_report):
    """m = 1000 of K = 10^9: no O(K) method (``torch.randperm``) fits; NumPy's O(m) set-based
    draw is the reference."""
    ids = np.empty(1000, dtype=np.int64)
    rounds = iter(range(10 ** 6))
    floor_report.add("sample_clients m=1e3 of K=1e9", "fastfair (Feistel, O(m))",
                     best_time(lambda: ops.sample_clients(10 ** 9, 1000, seed=3, round=next(rounds),
                                                          out=ids), repeat=50), 8 * 1000)
    gen = np.random.default_rng(3)
    floor_report.add("sample_clients m=1e3 of K=1e9", "numpy Generator.choice",
                     best_time(lambda: gen.choice(10 ** 9, 1000, replace=False), repeat=20),
                     8 * 1000, reference=True)


@pytest.mark.parametrize("K", MEDIUM)
def test_sample_available(floor_report, K):
    prob = np.random.default_rng(8).uniform(0.05, 0.95, K)
    mask = np.empty(K, dtype=bool)
    probt, gen = torch.from_numpy(prob), torch.Generator().manual_seed(8)
    rounds = iter(range(10 ** 6))
    case = f"sample_available K=1e{round(math.log10(K))}"
    # Reads prob (float64), writes the mask (1 byte per client).
    floor_report.add(case, "fastfair (Philox)",
                     best_time(lambda: ops.sample_available(prob, seed=8, round=next(rounds),
                                                            out=mask)), 9 * K)
    floor_report.add(case, "torch.rand < prob",
                     best_time(lambda: torch.rand(K, dtype=torch.float64, generator=gen) < probt),
                     9 * K, reference=True)


def _torch_project_simplex(v, j):
    """The sort-based projection (Held et al.; Duchi et al. 2008) in plain PyTorch; ``j`` is
    ``1..K``."""
    u = torch.sort(v, descending=True).values
    css = torch.cumsum(u, 0) - 1.0
    rho = int(torch.nonzero(u - css / j > 0)[-1]) + 1
    return torch.clamp(v - css[rho - 1] / rho, min=0.0)


@pytest.mark.parametrize("K", MEDIUM)
def test_project_simplex(floor_report, K):
    v = np.random.default_rng(4).standard_normal(K)
    out = np.empty_like(v)
    vt, j = torch.from_numpy(v), torch.arange(1, K + 1, dtype=torch.float64)
    case = f"project_simplex f64 K=1e{round(math.log10(K))}"
    # Reads v twice (scan, output pass) and writes the result once.
    floor_report.add(case, "fastfair (Condat)", best_time(lambda: ops.project_simplex(v, out=out)),
                     3 * 8 * K)
    floor_report.add(case, "torch (sort)", best_time(lambda: _torch_project_simplex(vt, j),
                                                     repeat=3), 3 * 8 * K, reference=True)
    floor_report.add(case, "reference (NumPy sort)",
                     best_time(lambda: fastfair.reference.project_simplex(v), repeat=2), 3 * 8 * K)


@pytest.mark.parametrize("K", SIZES)
def test_softmax_cuda(cuda_floor_report, K):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(K, device="cuda", generator=g)
    out = torch.empty_like(x)
    size = f"K=1e{round(math.log10(K))}"
    cuda_floor_report.add(f"softmax f32 {size}", "fastfair",
                          gpu_time(lambda: ops.softmax(x, out=out)), 3 * 4 * K)
    cuda_floor_report.add(f"softmax f32 {size}", "torch.softmax",
                          gpu_time(lambda: torch.softmax(x, 0, out=out)), 3 * 4 * K,
                          reference=True)
    cuda_floor_report.add(f"logsumexp f32 {size}", "fastfair", gpu_time(lambda: ops.logsumexp(x)),
                          4 * K)
    cuda_floor_report.add(f"logsumexp f32 {size}", "torch.logsumexp",
                          gpu_time(lambda: torch.logsumexp(x, 0)), 4 * K, reference=True)


@pytest.mark.parametrize("K", SIZES)
def test_aaggffd_round_cuda(cuda_floor_report, K):
    """The dense O(K) AAggFF-D round (DR gradient + EG step) on the GPU, with its sampling."""
    m = 1000
    g = torch.Generator(device="cuda").manual_seed(2)
    r = torch.rand(m, device="cuda", dtype=torch.float64, generator=g) * (m / K)
    G = torch.zeros(K, device="cuda", dtype=torch.float64)
    p = torch.full((K,), 1.0 / K, device="cuda", dtype=torch.float64)
    grad = torch.empty_like(p)
    ids = torch.empty(m, device="cuda", dtype=torch.int64)
    rounds = iter(range(10 ** 6))

    def dense():
        ops.sample_clients(K, m, seed=0, round=next(rounds), out=ids)
        ops.dr_gradient(r, ids, p, sample_prob=m / K, out=grad)
        ops.eg_step(G, grad, eta=0.1, out=p)

    cuda_floor_report.add(f"AAggFF-D round K=1e{round(math.log10(K))} m=1e3", "fastfair dense O(K)",
                          gpu_time(dense), 8 * 8 * K)


@pytest.mark.parametrize("K", [10 ** 6, 10 ** 7])
def test_project_simplex_cuda(cuda_floor_report, K):
    v = torch.randn(K, device="cuda", dtype=torch.float64,
                    generator=torch.Generator(device="cuda").manual_seed(4))
    out = torch.empty_like(v)
    cuda_floor_report.add(f"project_simplex f64 K=1e{round(math.log10(K))}", "fastfair",
                          gpu_time(lambda: ops.project_simplex(v, out=out), calls=3), 3 * 8 * K)
    rows = v.reshape(1000, K // 1000)
    rows_out = torch.empty_like(rows)
    cuda_floor_report.add(f"project_simplex f64 1000 rows x 1e{round(math.log10(K)) - 3}",
                          "fastfair (row per block)",
                          gpu_time(lambda: ops.project_simplex(rows, out=rows_out)), 3 * 8 * K)
