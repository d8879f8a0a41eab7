"""AFL: a hand-computed round, multi-round agreement with the float64 reference (full and partial
participation, both coefficient choices), and the limits of the step size."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair import aggregators as A
from fastfair.reference import aggregators as ref
from tests.helpers.tolerances import assert_rule_close


def test_hand_computed_rounds():
    # K = 3, gamma = 0.5. Round 1: v = 1/3 + 0.5 (0.2, 0.4, 1.0) = (0.4333.., 0.5333.., 0.8333..);
    # all stay positive: tau = (sum v - 1)/3 = 0.8/3, lambda = (0.5, 0.8, 1.7)/3.
    agg = A.AFL(3, step_size=0.5)
    c = agg.weights([0, 1, 2], [0.2, 0.4, 1.0])
    assert_rule_close(c, [0.5 / 3, 0.8 / 3, 1.7 / 3], "golden")
    # Round 2 (ids 2, 0, 1): v = (1.3666.., 0.2166.., 0.3166..). Sorted, the second entry fails
    # u_2 - (u_1 + u_2 - 1)/2 = 0.3166.. - 0.34166.. < 0, so the support is client 2 alone:
    # tau = 0.3666.., lambda = (0, 0, 1).
    c = agg.weights([2, 0, 1], [1.6, 0.1, 0.1])
    assert_rule_close(c, [1.0, 0.0, 0.0], "golden")
    assert_rule_close(agg.lam, [0.0, 0.0, 1.0], "golden")


def test_step_size_zero_keeps_uniform():
    agg = A.AFL(4, step_size=0.0)
    for _ in range(3):
        c = agg.weights([0, 1, 2, 3], [0.1, 5.0, 0.3, 2.0])
    assert_rule_close(c, np.full(4, 0.25), "golden")


def test_large_step_puts_mass_on_worst_client():
    agg = A.AFL(5, step_size=100.0)
    c = agg.weights(np.arange(5), [0.1, 0.5, 0.9, 0.3, 0.2])
    assert_rule_close(c, [0, 0, 1, 0, 0], "golden")


@pytest.mark.parametrize("coefficients", ["updated", "previous"])
@pytest.mark.parametrize("partial", [False, True])
def test_matches_reference(rng, coefficients, partial):
    K, gamma = 9, 0.3
    agg = A.AFL(K, gamma, coefficients=coefficients)
    lam = np.full(K, 1 / K)
    for _ in range(30):
        m = int(rng.integers(1, K)) if partial else K
        ids = rng.choice(K, m, replace=False)
        losses = rng.gamma(2.0, 0.5, m)
        c = agg.weights(ids, losses)
        lam, c_ref = ref.afl_round(lam, ids, losses, gamma, coefficients)
        assert_rule_close(c, c_ref, "reference")
        assert_rule_close(agg.lam, lam, "reference")
        assert abs(float(np.sum(c)) - 1.0) <= 1e-12


def test_previous_coefficients_lag_one_round():
    a, b = A.AFL(4, 0.2), A.AFL(4, 0.2, coefficients="previous")
    ids = np.arange(4)
    prev = None
    for losses in ([0.3, 0.1, 0.9, 0.4], [0.2, 0.2, 0.8, 0.6], [0.5, 0.1, 0.4, 0.4]):
        cu, cp = a.weights(ids, losses), b.weights(ids, losses)
        assert_rule_close(cp, np.full(4, 0.25) if prev is None else prev, "golden")
        prev = cu


def test_previous_all_zero_falls_back_to_uniform():
    agg = A.AFL(4, 100.0, coefficients="previous")
    agg.weights([0, 1, 2], [0.1, 0.2, 0.9])   # lambda_{0,1} projected to 0
    assert_rule_close(agg.weights([0, 1], [0.3, 0.3]), [0.5, 0.5], "golden")


@pytest.mark.parametrize("kwargs, message", [
    ({"step_size": -0.1}, "step_size"), ({"step_size": float("inf")}, "step_size"),
    ({"coefficients": "new"}, "coefficients"),
])
def test_hyperparameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        A.AFL(5, **kwargs)


def test_initial_lambda_reference_code_hand_computed():
    # K = 20, gamma = 0.1. Round 1 (ids 0..4, F = 0.1 .. 0.5): both starts are shifts of each
    # other and the projection ignores a shift: lambda_S = (0.18, 0.19, 0.20, 0.21, 0.22).
    K, gamma = 20, 0.1
    r1 = (np.arange(5), [0.1, 0.2, 0.3, 0.4, 0.5])
    # Round 2: client 5 is fresh (still at lambda0), beside four that moved; equal losses (a
    # shift). Uniform: v = (0.18, 0.19, 0.20, 0.21, 0.05), sum 0.83, each + 0.034.
    # Reference code, lambda0 = C = m/K = 0.25: v = (.., 0.25), sum 1.03, each - 0.006.
    # With the nominal C = 0.3: v = (.., 0.30), sum 1.08, each - 0.016.
    r2 = ([0, 1, 2, 3, 5], [0.3] * 5)
    moved = np.array([0.18, 0.19, 0.20, 0.21])
    for kwargs, fresh, shift in [({}, 0.05, 0.034),
                                 ({"initial_lambda": "reference_code"}, 0.25, -0.006),
                                 ({"initial_lambda": "reference_code", "sample_prob": 0.3}, 0.3,
                                  -0.016)]:
        agg = A.AFL(K, gamma, **kwargs)
        assert_rule_close(agg.weights(*r1), [0.18, 0.19, 0.20, 0.21, 0.22], "golden")
        assert_rule_close(agg.lam[5:], np.full(K - 5, fresh), "golden")
        assert_rule_close(agg.weights(*r2), np.append(moved, fresh) + shift, "golden")
        prev = A.AFL(K, gamma, coefficients="previous", **kwargs)
        prev.weights(*r1)
        assert_rule_close(prev.weights(*r2), np.append(moved, fresh) / (moved.sum() + fresh),
                          "golden")


def test_initial_lambda_options_are_checked():
    with pytest.raises(ValueError, match="initial_lambda"):
        A.AFL(5, initial_lambda="C")
    with pytest.raises(ValueError, match="sample_prob only sets"):
        A.AFL(5, sample_prob=0.2)
    with pytest.raises(ValueError, match="sample_prob"):
        A.AFL(5, initial_lambda="reference_code", sample_prob=0.0)


def test_state_dict_without_the_newer_options_loads_at_their_defaults():
    old = A.AFL(6, 0.2)
    old.weights([0, 1, 2], [0.1, 0.5, 0.2])
    sd = old.state_dict()
    for key in ("initial_lambda", "sample_prob"):
        del sd["config"][key]
    fresh = A.AFL(6, 0.2)
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(fresh.lam, old.lam)
    with pytest.raises(ValueError, match="initial_lambda"):
        A.AFL(6, 0.2, initial_lambda="reference_code").load_state_dict(sd)
