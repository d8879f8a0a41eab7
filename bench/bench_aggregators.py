"""Per-round cost of each rule's ``weights`` (m = 1000 sampled clients) as the population K grows,
next to its float64 reference, with the state's bytes per client; and one whole round
(``weights`` + ``aggregate`` of the updates) per rule family beside the float64 reference rule
with a NumPy aggregation.

Run: ``python -m pytest bench/bench_aggregators.py -q -s`` (``-k FedMABA`` for one rule).
AAggFF-S, cross-silo with O(K^2) state, is timed apart at K = 10, 100, 1000 with m = K.
``FASTFAIR_BENCH_MAX_K`` caps K (default 1e8); ``FASTFAIR_BENCH_MAX_REF_K`` caps K for the
references whose cost is O(K) per round (default 1e7: FedMABA's and AAggFF-D's dense references
need several GB and seconds per round at 1e8; AFL's copies lambda every round). The time of one
round is the minimum over distinct rounds (fresh client ids each time, so the state's random
reads are not cached); the "floor" column is the bytes a round must touch (ids, losses, state
read and written, result) over the copy bandwidth.
"""

from __future__ import annotations

import gc
import math
import os
import time

import numpy as np
import pytest

from bench.conftest import sizes
from fastfair import aggregators as A
from fastfair.reference import aggregators as ref

M = sizes(1000, 100)
ROUNDS = sizes(30, 5)
MAX_K = int(float(os.environ.get("FASTFAIR_BENCH_MAX_K", "1e8")))
MAX_REF_K = int(float(os.environ.get("FASTFAIR_BENCH_MAX_REF_K", "1e7")))
KS = [k for k in sizes((10**3, 10**4, 10**5, 10**6, 10**7, 10**8), (10**3,)) if k <= MAX_K]


def _rounds(K: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(rng.choice(K, M, replace=False), rng.gamma(2.0, 0.5, M)) for _ in range(ROUNDS)]


def _best(fn, rounds) -> float:
    best = math.inf
    for ids, losses in rounds:
        t0 = time.perf_counter()
        fn(ids, losses)
        best = min(best, time.perf_counter() - t0)
    return best


def _state_bytes(agg) -> int:
    state = agg.state_dict()["state"]
    return sum(v.nbytes for v in state.values() if isinstance(v, np.ndarray))


# rule -> (factory(K), reference(K) -> per-round callable or None, state bytes touched per client)
def _fedmaba_reference(K):
    log_p = np.full(K, -math.log(K))

    def run(ids, losses):
        nonlocal log_p
        _, log_p = ref.fedmaba_round(log_p, ids, losses, rho=0.1)

    return run


def _aaggffd_reference(K):
    G, p, t = np.zeros(K), np.full(K, 1.0 / K), 0

    def run(ids, losses):
        nonlocal G, p, t
        t += 1
        G, p, _ = ref.aaggffd_round(G, p, ids, losses, t)

    return run


def _afl_reference(K):
    lam = np.full(K, 1.0 / K)

    def run(ids, losses):
        nonlocal lam
        lam, _ = ref.afl_round(lam, ids, losses, 0.1)

    return run


def _fedavg_reference(K):
    n = np.ones(K)
    return lambda ids, losses: ref.fedavg_weights(n[ids])


RULES = {
    "FairAvg": (lambda K: A.FairAvg(K), lambda K: (lambda ids, losses:
                                                   ref.fairavg_weights(ids.size)), 0, False),
    "FedAvg": (lambda K: A.FedAvg(K, num_samples=np.ones(K)), _fedavg_reference, 8, False),
    "FedMABA": (lambda K: A.FedMABA(K, rho=0.1), _fedmaba_reference, 16, True),
    "AAggFFD": (lambda K: A.AAggFFD(K), _aaggffd_reference, 16, True),
    "AFL": (lambda K: A.AFL(K, 0.1), _afl_reference, 16, True),
    "TERM": (lambda K: A.TERM(K, 0.5), lambda K: (lambda ids, losses:
                                                  ref.term_weights(losses, 0.5)), 0, False),
    "PropFair-eg": (lambda K: A.PropFair(K, M=50.0, weighting="eg"),
                    lambda K: (lambda ids, losses: ref.propfair_weights(losses, 50.0)), 0, False),
    "FedCVaRAvg-fedsgd": (lambda K: A.FedCVaRAvg(K, 0.3, 0.1, form="fedsgd", lr_threshold=0.01),
                          lambda K: (lambda ids, losses: ref.cvar_fedsgd_round(
                              np.zeros(1), 0.0, losses, np.zeros((M, 1)), 0.3, 0.1, 0.1, 0.01)),
                          0, False),
}


