"""Fairness metrics against hand computations."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.sim.reporting.metrics import (
    acf,
    best_frac_mean,
    fairness_metrics,
    gini,
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
