"""AAggFF-D's DR gradient: the golden vectors of docs/algorithms.md §2.5.6, dense == lazy,
reference, errors."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fastfair import ops, reference
from tests.helpers.arrays import requires_cuda, torch

# docs/algorithms.md §2.5.6: K = 6, Weibull, C2 = C = m/K = 1/3, p^(1) = 1/6.
GOLDEN_ROUNDS = [([0, 3], [0.5, 1.5]), ([1, 3], [2.0, 1.0]), ([2, 5], [0.3, 0.9])]
GOLDEN_P = [
    [0.148209, 0.166299, 0.166299, 0.186597, 0.166299, 0.166299],
    [0.151535, 0.177701, 0.166476, 0.171336, 0.166476, 0.166476],
    [0.153331, 0.176010, 0.153331, 0.170537, 0.166339, 0.180452],
]
GOLDEN_Q = [[0.442671, 0.557329], [0.509118, 0.490882], [0.459373, 0.540627]]


def weibull_responses(losses, c2):
    """r = C2 * (1 - exp(-x^2)), x = F / mean(F) (docs/algorithms.md §2.2 with C1 = 0)."""
    x = np.asarray(losses) / np.mean(losses)
    return c2 * (1.0 - np.exp(-x ** 2))


def eta(K, c, t):
    """sqrt(log K) / (L sqrt(t + 1)) with L = C2 + 2 for C1 = 0, C2 = C (docs/algorithms.md
    §2.5.4-§2.5.5)."""
    return math.sqrt(math.log(K)) / ((c + 2.0) * math.sqrt(t + 1))


def dense_rounds(K, rounds, variant="paper"):
    G, p, outs = np.zeros(K), np.full(K, 1.0 / K), []
    for t, (S, F) in enumerate(rounds, start=1):
        c = len(S) / K
        g = ops.dr_gradient(weibull_responses(F, c), S, p, sample_prob=c, variant=variant)
        p = ops.eg_step(G, g, eta=eta(K, c, t))
        outs.append((p.copy(), p[S] / p[S].sum()))
    return outs


def lazy_rounds(K, rounds, variant="paper"):
    D, outs = np.zeros(K), []
    for t, (S, F) in enumerate(rounds, start=1):
        c = len(S) / K
        e = eta(K, c, t)
        q = ops.dr_lazy_step(D, S, weibull_responses(F, c), sample_prob=c, eta=e, variant=variant)
        outs.append((ops.softmax(D, scale=-e), q))
    return outs


@pytest.mark.parametrize("form", [dense_rounds, lazy_rounds])
def test_golden_vectors(form):
    for (p, q), want_p, want_q in zip(form(6, GOLDEN_ROUNDS), GOLDEN_P, GOLDEN_Q):
        np.testing.assert_allclose(p, want_p, atol=5e-7)
        np.testing.assert_allclose(q, want_q, atol=5e-7)


@pytest.mark.parametrize("variant", ["paper", "reference_code"])
def test_lazy_equals_dense(rng, variant):
    K, rounds = 10, []
    for _ in range(6):
        rounds.append((sorted(rng.choice(K, 3, replace=False).tolist()), rng.uniform(0.2, 2.0, 3)))
    for (pd, qd), (pl, ql) in zip(dense_rounds(K, rounds, variant),
                                  lazy_rounds(K, rounds, variant)):
        np.testing.assert_allclose(pd, pl, rtol=0, atol=1e-12)
        np.testing.assert_allclose(qd, ql, rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant", ["paper", "reference_code"])
def test_dense_against_reference(rng, variant):
    K, m = 1000, 37
    ids = rng.choice(K, m, replace=False)
    r = rng.uniform(0, 0.04, m)
    p = rng.dirichlet(np.ones(K)) * (1.0 if variant == "paper" else 37.0)  # round-1 mass C*K
    g, rhat = ops.dr_gradient(r, ids, p, sample_prob=m / K, variant=variant, with_estimate=True)
    want_g, want_rhat = reference.dr_gradient(r, ids, p, sample_prob=m / K, variant=variant)
    np.testing.assert_allclose(g, want_g, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(rhat, want_rhat, rtol=1e-12)
    D, want_D = rng.standard_normal(K), None
    want_D = D.copy()
    q = ops.dr_lazy_step(D, ids, r, sample_prob=m / K, eta=0.3, variant=variant,
                         prior_mass=float(p.sum()))
    want_q = reference.dr_lazy_step(want_D, ids, r, sample_prob=m / K, eta=0.3, variant=variant,
                                    prior_mass=float(p.sum()))
    np.testing.assert_allclose(D, want_D, rtol=1e-14)
    np.testing.assert_allclose(q, want_q, rtol=1e-12)


def test_awkward_sizes():
    # m = K = 1: the estimate is r itself, the weight is 1.
    g = ops.dr_gradient([0.5], [0], np.ones(1), sample_prob=1.0)
    np.testing.assert_allclose(g, [-0.5 / 1.5])
    D = np.zeros(1)
    np.testing.assert_array_equal(ops.dr_lazy_step(D, [0], [0.5], sample_prob=1.0, eta=1.0), [1.0])
    # m = 0: nothing changes, no weights.
    D = np.arange(4.0)
    q = ops.dr_lazy_step(D, np.zeros(0, dtype=np.int64), [], sample_prob=0.5, eta=1.0)
    assert q.shape == (0,)
    np.testing.assert_array_equal(D, np.arange(4.0))


def test_errors_leave_state_unchanged():
    D = np.zeros(5)
    with pytest.raises(ValueError, match="distinct"):
        ops.dr_lazy_step(D, [1, 1], [0.1, 0.2], sample_prob=0.4, eta=1.0)
    with pytest.raises(ValueError, match=r"in \[0, 5\); got -1"):
        ops.dr_lazy_step(D, [-1, 1], [0.1, 0.2], sample_prob=0.4, eta=1.0)
    with pytest.raises(ValueError, match="responses must be finite; got nan at position 1"):
        ops.dr_lazy_step(D, [0, 1], [0.1, np.nan], sample_prob=0.4, eta=1.0)
    with pytest.raises(ValueError, match="sample_prob must be in"):
        ops.dr_lazy_step(D, [0, 1], [0.1, 0.2], sample_prob=0.0, eta=1.0)
    with pytest.raises(ValueError, match=r"responses must have shape \[2\]"):
        ops.dr_lazy_step(D, [0, 1], [0.1], sample_prob=0.4, eta=1.0)
    with pytest.raises(ValueError, match="variant"):
        ops.dr_lazy_step(D, [0], [0.1], sample_prob=0.4, eta=1.0, variant="code")
    np.testing.assert_array_equal(D, np.zeros(5))
    with pytest.raises(ValueError, match="at least one sampled client"):
        ops.dr_gradient([], np.zeros(0, dtype=np.int64), np.ones(5) / 5, sample_prob=0.2)
    with pytest.raises(ValueError, match="float64"):
        ops.dr_lazy_step(np.zeros(5, dtype=np.float32), [0], [0.1], sample_prob=0.4, eta=1.0)
    # Ragged or two-axis ids/responses, outputs named as the caller passed them (out).
    with pytest.raises(ValueError, match="ids must be a rectangular array or a flat sequence"):
        ops.dr_lazy_step(D, [[0, 1], [2]], [0.1, 0.2, 0.3], sample_prob=0.4, eta=1.0)
    with pytest.raises(ValueError, match=r"ids must have shape \[m\]; got shape \(2, 1\)"):
        ops.dr_lazy_step(D, [[0], [1]], [0.1, 0.2], sample_prob=0.4, eta=1.0)
    with pytest.raises(ValueError, match="responses must be a rectangular array or a flat"):
        ops.dr_lazy_step(D, [0, 1], [[0.1], [0.2, 0.3]], sample_prob=0.4, eta=1.0)
    with pytest.raises(ValueError, match=r"out must have shape \[2\]"):
        ops.dr_lazy_step(D, [0, 1], [0.1, 0.2], sample_prob=0.4, eta=1.0, out=np.zeros(3))
    with pytest.raises(ValueError, match=r"out must have shape \[5\]"):
        ops.dr_gradient([0.1], [0], np.ones(5) / 5, sample_prob=0.2, out=np.zeros(4))
    with pytest.raises(TypeError, match="eta must be a real number"):
        ops.dr_lazy_step(D, [0, 1], [0.1, 0.2], sample_prob=0.4, eta=None)
    np.testing.assert_array_equal(D, np.zeros(5))


def exact_dense(r, ids, p, c, variant="paper"):
    """The DR gradient in exact rational arithmetic (fractions), rounded once at the end."""
    r, p, c = [Fraction(v) for v in r], [Fraction(v) for v in p], Fraction(c)
    rbar = sum(r) / len(r)
    rhat = [rbar] * len(p)
    for j, i in enumerate(ids):
        rhat[i] = (rbar if variant == "paper" else 0) + (r[j] - rbar) / c
    den = 1 + rbar * sum(p)
    s = sum(pi * (rh - rbar) for pi, rh in zip(p, rhat))
    return np.array([float(-rh / den + rbar * s / den ** 2) for rh in rhat])


@pytest.mark.parametrize("variant", ["paper", "reference_code"])
def test_huge_responses_are_exact(rng, variant):
    """The gradient stays bounded as the responses grow; it used to overflow to NaN from 1e154
    (the dense form's rbar * s) or 1e308 (the lazy form's (r - rbar) / C) and corrupt D."""
    for _ in range(50):
        K = int(rng.integers(1, 9))
        m = int(rng.integers(1, K + 1))
        ids = rng.choice(K, m, replace=False)
        r = rng.uniform(0, 1, m) * 10.0 ** rng.uniform(0, 308)
        p = rng.dirichlet(np.ones(K))
        c = float(rng.uniform(0.05, 1.0))
        g = ops.dr_gradient(r, ids, p, sample_prob=c, variant=variant)
        np.testing.assert_allclose(g, exact_dense(r, ids, p, c, variant), rtol=1e-12, atol=1e-300)
        # The lazy step's delta is the sampled part of the same gradient: D = -delta from zero.
        D = np.zeros(K)
        ops.dr_lazy_step(D, ids, r, sample_prob=c, eta=0.5, variant=variant, prior_mass=p.sum())
        want = exact_dense(r, ids, p, c, variant)
        np.testing.assert_allclose(D[ids] - D[ids][0], (want[ids] - want[ids][0]), rtol=1e-9,
                                   atol=1e-12 * np.abs(want).max())
    D = np.zeros(10)
    q = ops.dr_lazy_step(D, [3, 4], [1e308, 0.0], sample_prob=0.2, eta=0.5)
    np.testing.assert_allclose(D[3:5], [-5.0, 5.0], rtol=1e-15)  # (r - rbar) / (C rbar)
    np.testing.assert_allclose(q, reference.softmax(np.array([-5.0, 5.0]), -0.5), rtol=1e-15)


def test_rejected_rounds_change_nothing():
    D = np.linspace(-1, 1, 6)
    before = D.copy()
    # 1 + mean(r) * mass <= 0: the log in AAggFF's loss is undefined.
    with pytest.raises(ValueError, match=r"1 \+ mean\(responses\) \* prior_mass must be positive"):
        ops.dr_lazy_step(D, [0, 1], [-3.0, 1.0], sample_prob=0.5, eta=1.0)
    with pytest.raises(ValueError, match=r"mean\(responses\) \* sum\(p\) must be positive"):
        ops.dr_gradient([-5.0, 1.0], [0, 1], np.full(6, 1 / 6), sample_prob=0.5)
    # rbar = 0 with a huge spread: delta = (r - rbar) / C really is beyond float64.
    with pytest.raises(ValueError, match="DR step delta overflows"):
        ops.dr_lazy_step(D, [2, 3], [1e308, -1e308], sample_prob=0.2, eta=1.0)
    with pytest.raises(ValueError, match="state must be finite"):
        E = D.copy()
        E[4] = np.nan
        ops.dr_lazy_step(E, [4, 5], [0.1, 0.2], sample_prob=0.2, eta=1.0)
    np.testing.assert_array_equal(D, before)
    g = np.full(6, 7.0)
    with pytest.raises(ValueError, match="DR estimate rhat overflows"):
        ops.dr_gradient([1.5e308, 1e308], [0, 1], np.full(6, 1 / 6), sample_prob=0.2, out=g,
                        with_estimate=True)
    with pytest.raises(ValueError, match="p must be finite"):
        ops.dr_gradient([0.1], [0], np.array([0.5, np.inf, 0, 0, 0, 0]), sample_prob=0.5, out=g)
    np.testing.assert_array_equal(g, np.full(6, 7.0))


@requires_cuda
def test_cuda_matches_cpu(rng):
    K, m = 5000, 50
    ids = rng.choice(K, m, replace=False)
    r = rng.uniform(0, 0.01, m)
    p = rng.dirichlet(np.ones(K))
    g = ops.dr_gradient(r, ids, torch.from_numpy(p).cuda(), sample_prob=m / K)
    np.testing.assert_allclose(g.cpu().numpy(), ops.dr_gradient(r, ids, p, sample_prob=m / K),
                               rtol=1e-12, atol=1e-16)
    D = rng.standard_normal(K)
    Dc = torch.from_numpy(D).cuda()
    qc = ops.dr_lazy_step(Dc, ids, r, sample_prob=m / K, eta=0.2)
    q = ops.dr_lazy_step(D, ids, r, sample_prob=m / K, eta=0.2)
    np.testing.assert_allclose(qc.cpu().numpy(), q, rtol=1e-12)
    np.testing.assert_allclose(Dc.cpu().numpy(), D, rtol=1e-15)
