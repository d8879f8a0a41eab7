"""FedMABA against the golden vectors of docs/algorithms.md §5.7 (G1-G6, the write-back example) and
the dense reference."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fastfair.aggregators import FairAvg, FedMABA
from fastfair.aggregators.fedmaba import fedmaba_project
from fastfair.reference import aggregators as ref
from tests.helpers.tolerances import assert_rule_close

F = np.array([0.5, 1.0, 2.0, 4.0])


def _project(log_p, losses, eta_b, rho, n_ref):
    sol = fedmaba_project(np.asarray(log_p) + eta_b * np.asarray(losses), rho, n_ref)
    return sol, np.exp(sol.log_pi)


def test_g1_inactive():
    agg = FedMABA(4, step_size=0.5, rho=1.0, alpha=0.5)
    c = agg.weights([0, 1, 2, 3], F)
    sol = agg.last_solution
    assert sol.status == "inactive" and sol.tau == 1.0
    pi = np.exp(sol.log_pi)
    assert_rule_close(pi, [0.09846756785861885, 0.12643485984989153, 0.20845584279250579,
                           0.5666417294989838], "golden")
    assert_rule_close(ref.kl_to_uniform(pi, 4), 0.24783993945920002, "golden")
    assert_rule_close(c, [0.17423378392930944, 0.18821742992494578, 0.2292279213962529,
                          0.4083208647494919], "golden")


def test_g2_active():
    agg = FedMABA(4, step_size=0.5, rho=0.1, alpha=0.5)
    c = agg.weights([0, 1, 2, 3], F)
    sol = agg.last_solution
    assert sol.status == "active"
    assert_rule_close(sol.tau, 0.6314928040066823, "golden")
    assert_rule_close(1 / sol.tau - 1, 0.5835493194146013, "golden")
    pi = np.exp(sol.log_pi)
    assert_rule_close(pi, [0.1471372043371322, 0.17230027081651328, 0.23627233871451764,
                           0.4442901861318368], "golden")
    assert_rule_close(ref.kl_to_uniform(pi, 4), 0.1, "golden")
    assert_rule_close(c, [0.1985686021685661, 0.21115013540825664, 0.24313616935725882,
                          0.3471450930659184], "golden")


def test_g3_nonuniform_prior():
    sol, pi = _project(np.log([0.1, 0.2, 0.3, 0.4]), F, 1.0, 0.05, 4)
    assert sol.status == "active"
    assert_rule_close(sol.tau, 0.17022859748121277, "golden")
    assert_rule_close(1 / sol.tau - 1, 4.874453615881813, "golden")
    assert_rule_close(pi, [0.16450078984462502, 0.20154710843392273, 0.2560245906206784,
                           0.3779275111007739], "golden")
    assert_rule_close(0.8 * pi + 0.2 / 4, [0.1816006318757, 0.2112376867471382,
                                           0.2548196724965427, 0.3523420088806191], "golden")


def test_g4_total_reference_infeasible_is_uniform():
    agg = FedMABA(100, step_size=0.5, rho=1.0, kl_reference="total")
    c = agg.weights([3, 17, 50, 99], F)
    assert agg.last_solution.status == "infeasible"
    assert_rule_close(np.exp(agg.last_solution.log_pi), [0.25] * 4, "golden")
    assert_rule_close(c, [0.25] * 4, "golden")


def test_g4_finite_lambda_max():
    agg = FedMABA(100, step_size=0.5, rho=1.0, kl_reference="total", lambda_max=3.0)
    agg.weights([3, 17, 50, 99], F)
    a = np.log(0.01) + 0.5 * F
    expected = np.exp(a / 4.0) / np.exp(a / 4.0).sum()
    assert_rule_close(np.exp(agg.last_solution.log_pi), expected, "golden")


def test_g5_sampled_reference_matches_g1():
    agg = FedMABA(100, step_size=0.5, rho=1.0)
    agg.weights([3, 17, 50, 99], F)
    assert_rule_close(np.exp(agg.last_solution.log_pi),
                      [0.09846756785861885, 0.12643485984989153, 0.20845584279250579,
                       0.5666417294989838], "golden")


def test_g6_five_round_trace():
    agg = FedMABA(5, step_size=0.5, rho=0.2)
    losses = [0.2, 0.4, 0.8, 1.6, 3.2]
    p1 = [0.1004977502, 0.1110671909, 0.1356577733, 0.2023776167, 0.4503996689]
    p2 = [0.0961437773, 0.1067924204, 0.1317585869, 0.2005653591, 0.4647398564]
    for t in range(5):
        agg.weights(np.arange(5), losses)
        sol = agg.last_solution
        if t == 0:
            assert sol.status == "inactive" and sol.tau == 1.0
            np.testing.assert_allclose(agg.p, p1, rtol=0, atol=1e-10)
        elif t == 1:
            assert sol.status == "active"
            np.testing.assert_allclose(sol.tau, 0.525211016542, rtol=0, atol=1e-12)
            np.testing.assert_allclose(agg.p, p2, rtol=0, atol=1e-10)
        else:
            np.testing.assert_allclose(sol.tau, 0.512295525572, rtol=0, atol=1e-12)
            np.testing.assert_allclose(agg.p, p2, rtol=0, atol=1e-10)
            assert_rule_close(ref.kl_to_uniform(agg.p, 5), 0.2, "golden")


@pytest.mark.parametrize("sync, state, next_pi", [
    ("mass_preserving",
     [0.125, 0.0735686022, 0.125, 0.0861501354, 0.125, 0.1181361694, 0.2221450931, 0.125],
     [0.3050873405, 0.1795587934, 0.3050873405, 0.2102665256]),
    ("overwrite",
     [0.125, 0.1471372043, 0.125, 0.1723002708, 0.125, 0.2362723387, 0.4442901861, 0.125],
     [0.2195148817, 0.2583904480, 0.2195148817, 0.3025797885]),
])
def test_sync_example(sync, state, next_pi):
    agg = FedMABA(8, step_size=0.5, rho=0.1, sync=sync)
    agg.weights([1, 3, 5, 6], F)
    np.testing.assert_allclose(np.exp(agg.last_solution.log_pi),
                               [0.1471372043, 0.1723002708, 0.2362723387, 0.4442901861],
                               rtol=0, atol=1e-10)
    np.testing.assert_allclose(agg.p, state, rtol=0, atol=1e-10)
    assert_rule_close(agg.p.sum(), 1.0 if sync == "mass_preserving" else 1.5, "golden")
    agg.weights([0, 1, 2, 3], [1.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(np.exp(agg.last_solution.log_pi), next_pi, rtol=0, atol=1e-10)


def test_invariants(rng):
    a = rng.standard_normal(50) * 3
    base = fedmaba_project(a, 0.3, 50)
    pi = np.exp(base.log_pi)
    assert_rule_close(pi.sum(), 1.0, "golden")
    assert ref.kl_to_uniform(pi, 50) <= 0.3 + 1e-12
    assert_rule_close(ref.kl_to_uniform(pi, 50), 0.3, "golden")          # active: on the sphere
    assert_rule_close(np.exp(fedmaba_project(a + 7.5, 0.3, 50).log_pi), pi, "golden")  # shift
    perm = rng.permutation(50)
    assert_rule_close(np.exp(fedmaba_project(a[perm], 0.3, 50).log_pi), pi[perm], "golden")
    assert fedmaba_project(a, math.log(50), 50).tau == 1.0                # rho >= log N_ref


def test_alpha_zero_is_fairavg(rng):
    ids, losses = rng.choice(1000, 20, replace=False), rng.random(20)
    np.testing.assert_array_equal(FedMABA(1000, alpha=0.0).weights(ids, losses),
                                  FairAvg(1000).weights(ids, losses))


def test_single_client_and_equal_scores():
    agg = FedMABA(10, rho=0.0)
    assert_rule_close(agg.weights([4], [2.0]), [1.0], "golden")
    assert_rule_close(agg.p.sum(), 1.0, "golden")
    assert_rule_close(agg.weights([1, 2, 3], [1.0, 1.0, 1.0]), [1 / 3] * 3, "golden")


def test_huge_step_is_stable():
    agg = FedMABA(6, step_size=1e4, rho=0.5)
    c = agg.weights(np.arange(6), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert np.all(np.isfinite(c)) and np.all(np.isfinite(agg.log_p))
    assert_rule_close(c.sum(), 1.0, "golden")
    assert ref.kl_to_uniform(np.exp(agg.last_solution.log_pi), 6) <= 0.5 + 1e-12


@pytest.mark.parametrize("options", [
    {},
    {"rho": 0.05, "alpha": 0.8, "step_size": 1.0},
    {"rho": 0.3, "sync": "overwrite"},
    {"rho": 2.5, "kl_reference": "total"},
    {"rho": 1.0, "kl_reference": "total", "lambda_max": 20.0},
])
def test_random_rounds_match_reference(rng, options):
    K, rounds = 40, 25
    agg = FedMABA(K, **options)
    log_p = np.full(K, -math.log(K))
    for _ in range(rounds):
        m = int(rng.integers(1, 16))
        ids = rng.choice(K, m, replace=False)
        losses = rng.gamma(2.0, 1.0, m)
        c = agg.weights(ids, losses)
        c_ref, log_p = ref.fedmaba_round(log_p, ids, losses, **options)
        assert_rule_close(c, c_ref)
        assert_rule_close(agg.log_p, log_p)


@pytest.mark.parametrize("big", [1e3, 1e30, 1e100, 1e200, 1e308])
def test_a_poisoned_loss_far_above_the_others_stays_in_the_kl_ball(big):
    """One reply's loss 1e100 put the root tau* ~ 1e-100, beyond what halving from
    tau = 1 reaches in 100 passes; the projection then gave that client all of pi (KL log m,
    above rho). g depends on tau only through tau * a, so pi is the same at every scale."""
    a = np.array([0.1, 0.5, 0.3, 0.5 * big])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning on the way either
        sol = fedmaba_project(a, 1.0, 4)
    pi = np.exp(sol.log_pi)
    assert sol.status == "active" and sol.iterations <= 100
    assert ref.kl_to_uniform(pi, 4) == pytest.approx(1.0, abs=1e-12)
    assert pi[3] == pytest.approx(0.914396, abs=1e-6) and pi[:3].min() > 0.028
    rule = FedMABA(4, step_size=0.5, rho=1.0)
    if rule.invalid_loss(big) is None:
        c = rule.weights([0, 1, 2, 3], [0.2, 1.0, 0.6, big])
        assert np.isfinite(c).all() and c.max() < 0.5 * 0.92 + 0.5 / 4
    else:  # step_size * loss beyond 2**1000: refused (a Flower reply is dropped)
        assert big * 0.5 > 2.0 ** 1000
        with pytest.raises(ValueError, match="losses must keep step_size"):
            rule.weights([0, 1, 2, 3], [0.2, 1.0, 0.6, big])


def test_the_projection_is_the_same_at_every_scale_of_the_scores(rng):
    a = rng.standard_normal(50) * 3
    pi = np.exp(fedmaba_project(a, 0.3, 50).log_pi)
    for scale in (1e10, 1e100, 1e200, 1e300):
        sol = fedmaba_project(a * scale, 0.3, 50)
        assert sol.tau == pytest.approx(fedmaba_project(a, 0.3, 50).tau / scale, rel=1e-9)
        np.testing.assert_allclose(np.exp(sol.log_pi), pi, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0, 1e3])
@pytest.mark.parametrize("rho", [1e-6, 0.01, 0.5])
def test_root_on_the_kl_sphere(rng, scale, rho):
    for m in [2, 7, 300]:
        a = rng.standard_normal(m) * scale
        sol = fedmaba_project(a, rho, m)
        pi = np.exp(sol.log_pi)
        if sol.status == "active":
            assert abs(ref.kl_to_uniform(pi, m) - rho) <= 1e-10
            assert sol.iterations <= 60
        else:
            assert sol.status == "inactive" and ref.kl_to_uniform(pi, m) <= rho
        pi_ref, tau_ref = ref.fedmaba_weights(np.zeros(m), a, 1.0, rho, m)
        assert_rule_close(pi, pi_ref)