@pytest.mark.parametrize("K", KS, ids=[f"K=1e{int(math.log10(k))}" for k in KS])
@pytest.mark.parametrize("rule", list(RULES))
def test_weights_per_round(floor_report, rule, K):
    factory, reference, state_touch, dense_reference = RULES[rule]
    rounds = _rounds(K)
    agg = factory(K)
    seconds = _best(agg.weights, rounds)
    per_client = _state_bytes(agg) / K
    case = f"{rule} K=1e{int(math.log10(K))} m={M} ({per_client:g} B/client)"
    moved = M * (8 + 8 + state_touch + 8)
    floor_report.add(case, "fastfair", seconds, moved)
    del agg
    gc.collect()
    if dense_reference and K > MAX_REF_K:
        return
    run = reference(K)
    ref_seconds = _best(run, rounds[:5] if dense_reference else rounds)
    floor_report.add(case, "reference (float64 NumPy)", ref_seconds, moved, reference=True)
    del run
    gc.collect()


def test_aaggffd_after_many_rounds(floor_report):
    """AAggFF-D's round at the largest K once many rounds have stored about m x rounds clients
    in its sparse vector (sorted runs that merge geometrically): the min and median of the last
    100 of 1000 rounds, each on fresh ids."""
    K, rounds, tail = MAX_K, sizes(1000, 20), sizes(100, 5)
    rng = np.random.default_rng(0)
    agg, seconds = A.AAggFFD(K), []
    for _ in range(rounds):
        ids, losses = rng.choice(K, M, replace=False), rng.gamma(2.0, 0.5, M)
        t0 = time.perf_counter()
        agg.weights(ids, losses)
        seconds.append(time.perf_counter() - t0)
    last = seconds[-tail:]
    stored = agg.state_dict()["state"]["D_ids"].shape[0]
    case = f"AAggFFD K=1e{int(math.log10(K))} m={M} after {rounds} rounds ({stored} stored)"
    print(f"{case}: last {tail} rounds min {min(last) * 1e6:.0f} us, median "
          f"{np.median(last) * 1e6:.0f} us")
    floor_report.add(case, "fastfair", min(last), M * (8 + 8 + 16 + 8))


@pytest.mark.parametrize("K", sizes([10, 100, 1000], [10]))
def test_aaggffs_per_round(floor_report, K):
    """AAggFF-S (cross-silo, m = K): one ONS round with its exact projection, O(K^2) state; the
    reference rebuilds the QP and enumerates supports (K <= 12 only)."""
    rng = np.random.default_rng(2)
    agg = A.AAggFFS(K)
    ids = np.arange(K)
    losses = rng.gamma(2.0, 0.5, (ROUNDS, K))
    seconds = math.inf
    for F in losses:
        t0 = time.perf_counter()
        agg.weights(ids, F)
        seconds = min(seconds, time.perf_counter() - t0)
    case = f"AAggFFS K={K} m={K} ({_state_bytes(agg) / K:g} B/client)"
    floor_report.add(case, "fastfair", seconds, 2 * 8 * 2 * K * K)  # H and its inverse, r + w
    if K <= 12:
        ref_seconds = min(_timed(lambda F=F: ref.aaggffs_run(F[None])) for F in losses[:5])
        floor_report.add(case, "reference (float64 NumPy)", ref_seconds, 2 * 8 * 2 * K * K,
                         reference=True)


