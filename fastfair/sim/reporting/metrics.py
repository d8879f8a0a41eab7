"""Fairness metrics over per-client results (accuracy or loss).

All take a 1-D array of per-client values; fractions select ``k = max(1, floor(frac * K))``
clients. Definitions (docs/algorithms.md §7): population variance (1/K), mean of the k worst /
best (uniform, and weighted by the clients' test samples as AAggFF's code does), Gini on sorted
values, parity gap max - min, and the biased autocorrelation of a series. For binary tasks, the
area under the ROC curve of each client's scores (:func:`auroc`, :func:`client_auroc`),
computed here in NumPy from ranks. For classification, top-5 accuracy and the expected and
maximum calibration errors of each client's predictions (:func:`calibration_errors`,
:func:`class_metrics`), the metrics SuPerFed's chapter of the thesis reports.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

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


def weighted_frac_mean(values: ArrayLike, weights: ArrayLike, frac: float,
                       worst: bool = True) -> float:
    r"""Mean of the ``k = max(1, floor(frac K))`` smallest (``worst``) or largest values, each
    weighted by its ``weights`` (e.g. test samples): :math:`\sum_{i \in S} w_i v_i /
    \sum_{i \in S} w_i`, S the k selected clients (ties broken by position, stably). This is
    AAggFF's "worst / best 10 %" (its code weighs the selected clients by their samples)."""
    v = _values(values)
    w = _values(weights, "weights")
    if w.shape != v.shape or (w < 0).any():
        raise ValueError(f"weights must be {v.size} non-negative numbers; got {w.size}")
    k = _count(v.size, frac)
    order = np.argsort(v if worst else -v, kind="stable")[:k]
    total = w[order].sum()
    return float(v[order].mean() if total == 0 else np.dot(w[order], v[order]) / total)


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
    ``worst10_weighted``/``best10_weighted`` (:func:`weighted_frac_mean`), ``variance`` (1/K),
    ``gini`` and ``parity_gap`` (max - min)."""
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
        "worst10_weighted": weighted_frac_mean(v, w, 0.10),
        "best10_weighted": weighted_frac_mean(v, w, 0.10, worst=False),
        "variance": float(v.var()),
        "gini": gini(v),
        "parity_gap": float(v.max() - v.min()),
    }


def auroc(scores: ArrayLike, labels: ArrayLike) -> float:
    r"""Area under the ROC curve of ``scores [n]`` (higher: more likely class 1) for binary
    ``labels [n]`` (0/1), by the Mann-Whitney statistic on ranks:
    :math:`\mathrm{AUC} = (R_1 - n_1 (n_1 + 1) / 2) / (n_1 n_0)`, :math:`R_1` the sum of the
    ranks (1-based, tied scores sharing their mean rank) of the :math:`n_1` positives among all
    n scores, :math:`n_0 = n - n_1`. Equals the probability that a random positive scores above
    a random negative, ties counting one half. NaN when either class is absent."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"scores has {s.size} entries but labels has {y.size}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 or 1 (AUROC is for binary tasks)")
    if np.isnan(s).any():
        raise ValueError("scores must not be NaN")
    positives = int(y.sum())
    negatives = y.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    sorted_scores = s[order]
    # Mean 1-based rank of each run of tied scores.
    starts = np.flatnonzero(np.concatenate([[True], sorted_scores[1:] != sorted_scores[:-1]]))
    ends = np.concatenate([starts[1:], [s.size]])
    ranks = np.empty(s.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    rank_sum = ranks[y == 1].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


def client_auroc(scores: ArrayLike, labels: ArrayLike, offsets: ArrayLike) -> np.ndarray:
    """``[m]`` :func:`auroc` of each client's rows ``offsets[k]:offsets[k + 1]`` of ``scores
    [N]`` and ``labels [N]`` (NaN for a client whose samples hold one class)."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    bounds = np.asarray(offsets, dtype=np.int64)
    return np.array([auroc(s[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])


def auroc_metrics(per_client: ArrayLike, counts: ArrayLike, scores: ArrayLike,
                  labels: ArrayLike) -> Dict[str, float]:
    """The ``auroc_*`` record of a binary task: :func:`fairness_metrics` of the clients'
    AUROC ``per_client [m]`` (weighted by their test samples ``counts [m]``) over the clients
    whose test samples hold both classes, ``auroc_num_clients`` (how many those are) and
    ``auroc_pooled`` (:func:`auroc` of every test sample together, ``scores [N]``, ``labels
    [N]``). Without such a client only the pooled value and the count are given."""
    a = np.asarray(per_client, dtype=np.float64).reshape(-1)
    n = np.asarray(counts, dtype=np.float64).reshape(-1)
    both = np.isfinite(a)
    out = {"auroc_pooled": auroc(scores, labels), "auroc_num_clients": float(both.sum())}
    if both.any():
        out.update({f"auroc_{k}": v for k, v in fairness_metrics(a[both], n[both]).items()})
    return out


#: Equal-width confidence bins of :func:`calibration_errors` (Guo et al., 2017, the ECE the
#: thesis cites; torchmetrics' default too).
CALIBRATION_BINS = 15


def calibration_errors(confidence: ArrayLike, correct: ArrayLike,
                       bins: int = CALIBRATION_BINS) -> Tuple[float, float]:
    r"""Expected and maximum calibration error of ``n`` predictions: ``confidence [n]`` (the
    top class's softmax probability) and ``correct [n]`` (1 where the top class is the label).

    The predictions fall into M = ``bins`` equal-width bins of confidence,
    :math:`B_b = \{i : (b-1)/M < p_i \le b/M\}` (a confidence of 0 in the first). With
    :math:`\mathrm{acc}(B)` and :math:`\mathrm{conf}(B)` a bin's mean correctness and mean
    confidence, :math:`\mathrm{ECE} = \sum_b \frac{|B_b|}{n}\,
    |\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|` and :math:`\mathrm{MCE} = \max_{b: B_b \ne
    \emptyset} |\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|`. Both are in [0, 1]; (NaN, NaN) for
    no predictions."""
    p = np.asarray(confidence, dtype=np.float64).reshape(-1)
    c = np.asarray(correct, dtype=np.float64).reshape(-1)
    if p.shape != c.shape:
        raise ValueError(f"confidence has {p.size} entries but correct has {c.size}")
    if bins < 1:
        raise ValueError(f"bins must be >= 1; got {bins}")
    if p.size == 0:
        return math.nan, math.nan
    which = np.clip(np.ceil(p * bins).astype(np.int64) - 1, 0, bins - 1)
    size = np.bincount(which, minlength=bins)
    gap = np.abs(np.bincount(which, c, bins) - np.bincount(which, p, bins))  # n_b |acc - conf|
    used = size > 0
    return float(gap.sum() / p.size), float((gap[used] / size[used]).max())


def class_metrics(top5: Optional[ArrayLike], confidence: ArrayLike, correct: ArrayLike,
                  labels: ArrayLike, offsets: ArrayLike, counts: ArrayLike) -> Dict[str, float]:
    """The record of a classification task's top-5 accuracy, calibration and per-class
    accuracy over ``m`` clients: ``acc5_*``, :func:`fairness_metrics` of the clients' top-5
    accuracy ``top5 [m]`` weighted by their test samples ``counts [m]`` (left out when ``top5``
    is None: five classes or fewer); ``ece_*`` and ``mce_*``, each client's
    :func:`calibration_errors` of its predictions ``offsets[k]:offsets[k + 1]`` of
    ``confidence [R]`` and ``correct [R]`` (a position each for a label per position),
    summarised as their ``mean`` over clients, ``weighted_mean`` (by ``counts``), ``worst10``
    (the mean of the 10 % highest) and ``pooled`` (every prediction together);
    ``acc_class<c>``, the accuracy of the predictions whose label ``labels [R]`` is c, pooled
    over the clients, for every class present."""
    n = np.asarray(counts, dtype=np.float64).reshape(-1)
    bounds = np.asarray(offsets, dtype=np.int64)
    p = np.asarray(confidence, dtype=np.float64).reshape(-1)
    c = np.asarray(correct, dtype=np.float64).reshape(-1)
    per = np.array([calibration_errors(p[a:b], c[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    y = np.asarray(labels, dtype=np.int64).reshape(-1)
    out: Dict[str, float] = {}
    if top5 is not None:
        out.update({f"acc5_{k}": v for k, v in fairness_metrics(top5, n).items()})
    pooled = calibration_errors(p, c)
    for j, name in enumerate(("ece", "mce")):
        v = _values(per[:, j], f"{name} per client")
        out.update({f"{name}_mean": float(v.mean()), f"{name}_weighted_mean":
                    float(np.dot(n, v) / n.sum()), f"{name}_worst10": best_frac_mean(v, 0.10),
                    f"{name}_pooled": pooled[j]})
    size = np.bincount(y)
    right = np.bincount(y, c, size.size)
    out.update({f"acc_class{k}": float(right[k] / size[k]) for k in np.flatnonzero(size)})
    return out


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
