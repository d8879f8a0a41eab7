"""The metrics of untrusted Flower replies: :func:`average_metrics`, Flower's weighted average
that never raises, :func:`add_round_metrics`, what the strategy adds of its round, and
:func:`finite_number`, what counts as a number in a reply."""

from __future__ import annotations

import math
from logging import WARNING
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from flwr.app import MetricRecord, RecordDict
from flwr.supercore import log


def finite_number(value: Any) -> Optional[float]:
    """``value`` as a finite float, or None: bools, non-numbers, NaN, inf and integers too
    large for a float (``float(10**400)`` raises ``OverflowError``) are not numbers here."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        return None
    try:
        v = float(value)
    except (OverflowError, ValueError, TypeError):
        return None
    return v if math.isfinite(v) else None


def _is_number(value: Any) -> bool:
    return finite_number(value) is not None


def average_metrics(records: List[RecordDict], weighted_by_key: str,
                    weights: Optional[np.ndarray] = None) -> MetricRecord:
    r"""Flower's weighted average of the replies' metrics, made safe for untrusted replies.

    .. math:: \bar{v}_{key} = \sum_{i \ni key} \frac{n_i}{\sum_j n_j}\, v_{i, key}

    (elementwise for lists), as ``flwr.serverapp.strategy.strategy_utils.aggregate_metricrecords``,
    except that it never raises: a key whose values are not all finite numbers, or not all
    lists of finite numbers of one length, is left out with a log line; weights that are not
    finite non-negative numbers count as 0, and when they sum to 0 (or overflow) every reply
    weighs the same.

    Parameters
    ----------
    records
        The replies' contents, one ``MetricRecord`` each (others are left out).
    weighted_by_key
        The metric holding each reply's weight :math:`n_i` (left out of the result).
    weights
        ``[len(records)]`` weights to use instead of reading ``weighted_by_key`` (the
        strategy's checked and capped counts).

    Returns
    -------
    MetricRecord
    """
    metrics = [next(iter(r.metric_records.values())) if len(r.metric_records) == 1 else None
               for r in records]
    if weights is None:
        weights = np.array([0.0 if m is None else max(finite_number(m.get(weighted_by_key))
                                                      or 0.0, 0.0) for m in metrics])
    w = np.asarray(weights, dtype=np.float64)
    scale = float(w.max()) if w.size else 0.0
    w = w / scale if scale > 0 else np.ones_like(w)  # scaled first: huge counts do not overflow
    w = w / w.sum() if w.size else w
    values: Dict[str, List[Tuple[float, Any]]] = {}
    for m, wi in zip(metrics, w):
        if m is None:
            continue
        for key, value in m.items():
            if key != weighted_by_key:
                values.setdefault(key, []).append((float(wi), value))
    out = MetricRecord()
    for key, pairs in values.items():
        vals = [v for _, v in pairs]
        if all(_is_number(v) for v in vals):
            out[key] = float(sum(wi * float(v) for wi, v in pairs))
            continue
        lists = all(isinstance(v, list) and all(_is_number(x) for x in v) for v in vals)
        if lists and len({len(v) for v in vals}) == 1:
            out[key] = [float(sum(wi * float(v[j]) for wi, v in pairs))
                        for j in range(len(vals[0]))]
            continue
        why = ("lists of different lengths" if lists else
               "a number in one reply and a list in another, or a value that is not a finite "
               "number")
        log(WARNING, "metric '%s' is left out of the averaged metrics: the replies hold "
            "%s", key, why)
    return out


def add_round_metrics(metrics: MetricRecord, client_ids: np.ndarray, coef: np.ndarray,
                      dropped: int, scales: Optional[np.ndarray]) -> None:
    r"""Adds a committed round to its train ``metrics``: ``fastfair-clients`` (the ``[n]``
    client ids), ``fastfair-coefficients`` (the rule's ``[n]`` coefficients :math:`c`),
    ``fastfair-coef-min``/``-max``/``-sum`` (:math:`\min c`, :math:`\max c`,
    :math:`\sum_i c_i`), ``fastfair-dropped`` (replies left out) and, with the bound's ``[n]``
    clip ``scales``, ``fastfair-clipped`` (how many of them are below 1)."""
    metrics["fastfair-clients"] = [int(i) for i in client_ids]
    metrics["fastfair-coefficients"] = [float(c) for c in coef]
    metrics["fastfair-coef-min"] = float(coef.min())
    metrics["fastfair-coef-max"] = float(coef.max())
    metrics["fastfair-coef-sum"] = float(coef.sum())
    metrics["fastfair-dropped"] = int(dropped)
    if scales is not None:
        metrics["fastfair-clipped"] = int((scales < 1.0).sum())
