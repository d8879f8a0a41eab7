"""The statistics of a sweep: means with Student-t confidence intervals over seeds, differences
paired on seeds against a baseline rule, and the choice of each rule's grid point on the
validation split (docs/sweeps.md).

Runs of one seed share the data set, the initial model and every round's client sample, so the
difference between two rules on one seed carries none of the seed-to-seed variation of the
data; a paired interval is then much narrower than the two unpaired ones side by side.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

#: Metrics where smaller is better (with or without the ``val_`` prefix).
LOWER_IS_BETTER = frozenset({"acc_variance", "acc_gini", "acc_parity_gap", "test_loss",
                             "val_loss", "train_loss"})


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` (``acc_gini``, ``val_acc_gini``, ...) is better."""
    return metric in LOWER_IS_BETTER or metric.removeprefix("val_") in LOWER_IS_BETTER


def point_label(rule: str, options: Mapping[str, Any]) -> str:
    """A grid point's label: ``rule``, or ``rule(a=1,b=x)`` with its options sorted by name."""
    if not options:
        return rule
    return f"{rule}(" + ",".join(f"{k}={_short(v)}" for k, v in sorted(options.items())) + ")"


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass
class SweepRun:
    """One finished run of a sweep: ``rule`` with the ``options`` of its grid point, ``seed``,
    its round records ``history`` (evaluation rounds hold ``acc_*``, ``test_loss`` and, with a
    validation split, ``val_acc_*`` and ``val_loss``), its final per-client test accuracy
    ``final [E]`` and its wall time ``seconds`` (a batched sweep's share of the program)."""

    rule: str
    options: Dict[str, Any]
    seed: int
    history: List[Dict[str, Any]]
    final: np.ndarray
    seconds: float

    @property
    def point(self) -> str:
        """The label of the run's grid point (:func:`point_label`)."""
        return point_label(self.rule, self.options)

    def last(self, metric: str) -> float:
        """The metric's value in the last record that has it (KeyError if none has)."""
        for record in reversed(self.history):
            if metric in record:
                return float(record[metric])
        raise KeyError(f"run {self.point} seed {self.seed} never recorded {metric!r}")

    def curve(self, metric: str) -> Tuple[np.ndarray, np.ndarray]:
        """``(rounds [n], values [n])`` of the records that have ``metric``."""
        rows = [(r["round"], r[metric]) for r in self.history if metric in r]
        return (np.array([r for r, _ in rows], dtype=np.int64),
                np.array([v for _, v in rows], dtype=np.float64))


def _finite(values: Sequence[float], name: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite; got {v.tolist()}")
    return v


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> Tuple[float, float]:
    r"""``(mean, half_width)`` of ``values [n]``: the Student-t interval
    :math:`\bar x \pm t_{n-1,(1+c)/2}\, s/\sqrt n` with the sample standard deviation s
    (ddof 1); the half-width is NaN for n = 1."""
    from scipy.stats import t

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    v = _finite(values, "values")
    if v.size == 1:
        return float(v[0]), math.nan
    half = t.ppf((1 + confidence) / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return float(v.mean()), float(half)


def paired_difference(values: Mapping[int, float], baseline: Mapping[int, float],
                      confidence: float = 0.95) -> Tuple[float, float, int]:
    r"""``(mean, half_width, n)`` of the differences :math:`d_s = x_s - b_s` over the n seeds
    s in both ``values`` and ``baseline`` (``{seed: value}``), with :func:`mean_ci`'s
    interval."""
    common = sorted(set(values) & set(baseline))
    if not common:
        raise ValueError(f"values (seeds {sorted(values)}) and baseline (seeds "
                         f"{sorted(baseline)}) share no seed")
    mean, half = mean_ci([values[s] - baseline[s] for s in common], confidence)
    return mean, half, len(common)


def _points(runs: Sequence[SweepRun]) -> Dict[str, List[SweepRun]]:
    """Runs by grid point label, in order of first appearance."""
    out: Dict[str, List[SweepRun]] = {}
    for run in runs:
        out.setdefault(run.point, []).append(run)
    return out


def select(runs: Sequence[SweepRun], metric: str = "acc_mean") -> Dict[str, Dict[str, Any]]:
    """Per rule, the options of the grid point whose mean over seeds of the last
    ``val_<metric>`` is best (smallest where :func:`lower_is_better`); the first such point on
    ties. A rule with one point is chosen as it is. Test metrics are never read."""
    by_rule: Dict[str, List[List[SweepRun]]] = {}
    for group in _points(runs).values():
        by_rule.setdefault(group[0].rule, []).append(group)
    key, sign = "val_" + metric, (-1.0 if lower_is_better(metric) else 1.0)
    chosen = {}
    for rule, groups in by_rule.items():
        if len(groups) == 1:
            chosen[rule] = dict(groups[0][0].options)
            continue
        try:
            scores = [sign * np.mean([r.last(key) for r in group]) for group in groups]
        except KeyError:
            raise ValueError(f"choosing among {len(groups)} grid points of {rule} needs "
                             f"{key!r}: run the sweep with a validation split (validation, "
                             "--validation)") from None
        chosen[rule] = dict(groups[int(np.argmax(scores))][0].options)
    return chosen


@dataclass
class SummaryRow:
    """One grid point over its seeds: ``values[metric] = (mean, half_width)`` of the runs'
    last values, ``differences[metric] = (mean, half_width)`` paired against the baseline's
    chosen point (empty without a baseline, and for the baseline's own rule), ``selected``
    when the selection picked it."""

    rule: str
    options: Dict[str, Any]
    seeds: List[int]
    values: Dict[str, Tuple[float, float]]
    differences: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    selected: bool = True

    @property
    def point(self) -> str:
        return point_label(self.rule, self.options)


def summarize(runs: Sequence[SweepRun], metrics: Sequence[str], baseline: Optional[str] = None,
              selection: Optional[Mapping[str, Mapping[str, Any]]] = None) -> List[SummaryRow]:
    """One :class:`SummaryRow` per grid point (in order of first appearance): mean and 95 %
    CI over seeds of each of ``metrics``, and differences paired on seeds against the runs of
    ``baseline`` at its selected point (its only point without ``selection``)."""
    groups = _points(runs)
    reference: Dict[str, Dict[int, float]] = {}
    if baseline is not None:
        mine = [g for g in groups.values() if g[0].rule == baseline]
        if not mine:
            raise ValueError(f"baseline {baseline!r} has no runs")
        if selection is not None and baseline in selection:
            mine = [g for g in mine if g[0].options == dict(selection[baseline])]
        if len(mine) != 1:
            raise ValueError(f"baseline {baseline!r} has {len(mine)} grid points; pass the "
                             "selection that picks one")
        reference = {m: {r.seed: r.last(m) for r in mine[0]} for m in metrics}
    rows = []
    for group in groups.values():
        first = group[0]
        row = SummaryRow(first.rule, dict(first.options), [r.seed for r in group],
                         {m: mean_ci([r.last(m) for r in group]) for m in metrics},
                         selected=selection is None or dict(selection.get(first.rule, {}))
                         == first.options)
        if reference and first.rule != baseline:
            row.differences = {m: paired_difference({r.seed: r.last(m) for r in group},
                                                    reference[m])[:2] for m in metrics}
        rows.append(row)
    return rows
