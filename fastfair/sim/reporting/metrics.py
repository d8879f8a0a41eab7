"""Fairness metrics over per-client results (accuracy or loss).

All take a 1-D array of per-client values; fractions select ``k = max(1, floor(frac * K))``
clients. Definitions (docs/algorithms.md §7): population variance (1/K), mean of the k worst /
best, Gini on sorted values, parity gap max - min, and the biased autocorrelation of a series.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
from numpy.typing import ArrayLike


def _values(x: ArrayLike, name: str = "values") -> np.ndarray:
    v = np.asarray(x, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(v)):
        pos = int(np.flatnonzero(~np.isfinite(v))[0])
        raise ValueError(f"{name} must be finite; got {v[pos]} at position {pos}")
    return v


def _count(size: int, frac: float) -> int:
    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1]; got {frac}")
    return max(1, int(np.floor(frac * size)))


def worst_frac_mean(values: ArrayLike, frac: float) -> float:
    """Mean of the ``k = max(1, floor(frac K))`` smallest values (O(K) selection)."""
    v = _values(values)
    k = _count(v.size, frac)
    return float(np.partition(v, k - 1)[:k].mean())


def best_frac_mean(values: ArrayLike, frac: float) -> float:
    """Mean of the ``k = max(1, floor(frac K))`` largest values (O(K) selection)."""
    v = _values(values)
    k = _count(v.size, frac)
    return float(np.partition(v, v.size - k)[v.size - k:].mean())


def gini(values: ArrayLike) -> float:
    r"""Gini coefficient :math:`\sum_i (2i - K - 1) x_{(i)} / (K \sum_i x_i)` on ascending
    :math:`x_{(i)}`, i = 1..K; 0 for equal values (and for an all-zero vector)."""
    v = np.sort(_values(values))
    total = v.sum()
    if total == 0:
        return 0.0
    i = np.arange(1, v.size + 1)
    return float(np.sum((2 * i - v.size - 1) * v) / (v.size * total))


def acf(series: ArrayLike, max_lag: Optional[int] = None) -> np.ndarray:
    r"""Autocorrelation of a series :math:`f^1..f^T`:
    :math:`r[l] = \frac{1}{T} \sum_{t=1}^{T-l} (f^t - \bar f)(f^{t+l} - \bar f)`,
    ``ACF(l) = r[l] / r[0]`` for l = 0..max_lag (default T - 1); NaN for a constant series."""
    f = _values(series, "series")
    T = f.size
    max_lag = T - 1 if max_lag is None else int(max_lag)
    if not 0 <= max_lag < T:
        raise ValueError(f"max_lag must be in [0, {T - 1}]; got {max_lag}")
    d = f - f.mean()
    r = np.array([np.dot(d[:T - l], d[l:]) / T for l in range(max_lag + 1)])
    if r[0] == 0:
        return np.full(max_lag + 1, np.nan)
    return r / r[0]


def fairness_metrics(values: ArrayLike, weights: Optional[ArrayLike] = None) -> Dict[str, float]:
    """Summary of per-client ``values``: ``mean`` (uniform), ``weighted_mean`` (by ``weights``,
    e.g. test-sample counts; uniform when None), ``worst10``/``worst5``, ``best10``/``best5``,
    ``variance`` (1/K), ``gini`` and ``parity_gap`` (max - min)."""
    v = _values(values)
    w = np.ones_like(v) if weights is None else _values(weights, "weights")
    if w.shape != v.shape:
        raise ValueError(f"weights has {w.size} entries but values has {v.size}")
    if (w < 0).any() or w.sum() == 0:
        raise ValueError("weights must be non-negative with a positive sum")
    return {
        "mean": float(v.mean()),
        "weighted_mean": float(np.dot(w, v) / w.sum()),
        "worst10": worst_frac_mean(v, 0.10),
        "worst5": worst_frac_mean(v, 0.05),
        "best10": best_frac_mean(v, 0.10),
        "best5": best_frac_mean(v, 0.05),
        "variance": float(v.var()),
        "gini": gini(v),
        "parity_gap": float(v.max() - v.min()),
    }


def mixture_summary(mixture: np.ndarray) -> Dict[str, float]:
    r"""What a round's mixing weights ``mixture [m]`` (the rule's ``last_mixture``: each client's
    share of the combined direction, on the simplex, for every rule alike, where raw
    coefficients are step sizes in q-FedAvg and 1/norm-scaled in FedMGDA) say: ``max_share``
    (:math:`\max_k w_k`, 1/m when uniform) and ``effective_clients``
    (:math:`1 / \sum_k w_k^2`, m when uniform, 1 when one client takes everything); NaN and 0
    for a round that takes no step."""
    w = np.asarray(mixture, dtype=np.float64)
    if not w.sum() > 0:
        return {"max_share": float("nan"), "effective_clients": 0.0}
    return {"max_share": float(w.max()), "effective_clients": float(1.0 / np.dot(w, w))}
