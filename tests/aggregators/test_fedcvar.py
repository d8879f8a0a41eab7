"""Fed-CVaR-Avg against the test vectors TV1-TV7 of docs/algorithms.md §6.6 and the float64
reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair.aggregators import FedCVaRAvg
from fastfair.aggregators.fedcvar import (
    cvar_coefficients,
    cvar_discrete,
    cvar_dual_weights,
    relay_clients,
)
from fastfair.reference import aggregators as ref
from tests.helpers.tolerances import assert_rule_close

F, RHO = [1.0, 2.0, 3.0, 4.0], [0.4, 0.3, 0.2, 0.1]


@pytest.mark.parametrize("alpha, value, lo, hi, objective", [
    (1.0, 2.0, -np.inf, 1.0, 2.0),
    (0.5, 2.8, 2.0, 2.0, 2.56),
    (0.3, 3.3333333333333333, 2.0, 3.0, 2.9333333333333333),
    (0.25, 3.4, 3.0, 3.0, 2.98),
    (0.1, 4.0, 3.0, 4.0, 3.4),
    (0.05, 4.0, 4.0, 4.0, 3.4),
])
def test_tv1_cvar(alpha, value, lo, hi, objective):
    c, vlo, vhi = cvar_discrete(F, RHO, alpha)
    assert_rule_close(c, value, "golden")
    assert_rule_close(ref.cvar(F, RHO, alpha), value, "golden")
    assert (vlo, vhi) == (lo, hi)
    assert_rule_close(0.7 * c + 0.3 * 2.0, objective, "golden")


@pytest.mark.parametrize("alpha, value, lo, hi", [
    (1.0, 1.15, -np.inf, 0.1), (0.75, 1.5, 0.1, 0.5), (0.5, 2.0, 0.5, 2.0),
    (0.4, 2.0, 2.0, 2.0), (0.1, 2.0, 2.0, 2.0)])
def test_tv1b_unsorted_ties(alpha, value, lo, hi):
    c, vlo, vhi = cvar_discrete([0.5, 2.0, 2.0, 0.1], [0.25] * 4, alpha)
    assert_rule_close(c, value, "golden")
    assert (vlo, vhi) == (lo, hi)


@pytest.mark.parametrize("alpha, gamma, q, w", [
    (0.25, 0.3, [0, 0, 0.6, 0.4], [0.12, 0.09, 0.48, 0.31]),
    (0.5, 0.0, [0, 0.4, 0.4, 0.2], [0, 0.4, 0.4, 0.2]),
    (1.0, 0.5, RHO, RHO),
    (0.05, 0.1, [0, 0, 0, 1], [0.04, 0.03, 0.02, 0.91]),
])
def test_tv1c_dual_weights(alpha, gamma, q, w):
    qq, ww = cvar_dual_weights(F, RHO, alpha, gamma)
    assert_rule_close(qq, q, "golden")
    assert_rule_close(ww, w, "golden")
    assert_rule_close(qq @ np.array(F), cvar_discrete(F, RHO, alpha)[0], "golden")


def test_dual_weights_split_ties_by_probability():
    q, _ = cvar_dual_weights([2.0, 2.0, 1.0], [0.1, 0.3, 0.6], 0.2, 0.0)
    assert_rule_close(q, [0.25, 0.75, 0.0], "golden")


@pytest.mark.parametrize("loss, alpha, gamma, c, dt, t_new", [
    (2, 0.5, 0.2, 1.8, -0.8, 1.4), (0.5, 0.5, 0.2, 0.2, 0.8, 0.6), (1, 0.5, 0.2, 0.2, 0.8, 0.6),
    (2, 1.0, 0.2, 1.0, 0.0, 1.0), (0.5, 1.0, 0.2, 0.2, 0.8, 0.6), (2, 0.1, 0.1, 9.1, -8.1, 5.05),
    (2, 0.3, 0.3, 2.6333333333333333, -1.6333333333333333, 1.8166666666666667),
    (2, 0.3, 1.0, 1.0, 0.0, 1.0), (2, 0.1, 0.0, 10.0, -9.0, 5.5)])
def test_tv2_coefficients(loss, alpha, gamma, c, dt, t_new):
    cc, dd = cvar_coefficients(loss, 1.0, alpha, gamma)
    assert_rule_close(cc, c, "golden")
    assert_rule_close(dd, dt, "golden")
    agg = FedCVaRAvg(1, alpha, gamma)
    _, t = agg.client_step(np.zeros(1), 1.0, np.zeros(1), loss, lr=0.1, lr_threshold=0.5)
    assert_rule_close(t, t_new, "golden")


A = np.array([-1.0, 1.0, 2.0, 4.0])  # f_i(theta) = (theta - a_i)^2 / 2


def _run(seq, alpha, gamma, lr=0.1, lr_t=0.5, H=2, theta=0.0, t=0.0):
    """The relay algorithm with m = 1: the relayed client trains, the server copies (theta, t)."""
    agg = FedCVaRAvg(4, alpha, gamma, threshold=t)
    params = np.array([theta])
    out = []
    for i in seq:
        th, tt = params.copy(), agg.threshold
        for _ in range(H):
            th, tt = agg.client_step(th, tt, th - A[i], 0.5 * float(th[0] - A[i]) ** 2, lr, lr_t)
        coef = agg.weights([i], thresholds=[tt])
        agg.aggregate(params[None] - th[None], coef, base=params)
        out.append((float(params[0]), agg.threshold))
    return out


def test_tv3a_local_steps_and_rounds():
    assert_rule_close(_run([3, 1, 3], 0.5, 0.2),
                      [(1.3104, 0.8), (1.29810816, 0.0), (2.1832479267840004, 0.8)], "golden")


def test_tv3b_c_alpha_one_or_gamma_one_is_fedavg():
    expected = [(0.76, 0.0), (0.8056, 0.0), (1.412536, 0.0)]
    assert_rule_close(_run([3, 1, 3], 1.0, 0.2), expected, "golden")
    assert_rule_close(_run([3, 1, 3], 0.5, 1.0), expected, "golden")


def test_tv3d_e():
    assert_rule_close(_run([3, 1, 3], 1.0, 0.2, t=3.0),
                      [(0.76, 3.0), (0.7695040000000001, 2.2), (1.38329824, 2.2)], "golden")
    assert_rule_close(_run([3, 1, 3], 0.1, 0.1, lr=0.05, lr_t=0.05, H=3),
                      [(2.8178405, 0.765), (1.9808406098518123, 1.08),
                       (2.9105350399988543, 1.3950000000000002)], "golden")


def test_tv3f_minibatch_mean_loss():
    agg = FedCVaRAvg(1, 0.5, 0.2)
    x, y = np.array([1.0, 2, 3, 4]), np.array([1.0, 1, 5, 2])
    theta, t, seen = 0.5, 1.0, []
    for _ in range(2):
        for b in ([0, 1], [2, 3]):
            r = theta * x[b] - y[b]
            loss = float(np.mean(0.5 * r ** 2))
            seen.append(loss)
            theta, t = agg.client_step(theta, t, float(np.mean(r * x[b])), loss, 0.05, 0.1)
    assert_rule_close(seen, [0.0625, 3.0494140625000004, 0.2231544189453126, 1.9714933475494387],
                      "golden")
    assert_rule_close([theta, t], [0.9146396484375, 1.0], "golden")


def test_tv4_two_relays_uniform_mean():
    agg = FedCVaRAvg(4, 0.5, 0.2)
    params = np.zeros(1)
    expected = [(0.557, 0.4), (0.7422052, 0.4), (1.3993474376, 0.8)]
    for pair, (theta_e, t_e) in zip([(3, 0), (1, 2), (2, 3)], expected):
        locals_ = []
        for i in pair:
            th, tt = params.copy(), agg.threshold
            for _ in range(2):
                th, tt = agg.client_step(th, tt, th - A[i], 0.5 * float(th[0] - A[i]) ** 2,
                                         0.1, 0.5)
            locals_.append((th, tt))
        coef = agg.weights(list(pair), thresholds=[tt for _, tt in locals_])
        agg.aggregate(np.stack([params - th for th, _ in locals_]), coef, base=params)
        assert_rule_close([params[0], agg.threshold], [theta_e, t_e], "golden")


def test_tv5_one_step_form():
    agg = FedCVaRAvg(4, alpha=0.25, gamma=0.3, threshold=1.0, form="fedsgd", lr_threshold=0.5)
    grads = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 1.0], [0.5, 0.5]])
    coef = agg.weights([0, 1, 2, 3], [0.5, 2.0, 3.0, 0.1])
    assert_rule_close(coef, [0.075, 0.775, 0.775, 0.075], "golden")
    theta = np.zeros(2)
    agg.aggregate(grads, coef, base=theta, lr=0.1)
    assert_rule_close(theta, [0.06625, -0.23625], "golden")
    assert_rule_close(agg.threshold, 1.35, "golden")


def test_tv6_relay_sampler():
    rho = [0.5, 0.3, 0.15, 0.05]
    u = [0.1, 0.6, 0.85, 0.97, 0.2, 0.79, 0.951]
    assert relay_clients(rho, u).tolist() == [0, 1, 2, 3, 0, 1, 3]
    draws = relay_clients(rho, np.random.default_rng(12345).random(200_000))
    freq = np.bincount(draws, minlength=4) / draws.size
    sigma = np.sqrt(np.array(rho) * (1 - np.array(rho)) / draws.size)
    assert np.all(np.abs(freq - rho) < 5 * sigma)


@pytest.mark.parametrize("alpha, gamma, drift", [
    (0.25, 0.3, [-2.1, -0.98, -0.14, 0.42, 0.7]), (0.5, 0.0, [-1.0, -0.2, 0.4, 0.8, 1.0])])
def test_tv7_expected_threshold_drift(alpha, gamma, drift):
    got = []
    for t in [0.5, 1.5, 2.5, 3.5, 4.5]:
        _, dt = cvar_coefficients(np.array(F), t, alpha, gamma)
        got.append(float(np.dot(RHO, dt)))
    assert_rule_close(got, drift, "golden")


def test_client_loss_autograd_matches_step():
    agg = FedCVaRAvg(1, alpha=0.3, gamma=0.2)
    theta = torch.tensor([0.7], dtype=torch.float64, requires_grad=True)
    t = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    loss = 0.5 * ((theta - 2.0) ** 2).sum()
    agg.client_loss(loss, t).backward()
    new_theta, new_t = agg.client_step(np.array([0.7]), 0.1, np.array([0.7 - 2.0]),
                                       float(loss.detach()), lr=1.0, lr_threshold=1.0)
    assert_rule_close(0.7 - theta.grad.numpy(), new_theta, "golden")
    assert_rule_close(0.1 - float(t.grad), new_t, "golden")
    assert float(agg.client_loss(2.0, 1.0)) == pytest.approx(0.8 + 0.8 / 0.3 + 0.4)


def test_random_fedsgd_rounds_match_reference(rng):
    agg = FedCVaRAvg(30, alpha=0.3, gamma=0.2, threshold=0.5, form="fedsgd", lr_threshold=0.05)
    theta = rng.standard_normal(7)
    theta_ref, t_ref = theta.copy(), 0.5
    for _ in range(30):
        m = int(rng.integers(1, 8))
        ids = rng.choice(30, m, replace=False)
        losses, grads = rng.gamma(1.5, 0.5, m), rng.standard_normal((m, 7))
        coef = agg.weights(ids, losses)
        agg.aggregate(grads, coef, base=theta, lr=0.1)
        theta_ref, t_ref = ref.cvar_fedsgd_round(theta_ref, t_ref, losses, grads, 0.3, 0.2,
                                                 0.1, 0.05)
        assert_rule_close(theta, theta_ref)
        assert_rule_close(agg.threshold, t_ref)


def test_duplicates_only_when_allowed():
    with pytest.raises(ValueError, match="client_ids must be distinct"):
        FedCVaRAvg(4).weights([1, 1], thresholds=[0.0, 1.0])
    agg = FedCVaRAvg(4, allow_duplicates=True)
    assert_rule_close(agg.weights([1, 1, 2], thresholds=[0.0, 0.0, 3.0]), [1 / 3] * 3, "golden")
    assert agg.threshold == 1.0


def test_default_hyperparameters_are_the_papers():
    """docs/algorithms.md §6.3.1: alpha = gamma = 0.1 (Table 1), t0 = 0 and, in the relay form, t
    steps with 0.05 times the client learning rate (FashionMNIST: 1e-2 and 5e-4); a hot batch
    steps with 9.1 times it."""
    agg = FedCVaRAvg(30)
    assert (agg.alpha, agg.gamma, agg.threshold) == (0.1, 0.1, 0.0)
    objective = agg.client_objective()
    assert objective.state_lr(1e-2) == pytest.approx(5e-4, rel=1e-15)
    c, dt = cvar_coefficients(1.0, 0.0, agg.alpha, agg.gamma)
    assert c == pytest.approx(9.1) and dt == pytest.approx(0.9 * (1 - 10.0))
    # An explicit lr_threshold wins over the ratio; the one-step form moves t only with it.
    assert FedCVaRAvg(30, lr_threshold=0.3).client_objective().state_lr(1e-2) == 0.3
    one_step = FedCVaRAvg(4, form="fedsgd")
    one_step.weights([0, 1], [1.0, 2.0])
    assert one_step.threshold == 0.0


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="alpha"):
        FedCVaRAvg(3, alpha=0.0)
    with pytest.raises(ValueError, match="gamma"):
        FedCVaRAvg(3, gamma=1.5)
    with pytest.raises(ValueError, match="lr_threshold_ratio"):
        FedCVaRAvg(3, lr_threshold_ratio=-0.1)
    with pytest.raises(ValueError, match="thresholds is required"):
        FedCVaRAvg(3).weights([0])
    with pytest.raises(ValueError, match="loss must be finite"):
        FedCVaRAvg(3).client_step(0.0, 0.0, 1.0, float("nan"), 0.1, 0.1)
