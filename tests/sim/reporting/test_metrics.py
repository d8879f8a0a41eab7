"""Fairness metrics against hand computations."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.sim.reporting.metrics import (
    acf,
    auroc,
    auroc_metrics,
    best_frac_mean,
    client_auroc,
    fairness_metrics,
    gini,
    weighted_frac_mean,
    worst_frac_mean,
)


def test_fractions_by_hand():
    acc = np.arange(1, 21, dtype=float)  # 1..20
    assert worst_frac_mean(acc, 0.10) == 1.5           # k = 2: (1 + 2) / 2
    assert worst_frac_mean(acc, 0.05) == 1.0           # k = 1
    assert best_frac_mean(acc, 0.10) == 19.5
    assert worst_frac_mean([5.0, 3.0], 0.10) == 3.0    # k = max(1, 0)


def test_gini_by_hand():
    assert gini([1.0, 1.0, 1.0]) == 0.0
    # x = (0, 0, 3): sum_i (2i - 4) x_(i) / (3 * 3) = (2 * 3 - 4) * 3 / 9 = 2/3
    assert gini([0.0, 3.0, 0.0]) == pytest.approx(2.0 / 3.0, abs=1e-15)
    # x = (1, 2, 3, 4): (-3*1 - 1*2 + 1*3 + 3*4) / (4 * 10) = 10 / 40
    assert gini([4.0, 1.0, 3.0, 2.0]) == pytest.approx(0.25, abs=1e-15)


def test_acf_by_hand():
    f = np.array([1.0, 2.0, 3.0, 4.0])
    d = f - 2.5
    r0 = np.dot(d, d) / 4
    r1 = np.dot(d[:3], d[1:]) / 4
    np.testing.assert_allclose(acf(f, 1), [1.0, r1 / r0])
    assert np.isnan(acf([2.0, 2.0, 2.0])).all()
    with pytest.raises(ValueError, match="max_lag"):
        acf(f, 4)


def test_fairness_metrics_by_hand():
    m = fairness_metrics([0.5, 1.0, 0.0, 0.5], weights=[1, 1, 0, 2])
    assert m["mean"] == 0.5
    assert m["weighted_mean"] == pytest.approx((0.5 + 1.0 + 1.0) / 4)
    assert m["variance"] == pytest.approx(0.125)
    assert m["parity_gap"] == 1.0
    assert m["worst10"] == 0.0 and m["best10"] == 1.0
    with pytest.raises(ValueError, match="values must be finite; got nan at position 1"):
        fairness_metrics([1.0, np.nan])
    with pytest.raises(ValueError, match="weights has 1 entries but values has 2"):
        fairness_metrics([1.0, 2.0], weights=[1.0])


def test_weighted_fractions_weigh_the_selected_clients_by_their_samples():
    acc = np.array([0.9, 0.2, 0.5, 0.1, 0.8, 0.3, 0.7, 0.6, 0.4, 1.0, 0.55, 0.65, 0.75, 0.85,
                    0.95, 0.05, 0.15, 0.25, 0.35, 0.45])            # K = 20: k = 2
    n = np.arange(1, 21, dtype=float)
    # worst two: 0.05 (n = 16) and 0.1 (n = 4); best two: 1.0 (n = 10) and 0.95 (n = 15)
    assert weighted_frac_mean(acc, n, 0.10) == pytest.approx((0.05 * 16 + 0.1 * 4) / 20)
    assert weighted_frac_mean(acc, n, 0.10, worst=False) == pytest.approx(
        (1.0 * 10 + 0.95 * 15) / 25)
    m = fairness_metrics(acc, weights=n)
    assert m["worst10_weighted"] == weighted_frac_mean(acc, n, 0.10)
    assert m["worst10"] == pytest.approx(0.075)


@pytest.mark.parametrize("n,ties", [(2, False), (7, True), (50, False), (300, True)])
def test_auroc_equals_scikit_learns_with_and_without_ties(rng, n, ties):
    from sklearn.metrics import roc_auc_score

    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    s = rng.normal(size=n) + 0.7 * y
    if ties:
        s = np.round(s, 0)                 # many tied scores across the two classes
    assert auroc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_auroc_by_hand_and_per_client():
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert auroc([1.0, 1.0], [0, 1]) == 0.5                  # a tie counts one half
    assert np.isnan(auroc([0.3, 0.4], [1, 1]))
    per = client_auroc([0.1, 0.4, 0.35, 0.8, 0.2, 0.3], [0, 0, 1, 1, 1, 1], [0, 4, 6])
    assert per[0] == 0.75 and np.isnan(per[1])
    m = auroc_metrics(per, [4, 2], [0.1, 0.4, 0.35, 0.8, 0.2, 0.3], [0, 0, 1, 1, 1, 1])
    assert m["auroc_num_clients"] == 1 and m["auroc_mean"] == 0.75 and m["auroc_worst10"] == 0.75
    assert m["auroc_pooled"] == pytest.approx(5 / 8)
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        auroc([0.1, 0.2], [0, 2])
