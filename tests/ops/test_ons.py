"""Simplex QP solvers and the Online Newton Step: the golden vectors of docs/algorithms.md §2.4.3,
the support-enumeration and cvxpy oracles, awkward and ill-conditioned problems, state round trips,
clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.ops import OnlineNewtonStep, ons_project, ons_project_batched
from fastfair.reference import (
    kkt_residual,
    online_newton_step,
    simplex_qp_cvxpy,
    simplex_qp_enumerate,
)
from tests.helpers.arrays import requires_cuda, torch
from tests.helpers.tolerances import QP_TOLERANCES as TOL


def assert_on_simplex(p) -> None:
    p = np.asarray(p)
    assert (p >= 0).all(), f"negative entry {p.min()}"
    assert abs(p.sum() - 1.0) <= TOL["simplex_sum"], f"sum(p) - 1 = {p.sum() - 1.0:.3g}"


def random_spd(rng, K, cond=None):
    Q, _ = np.linalg.qr(rng.normal(size=(K, K)))
    if cond is None:
        eig = rng.uniform(0.1, 3.0, K)
    else:
        eig = np.logspace(0, np.log10(cond), K)
    H = (Q * eig) @ Q.T
    return 0.5 * (H + H.T)


def solve(H, b, **kw):
    p, info = ons_project(H, b, return_info=True, **kw)
    assert_on_simplex(p)
    assert info.kkt_residual <= TOL["kkt"], info
    assert kkt_residual(H, b, p) <= TOL["kkt"]
    return p, info


# ---------------------------------------------------------------------------------------------
# Golden vectors (docs/algorithms.md §2.4.3: K = 3, Weibull, C1 = 0, losses of three rounds).

LOSSES = np.array([[0.5, 1.0, 2.0], [0.6, 0.9, 1.5], [0.4, 1.2, 1.0]])
GOLDEN = {
    ("paper", 1 / 3): [(0.306848, 0.331598, 0.361554), (0.287427, 0.329603, 0.382970),
                       (0.259887, 0.347473, 0.392639)],
    ("reference_code", 1 / 3): [(0.319918, 0.332454, 0.347628), (0.310141, 0.331451, 0.358408),
                          (0.296295, 0.340417, 0.363288)],
    ("paper", 3.0): [None, None, (0.301082, 0.339365, 0.359553)],
}


def weibull_response(F, C2):
    x = F / F.mean()
    return C2 * (1.0 - np.exp(-x ** 2))


@pytest.mark.parametrize("variant,C2", list(GOLDEN))
def test_ons_golden_vectors(variant, C2):
    K = 3
    L = C2  # L_inf = C2 / (1 + C1) with C1 = 0
    alpha, beta = 4 * K * L, 1 / (4 * L)
    ons = OnlineNewtonStep(K, alpha, beta, variant)
    grads, outs = [], []
    for F in LOSSES:
        g = ons.loss_gradient(weibull_response(F, C2))
        grads.append(g)
        outs.append(ons.step(g))
        assert ons.last_info.kkt_residual <= TOL["kkt"]
    oracle = online_newton_step(grads, alpha, beta, variant)
    for t, (p, q, printed) in enumerate(zip(outs, oracle, GOLDEN[(variant, C2)])):
        assert_on_simplex(p)
        np.testing.assert_allclose(p, q, rtol=0, atol=TOL["golden"], err_msg=f"round {t + 1}")
        if printed is not None:
            np.testing.assert_allclose(p, printed, rtol=0, atol=TOL["golden_printed"])


def test_alpha_beta_from_spec_constants():
    # With the code range (0, 1/K): alpha = 4, beta = K / 4 (docs/algorithms.md §2.4).
    K = 3
    L = 1 / K
    assert 4 * K * L == pytest.approx(4.0) and 1 / (4 * L) == pytest.approx(0.75)


# ---------------------------------------------------------------------------------------------
# ons_project against the oracles.

@pytest.mark.parametrize("K", [1, 2, 3, 5, 8, 12])
def test_project_matches_enumeration(rng, K):
    for _ in range(25 if K <= 8 else 6):  # enumeration visits 2^K - 1 supports
        H = random_spd(rng, K)
        b = rng.normal(size=K) * rng.choice([0.1, 1.0, 10.0])
        p, _ = solve(H, b)
        np.testing.assert_allclose(p, simplex_qp_enumerate(H, b), rtol=0, atol=TOL["oracle"])


def test_cold_start_with_small_support(rng):
    # Projected-gradient steps choose the starting support; the active set finishes exactly.
    K = 200
    G = rng.normal(size=(K, 10))
    H = G @ G.T / 10 + 0.05 * np.eye(K)
    b = rng.normal(size=K) * 3
    p, info = solve(H, b)
    assert info.support_size < 10
    q, _ = solve(H, b, warm_start=np.full(K, 1 / K))  # the plain primal active set
    np.testing.assert_allclose(p, q, rtol=0, atol=TOL["oracle"])
    pytest.importorskip("cvxpy")
    np.testing.assert_allclose(p, simplex_qp_cvxpy(H, b), rtol=0, atol=TOL["cvxpy"])


def test_warm_start_reproduces_cold_solution(rng):
    for K in (4, 9, 30):
        H = random_spd(rng, K)
        b = rng.normal(size=K) * 3
        cold, info_cold = solve(H, b)
        warm, info_warm = solve(H, b, warm_start=cold)
        np.testing.assert_allclose(warm, cold, rtol=0, atol=TOL["oracle"])
        assert info_warm.iterations == 0
        # A warm start that is off the simplex is projected onto it first.
        other, _ = solve(H, b, warm_start=rng.normal(size=K))
        np.testing.assert_allclose(other, cold, rtol=0, atol=TOL["oracle"])


def test_certificate_fields(rng):
    H = random_spd(rng, 6)
    b = rng.normal(size=6) * 5
    p, info = solve(H, b)
    assert info.support_size == int((p > 0).sum())
    assert info.converged
    r = H @ p - b
    np.testing.assert_allclose(r[p > 0], info.nu, atol=1e-12 * (1 + np.abs(r).max()))


def test_matches_cvxpy(rng):
    pytest.importorskip("cvxpy")
    for K in (10, 60, 200):
        A = rng.normal(size=(K, K))
        H = A @ A.T / K + 0.05 * np.eye(K)
        b = rng.normal(size=K)
        p, _ = solve(H, b)
        q = simplex_qp_cvxpy(H, b)
        np.testing.assert_allclose(p, q, rtol=0, atol=TOL["cvxpy"])
        f = lambda x, H=H, b=b: 0.5 * x @ H @ x - b @ x  # noqa: E731
        assert f(p) <= f(np.clip(q, 0, None) / np.clip(q, 0, None).sum()) + 1e-12


# ---------------------------------------------------------------------------------------------
# Awkward problems.

def test_k1_and_k2():
    p, info = solve(np.array([[2.0]]), np.array([-5.0]))
    assert p.tolist() == [1.0] and info.support_size == 1
    # K = 2: p1 = clip((b1 - b2 - H12 + H22) / (H11 - 2 H12 + H22), 0, 1).
    H = np.array([[2.0, 0.5], [0.5, 1.0]])
    for b in ([0.0, 0.0], [3.0, -1.0], [-4.0, 2.0], [0.3, 0.1]):
        b = np.array(b)
        p1 = np.clip((b[0] - b[1] - H[0, 1] + H[1, 1]) / (H[0, 0] - 2 * H[0, 1] + H[1, 1]), 0, 1)
        p, _ = solve(H, b)
        np.testing.assert_allclose(p, [p1, 1 - p1], atol=1e-15)


def test_ties_and_degenerate_supports(rng):
    K = 7
    p, _ = solve(np.eye(K), np.zeros(K))  # all coordinates tie: the centre
    np.testing.assert_allclose(p, np.full(K, 1 / K), atol=1e-15)
    p, _ = solve(np.eye(K), np.r_[5.0, 5.0, np.zeros(K - 2)])  # two tied leaders
    np.testing.assert_allclose(p, np.r_[0.5, 0.5, np.zeros(K - 2)], atol=1e-15)
    # Degenerate optimum: p*_i = 0 and mu_i = 0 on the same coordinates.
    for _ in range(10):
        H = random_spd(rng, K)
        star = np.zeros(K)
        star[:3] = rng.dirichlet(np.ones(3))
        b = H @ star - 0.7  # nu = 0.7, mu = 0 everywhere
        p, _ = solve(H, b)
        np.testing.assert_allclose(p, star, atol=1e-12)


@pytest.mark.parametrize("cond", [1e6, 1e10])
def test_ill_conditioned(rng, cond):
    for K in (6, 40):
        H = random_spd(rng, K, cond=cond)
        b = rng.normal(size=K) * 10
        p, _ = solve(H, b)  # the certificate is a backward error: <= 1e-9 whatever cond is
        if K <= 12:
            # Forward error is up to cond * eps for any solver, the oracle included.
            np.testing.assert_allclose(p, simplex_qp_enumerate(H, b), atol=100 * cond * 2e-16)


def test_huge_b(rng):
    K = 9
    H = random_spd(rng, K)
    b = rng.normal(size=K) * 1e12
    p, _ = solve(H, b)
    np.testing.assert_array_equal(p, np.eye(K)[np.argmax(b)])
    b = rng.normal(size=K) * 1e8 + 1e8 * np.r_[1.0, 1.0, np.zeros(K - 2)]
    p, _ = solve(H, b)
    np.testing.assert_allclose(p, simplex_qp_enumerate(H, b), atol=1e-10)


def test_errors():
    with pytest.raises(ValueError, match="positive definite"):
        ons_project(np.diag([1.0, -1.0, 2.0]), np.zeros(3))
    with pytest.raises(ValueError, match="positive definite"):
        ons_project(np.ones((3, 3)), np.zeros(3))  # singular
    with pytest.raises(ValueError, match="symmetric"):
        ons_project(np.array([[1.0, 0.5], [0.0, 1.0]]), np.zeros(2))
    with pytest.raises(ValueError, match="finite"):
        ons_project(np.eye(2), np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        ons_project(np.eye(3), np.zeros(2))


def test_torch_inputs_return_torch(rng):
    H = random_spd(rng, 5)
    b = rng.normal(size=5)
    p = ons_project(torch.from_numpy(H), torch.from_numpy(b))
    assert isinstance(p, torch.Tensor) and p.dtype == torch.float64
    np.testing.assert_allclose(p.numpy(), ons_project(H, b), atol=0)


# ---------------------------------------------------------------------------------------------
# The ONS state object.

def ons_gradients(rng, K, T, spread=1.0):
    """Gradient-like vectors g = -r / (1 + <p, r>) with responses in [0, spread / K]."""
    return [-rng.uniform(0, spread / K, K) / (1 + rng.uniform(0, spread / K)) for _ in range(T)]


@pytest.mark.parametrize("variant", ["paper", "reference_code"])
def test_ons_matches_reference(rng, variant):
    K, T = 7, 8
    # Small alpha against a large beta makes bounds active, exercising the active set.
    for alpha, beta in ((4.0, K / 4), (1e-3, 50.0)):
        ons = OnlineNewtonStep(K, alpha, beta, variant)
        gs = [g * rng.uniform(0.2, 5.0, K) for g in ons_gradients(rng, K, T, spread=K)]
        ref = online_newton_step(gs, alpha, beta, variant)
        for t, g in enumerate(gs):
            p = ons.step(g)
            assert_on_simplex(p)
            assert ons.last_info.kkt_residual <= TOL["kkt"]
            # Forward error of any solver (the oracle included) grows like cond(H) * eps.
            atol = max(TOL["oracle"], 50 * np.linalg.cond(ons.H) * 2.2e-16)
            np.testing.assert_allclose(p, ref[t], rtol=0, atol=atol, err_msg=f"t={t}")


def test_ons_large_zero_set(rng):
    # K = 80 with most coordinates at zero: the Schur path hands over to the Cholesky of H_FF.
    K = 80
    ons = OnlineNewtonStep(K, 1e-2, 1.0)
    for _ in range(6):
        p = ons.step(rng.normal(size=K))
        np.testing.assert_allclose(p, ons_project(ons.H, ons.b), rtol=0, atol=TOL["oracle"])
        assert ons.last_info.kkt_residual <= TOL["kkt"]
    assert ons.last_info.support_size < K // 2


def test_ons_rebuilds_inverse_when_certificate_fails(rng):
    K = 10
    ons = OnlineNewtonStep(K, 4.0, 2.5)
    strict = OnlineNewtonStep(K, 4.0, 2.5, tol=1e-300)  # no certificate is good enough
    for g in ons_gradients(rng, K, 5, spread=K):
        p, q = ons.step(g), strict.step(g)
        assert strict.last_info.refactorizations == 1 and ons.last_info.refactorizations == 0
        np.testing.assert_allclose(q, p, rtol=0, atol=TOL["oracle"])
        np.testing.assert_allclose(strict.state_dict()["Hinv"], np.linalg.inv(strict.H),
                                   rtol=1e-12, atol=1e-15)


def test_ons_k1():
    ons = OnlineNewtonStep(1, 4.0, 0.25)
    for _ in range(3):
        assert ons.step(np.array([-0.3])).tolist() == [1.0]


def test_ons_state_dict_round_trip(rng):
    K = 12
    gs = ons_gradients(rng, K, 8, spread=K)
    a = OnlineNewtonStep(K, 0.05, 3.0)
    for g in gs[:4]:
        a.step(g)
    state = a.state_dict()
    b = OnlineNewtonStep(K, 1.0, 1.0, "reference_code")
    b.load_state_dict(state)
    for g in gs[4:]:
        np.testing.assert_array_equal(a.step(g), b.step(g))
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(value, b.state_dict()[key])
    assert b.round == 8 and b.variant == "paper"
    np.testing.assert_allclose(b.cumulative_gradient, np.sum(gs, axis=0), atol=1e-15)


def test_ons_errors_leave_state_unchanged():
    ons = OnlineNewtonStep(4, 4.0, 1.0)
    ons.step(np.array([-0.1, -0.2, -0.05, 0.0]))
    before = ons.state_dict()
    with pytest.raises(ValueError, match="finite"):
        ons.step(np.array([np.nan, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        ons.step(np.zeros(5))
    bad = dict(before, H=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="shape"):
        ons.load_state_dict(bad)
    for key, value in ons.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    with pytest.raises(ValueError, match="alpha"):
        OnlineNewtonStep(3, 0.0, 1.0)
    with pytest.raises(ValueError, match="variant"):
        OnlineNewtonStep(3, 1.0, 1.0, variant="other")
    with pytest.raises(TypeError, match="num_clients must be an integer"):
        OnlineNewtonStep(3.5, 1.0, 1.0)


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        np.testing.assert_array_equal(value, b[key], err_msg=key)


@pytest.mark.parametrize("variant, bad", [
    ("paper", [1e200, -1e200, 0.0, 0.0]),     # beta g g' overflows: found before any pass
    ("reference_code", [1e200, -1e200, 0.0, 0.0]),
    ("paper", [1e15, -1e15, 0.0, 0.0]),       # finite but swamps alpha: found by the Cholesky
    ("paper", [3e7, -3e7, 1.0, 0.0]),         # of H + beta g g', after both passes
])
def test_ons_rejected_step_leaves_the_object_as_it_was(variant, bad):
    """It used to raise 'H is not positive definite' after H, b and the pending correction had
    changed, and every later step failed. Now the state is equal bit for bit, and the next steps
    give the bits of an object that never saw the call."""
    gs = [np.array([-0.1, -0.2, -0.05, 0.0]), np.array([-0.3, 0.1, 0.2, -0.1]),
          np.array([0.05, -0.2, 0.1, 0.3])]
    ons, twin = OnlineNewtonStep(4, 1.0, 1.0, variant), OnlineNewtonStep(4, 1.0, 1.0, variant)
    for o in (ons, twin):
        o.step(gs[0])  # pending terms from a previous round exist when the bad step comes
    before, p, info, rnd = ons.state_dict(), ons.p, ons.last_info, ons.round
    with pytest.raises(ValueError, match="g is too large for the state"):
        ons.step(np.array(bad))
    assert_same_state(ons.state_dict(), before)
    np.testing.assert_array_equal(ons.p, p)
    assert ons.last_info == info and ons.round == rnd
    for g in gs[1:]:
        np.testing.assert_array_equal(ons.step(g), twin.step(g))
    assert_same_state(ons.state_dict(), twin.state_dict())


# ---------------------------------------------------------------------------------------------
# Batched solvers.

@pytest.mark.parametrize("method", ["active_set", "fista"])
def test_batched_matches_enumeration(rng, method):
    B, K = 40, 6
    H = np.stack([random_spd(rng, K) for _ in range(B)])
    b = rng.normal(size=(B, K)) * 2
    p, info = ons_project_batched(H, b, method=method, return_info=True)
    expected = np.stack([simplex_qp_enumerate(H[k], b[k]) for k in range(B)])
    tol = TOL["oracle"] if method == "active_set" else TOL["fista"]
    np.testing.assert_allclose(p, expected, rtol=0, atol=tol)
    assert (info["kkt_residual"] <= TOL["kkt"]).all()
    np.testing.assert_array_equal(info["support_size"], (p > 0).sum(axis=1))
    for row in p:
        assert_on_simplex(row)


def test_batched_errors(rng):
    with pytest.raises(ValueError, match="positive definite"):
        ons_project_batched(np.stack([np.eye(3), -np.eye(3)]), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="method"):
        ons_project_batched(np.eye(3)[None], np.zeros((1, 3)), method="newton")


@requires_cuda
def test_batched_cuda_matches_host(rng):
    B, K = 64, 16
    H = np.stack([random_spd(rng, K) for _ in range(B)])
    b = rng.normal(size=(B, K))
    host = ons_project_batched(H, b)
    dev, info = ons_project_batched(torch.from_numpy(H).cuda(), torch.from_numpy(b).cuda(),
                                    return_info=True)
    np.testing.assert_allclose(dev.cpu().numpy(), host, rtol=0, atol=TOL["fista"])
    assert (info["kkt_residual"].cpu().numpy() <= TOL["kkt"]).all()


def test_iteration_limit_keeps_p_on_simplex(rng):
    K = 30
    H = random_spd(rng, K)
    b = rng.normal(size=K) * 20  # a small support: many active-set changes from the centre
    p, info = ons_project(H, b, warm_start=np.full(K, 1 / K), max_iter=2, return_info=True)
    assert not info.converged and info.iterations <= 3
    assert_on_simplex(p)


def test_results_do_not_depend_on_thread_count(rng):
    import fastfair

    K = 2100  # large enough for the parallel matrix passes
    gs = ons_gradients(rng, K, 2)
    H = random_spd(rng, 400)  # large enough for the parallel Cholesky update
    b = rng.normal(size=400) * 3
    before = fastfair.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            fastfair.set_num_threads(threads)
            ons = OnlineNewtonStep(K, 4.0, K / 4)
            outs.append([ons.step(g) for g in gs] + [ons_project(H, b)])
    finally:
        fastfair.set_num_threads(before)
    for a, c in zip(*outs):
        np.testing.assert_array_equal(a, c)


def test_torch_in_torch_out(rng):
    K = 5
    ons = OnlineNewtonStep(K, 4.0, 1.25)
    p = ons.step(torch.from_numpy(ons_gradients(rng, K, 1)[0]))
    assert isinstance(p, torch.Tensor) and p.dtype == torch.float64
    H = torch.from_numpy(np.stack([random_spd(rng, K) for _ in range(3)]))
    P = ons_project_batched(H, torch.zeros(3, K, dtype=torch.float64))
    assert isinstance(P, torch.Tensor) and P.shape == (3, K)
