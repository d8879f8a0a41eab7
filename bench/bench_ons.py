"""Online Newton Step: one warm round and one cold generalized projection at K = 10 .. 4096.

fastfair's warm round (``OnlineNewtonStep.step``: H and inverse updates, warm-started projection,
certificate) and cold solve (``ons_project``: Cholesky of H and active set) against what ONS
implementations do every round: cvxpy's default solver (the AAggFF authors' choice), OSQP and
Clarabel called directly, and "dense inverse + generic QP" (``numpy.linalg.inv`` then the
projection ``min (p - y)' H (p - y)`` by cvxpy). Baselines solve from scratch, so their warm round
and cold solve are the same figure. The floor is one read of H (cold) or a read and a write of
H and its inverse (warm round), at the copy bandwidth of the same run.

Run: ``python -m pytest bench/bench_ons.py --benchmark-only -q``
(``-k "not 4096"`` skips the minutes the baselines need at K = 4096).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import measure, sizes
from fastfair.ops import OnlineNewtonStep, ons_project, ons_project_batched

SIZES = sizes([10, 100, 1000, 4096], [10, 100])
WARMUP_ROUNDS = 5


def ons_problem(K: int, rounds: int = WARMUP_ROUNDS):
    """An ONS object with AAggFF-S constants (range (0, 1/K): alpha = 4, beta = K / 4) after a
    few rounds, and a stream of further gradients."""
    rng = np.random.default_rng(K)
    ons = OnlineNewtonStep(K, 4.0, K / 4.0)
    for _ in range(rounds):
        ons.step(ons.loss_gradient(rng.uniform(0, 1.0 / K, K)))
    responses = [rng.uniform(0, 1.0 / K, K) for _ in range(64)]
    return ons, responses


def repeats(K: int) -> int:
    return 200 if K <= 100 else (30 if K <= 1000 else 8)


@pytest.mark.parametrize("K", SIZES)
def test_warm_round_fastfair(benchmark, floor_report, K):
    ons, responses = ons_problem(K)
    state = {"t": 0}

    def round_():
        r = responses[state["t"] % len(responses)]
        state["t"] += 1
        ons.step(ons.loss_gradient(r))

    seconds = measure(benchmark, round_, repeats(K))
    assert ons.last_info.kkt_residual <= 1e-9
    floor_report.add(f"ONS warm round K={K}", "fastfair", seconds, 4 * 8 * K * K)


@pytest.mark.parametrize("K", SIZES)
def test_cold_solve_fastfair(benchmark, floor_report, K):
    ons, _ = ons_problem(K)
    H, b = ons.H, ons.b
    seconds = measure(benchmark, lambda: ons_project(H, b), max(3, repeats(K) // 4))
    floor_report.add(f"ONS cold solve K={K}", "fastfair", seconds, 8 * K * K)


def _cvxpy(H, b, solver=None):
    import cvxpy as cp

    K = b.shape[0]
    p = cp.Variable(K)
    prob = cp.Problem(cp.Minimize(0.5 * cp.quad_form(p, cp.psd_wrap(H)) - b @ p),
                      [p >= 0, cp.sum(p) == 1])
    prob.solve(solver=solver)
    return p.value


def _inverse_then_qp(H, b):
    import cvxpy as cp

    Hinv = np.linalg.inv(H)
    y = Hinv @ b
    K = b.shape[0]
    p = cp.Variable(K)
    prob = cp.Problem(cp.Minimize(cp.quad_form(p - y, cp.psd_wrap(H))), [p >= 0, cp.sum(p) == 1])
    prob.solve()
    return p.value


def _osqp(H, b):
    import osqp
    import scipy.sparse as sp

    K = b.shape[0]
    A = sp.vstack([sp.csc_matrix(np.ones((1, K))), sp.identity(K, format="csc")], format="csc")
    lower = np.r_[1.0, np.zeros(K)]
    upper = np.r_[1.0, np.full(K, np.inf)]
    solver = osqp.OSQP()
    solver.setup(sp.csc_matrix(np.triu(H)), -b, A, lower, upper, verbose=False,
                 eps_abs=1e-10, eps_rel=1e-10, polishing=True)
    return solver.solve().x


def _clarabel(H, b):
    import clarabel
    import scipy.sparse as sp

    K = b.shape[0]
    A = sp.vstack([sp.csc_matrix(np.ones((1, K))), -sp.identity(K, format="csc")], format="csc")
    cones = [clarabel.ZeroConeT(1), clarabel.NonnegativeConeT(K)]
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    solver = clarabel.DefaultSolver(sp.csc_matrix(np.triu(H)), -b, A, np.r_[1.0, np.zeros(K)],
                                    cones, settings)
    return np.asarray(solver.solve().x)


BASELINES = {
    "cvxpy default": ("cvxpy", _cvxpy),
    "OSQP": ("osqp", _osqp),
    "Clarabel": ("clarabel", _clarabel),
    "dense inverse + cvxpy": ("cvxpy", _inverse_then_qp),
}


@pytest.mark.parametrize("K", SIZES)
@pytest.mark.parametrize("impl", list(BASELINES))
def test_baseline_solve(benchmark, floor_report, impl, K):
    module, fn = BASELINES[impl]
    pytest.importorskip(module)
    ons, _ = ons_problem(K)
    H, b = ons.H, ons.b
    rounds = 1 if K >= 1000 else 10
    seconds = measure(benchmark, lambda: fn(H, b), rounds, warmup=1 if rounds > 1 else 0)
    p = fn(H, b) if K < 1000 else None
    if p is not None:
        assert np.abs(p - ons.p).max() < 1e-4, f"{impl} disagrees with the exact solution"
    # cvxpy's default solver is what the AAggFF authors call every round.
    floor_report.add(f"ONS warm round K={K}", impl, seconds, 4 * 8 * K * K,
                     reference=impl == "cvxpy default")
    floor_report.add(f"ONS cold solve K={K}", impl, seconds, 8 * K * K,
                     reference=impl == "cvxpy default")


@pytest.mark.parametrize("method", ["active_set", "fista"])
def test_batched_cpu(benchmark, floor_report, method):
    B, K = sizes(10_000, 100), 16
    rng = np.random.default_rng(0)
    G = rng.normal(size=(B, K, 4)) / 4
    H = 0.5 * np.eye(K) + G @ G.transpose(0, 2, 1)
    b = rng.normal(size=(B, K))
    seconds = measure(benchmark, lambda: ons_project_batched(H, b, method=method), 3)
    floor_report.add(f"batched B={B} K=16", f"fastfair cpu {method}", seconds,
                     H.nbytes + b.nbytes)


def test_batched_cuda(cuda_floor_report):
    torch = pytest.importorskip("torch")
    from bench.conftest import gpu_time

    B, K = 10_000, 16
    g = torch.Generator(device="cuda").manual_seed(0)
    G = torch.randn(B, K, 4, device="cuda", dtype=torch.float64, generator=g) / 4
    eye = torch.eye(K, device="cuda", dtype=torch.float64)
    H = (0.5 * eye + G @ G.transpose(1, 2)).contiguous()
    b = torch.randn(B, K, device="cuda", dtype=torch.float64, generator=g)
    seconds = gpu_time(lambda: ons_project_batched(H, b), calls=5)
    cuda_floor_report.add("batched B=1e4 K=16", "fastfair cuda fista", seconds,
                          H.numel() * 8 + b.numel() * 8)