@pytest.mark.parametrize("eps_name, eps_times_m", [("0.1/m", 0.1), ("1/m", 1.0), ("1", None)])
@pytest.mark.parametrize("m", sizes([10, 100, 1000], [10]))
def test_fedmgda_per_round(floor_report, m, eps_name, eps_times_m):
    """FedMGDA's exact QP from a precomputed Gram matrix (the Gram itself costs O(m^2 d) more)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((m, 4 * m)) + 0.2
    G = X @ X.T
    eps = 1.0 if eps_times_m is None else eps_times_m / m
    agg = A.FedMGDA(10**6, epsilon=eps)
    ids = rng.choice(10**6, m, replace=False)
    agg.weights(ids, gram=G)  # first call pays LAPACK's start-up
    seconds = min(_timed(lambda: agg.weights(ids, gram=G)) for _ in range(3))
    floor_report.add(f"FedMGDA QP m={m} eps={eps_name}", "fastfair", seconds, 8 * m * m)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# One whole round per rule family: K clients, m sampled, D float32 parameters per update.
FAMILY_K, FAMILY_M, FAMILY_D = sizes((10**5, 100, 10**5), (10**3, 10, 10**3))
# One rule per family: FedAvg-like, AAggFF-D, AAggFF-S, FedMABA, q-FedAvg, TERM/AFL/PropFair
# (AFL, the one with per-client state), FedMGDA, Fed-CVaR-Avg (its one-step form).
FAMILIES = ["FedAvg", "AAggFF-D", "AAggFF-S", "FedMABA", "q-FedAvg", "AFL", "FedMGDA",
            "Fed-CVaR-Avg"]


def _fedmgda_coefficients(X64, epsilon):
    """FedMGDA+ in float64 NumPy: the normalised Gram matrix and the enumerated QP (m <= 8)."""
    G = X64 @ X64.T
    inv = 1.0 / np.sqrt(np.diag(G))
    m = G.shape[0]
    lam = ref.fedmgda_lambda(G * inv[:, None] * inv[None, :], max(0.0, 1 / m - epsilon),
                             min(1.0, 1 / m + epsilon))
    return lam * inv


def _family(name, K, X, params, X64, params64):
    """``(fastfair round, reference round)`` of one rule family, each a function of
    ``(ids, losses)`` that moves its own parameters (``params`` float32, ``params64``)."""
    if name == "FedAvg":
        n = np.random.default_rng(3).integers(10, 1000, K).astype(np.float64)
        agg = A.FedAvg(K, num_samples=n)
        state = {}

        def reference(ids, losses):
            params64[:] -= ref.fedavg_weights(n[ids]) @ X64
    elif name == "AAggFF-D":
        agg = A.AAggFFD(K)
        state = {"G": np.zeros(K), "p": np.full(K, 1.0 / K), "t": 0}

        def reference(ids, losses):
            state["t"] += 1
            state["G"], state["p"], q = ref.aaggffd_round(state["G"], state["p"], ids, losses,
                                                          state["t"])
            params64[:] -= q @ X64
    elif name == "AAggFF-S":
        agg = A.AAggFFS(K)

        def reference(ids, losses):
            params64[:] -= ref.aaggffs_run(losses[None])[0] @ X64
    elif name == "FedMABA":
        agg = A.FedMABA(K, rho=0.1)
        state = {"log_p": np.full(K, -math.log(K))}

        def reference(ids, losses):
            c, state["log_p"] = ref.fedmaba_round(state["log_p"], ids, losses, rho=0.1)
            params64[:] -= c @ X64
    elif name == "q-FedAvg":
        agg = A.QFedAvg(K, q=0.1, lipschitz=10.0)

        def reference(ids, losses):
            params64[:] = ref.qfedavg_step(params64, params64[None] - X64, losses, 0.1, 10.0)
    elif name == "AFL":
        agg = A.AFL(K, 0.1)
        state = {"lam": np.full(K, 1.0 / K)}

        def reference(ids, losses):
            state["lam"], c = ref.afl_round(state["lam"], ids, losses, 0.1)
            params64[:] -= c @ X64
    elif name == "FedMGDA":
        agg = A.FedMGDA(K, epsilon=0.1)

        def reference(ids, losses):
            params64[:] -= 0.1 * _fedmgda_coefficients(X64, 0.1) @ X64
    elif name == "Fed-CVaR-Avg":
        agg = A.FedCVaRAvg(K, 0.3, 0.1, form="fedsgd", lr_threshold=0.01)
        state = {"t": 0.0}

        def reference(ids, losses):
            params64[:], state["t"] = ref.cvar_fedsgd_round(params64, state["t"], losses, X64,
                                                            0.3, 0.1, 0.1, 0.01)
    else:
        raise ValueError(name)
    inputs = {"updates": X} if name in ("q-FedAvg", "FedMGDA") else {}
    step = {"lr": 0.1} if name in ("FedMGDA", "Fed-CVaR-Avg") else {}

    def fast(ids, losses):
        coef = agg.weights(ids, None if name == "FedMGDA" else losses, **inputs)
        agg.aggregate(X, coef, base=params, **step)

    return fast, reference


@pytest.mark.parametrize("family", FAMILIES)
def test_round_per_family(floor_report, family):
    """``agg.weights`` + ``agg.aggregate(X, coef, base=params)`` (fastfair) against the rule of
    ``fastfair.reference.aggregators`` in float64 with ``params -= coef @ X`` in NumPy.
    AAggFF-S is cross-silo (K = m = 10); FedMGDA's enumerated reference QP takes m <= 8."""
    K, m = FAMILY_K, FAMILY_M
    if family == "AAggFF-S":
        K = m = 10
    elif family == "FedMGDA":
        m = 8
    rng = np.random.default_rng(4)
    X = (rng.standard_normal((m, FAMILY_D)) * 0.01).astype(np.float32)
    params, params64 = np.zeros(FAMILY_D, np.float32), np.zeros(FAMILY_D)
    rounds = [(np.arange(K) if K == m else rng.choice(K, m, replace=False),
               rng.gamma(2.0, 0.5, m)) for _ in range(sizes(10, 3))]
    fast, reference = _family(family, K, X, params, X.astype(np.float64), params64)
    case = f"round {family} K={K} m={m} D={FAMILY_D}"
    # Reads the m updates and the parameters, writes the parameters.
    moved = (m + 2) * FAMILY_D * 4
    floor_report.add(case, "fastfair", _best(fast, rounds), moved)
    floor_report.add(case, "reference (float64 NumPy)", _best(reference, rounds), moved,
                     reference=True)
