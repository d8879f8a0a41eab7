"""The statistics of a sweep: means with Student-t confidence intervals over seeds, differences
paired on seeds against a baseline rule, and the choice of each rule's grid point on the
validation split (docs/sweeps.md §3-4).

Runs of one seed share the data set, the initial model and every round's client sample, so the
difference between two rules on one seed carries none of the seed-to-seed variation of the
data; a paired interval is then much narrower than the two unpaired ones side by side.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

#: The round record's key that marks the round in which a run diverged (its global model or a
#: loss it read was not finite); its value says why. The run plays no round after it.
DIVERGED = "diverged"

_SPREAD = ("variance", "gini", "parity_gap", "gini_groups")
#: Metrics where smaller is better: the spread of client accuracy (variance, Gini, max - min;
#: the Gini over groups) on
#: the test (``acc_``) and validation (``val_acc_``) splits, the spread of client AUROC
#: (``auroc_``), the calibration errors (``ece_``, ``mce_``) and the losses.
LOWER_IS_BETTER = frozenset({p + s for p in ("acc_", "acc5_", "val_acc_", "auroc_")
                             for s in _SPREAD}
                            | {f"{e}_{s}" for e in ("ece", "mce")
                               for s in ("mean", "weighted_mean", "worst10", "pooled")}
                            | {"test_loss", "val_loss", "train_loss"})


def diverged_round(history: Sequence[Mapping[str, Any]]) -> Optional[int]:
    """The round in which the run of the round records ``history`` diverged (the round of its
    record marked :data:`DIVERGED`), or None when it did not."""
    for record in reversed(history):
        if DIVERGED in record:
            return int(record["round"])
    return None


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` (``acc_gini``, ``val_acc_gini``, ``test_loss``, ...) is
    better (membership in :data:`LOWER_IS_BETTER`)."""
    return metric in LOWER_IS_BETTER


def selectable_metrics() -> Tuple[str, ...]:
    """The metrics a sweep can choose its grid points by: those a run records on its
    validation split (:func:`fastfair.sim.reporting.metrics.fairness_metrics` of client
    accuracy as ``acc_*``, and ``test_loss``), each also by its ``val_`` name."""
    from fastfair.sim.reporting.metrics import fairness_metrics

    test = [f"acc_{k}" for k in fairness_metrics(np.ones(2))] + ["test_loss"]
    return tuple(test) + tuple(validation_metric(m) for m in test)


def validation_metric(metric: str) -> str:
    """The validation counterpart of a test ``metric``: ``acc_x`` -> ``val_acc_x``,
    ``test_loss`` -> ``val_loss``; a ``val_`` name is its own."""
    if metric.startswith("val_"):
        return metric
    return "val_loss" if metric == "test_loss" else "val_" + metric


def point_label(rule: str, options: Mapping[str, Any]) -> str:
    """A grid point's label: ``rule``, or ``rule(a=1,b=x)`` with its options sorted by name
    (strings as they are, other values as JSON)."""
    if not options:
        return rule
    return f"{rule}(" + ",".join(f"{k}={_short(v)}" for k, v in sorted(options.items())) + ")"


def options_json(options: Mapping[str, Any]) -> str:
    """A grid point's options as JSON, sorted by name (numpy scalars as numbers, other
    non-JSON values as their text)."""
    return json.dumps({k: _plain(v) for k, v in options.items()}, sort_keys=True, default=str)


def _plain(value: Any) -> Any:
    # Grid values built with numpy (np.linspace) are numpy scalars, which json cannot write.
    return value.item() if isinstance(value, np.generic) else value


def _short(value: Any) -> str:
    value = _plain(value)
    return value if isinstance(value, str) else json.dumps(value, default=str)


@dataclass
class SweepRun:
    """One finished run of a sweep: ``rule`` with the ``options`` of its grid point, ``seed``,
    its round records ``history`` (each has ``round``; evaluation rounds hold ``acc_*``,
    ``test_loss`` and, with a validation split, ``val_acc_*`` and ``val_loss``), its final
    per-client test accuracy ``final [E]`` and its wall time ``seconds`` (a batched sweep's
    share of the program)."""

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

    @property
    def diverged_round(self) -> Optional[int]:
        """The round in which the run diverged (:func:`diverged_round`), or None."""
        return diverged_round(self.history)

    def last(self, metric: str) -> float:
        """The metric's value in the last record that has it (KeyError if none has)."""
        for record in reversed(self.history):
            if metric in record:
                return float(record[metric])
        raise KeyError(f"run {self.point} seed {self.seed} never recorded {metric!r}")

    def curve(self, metric: str) -> Tuple[np.ndarray, np.ndarray]:
        """``(rounds [n], values [n])`` over the n records that have ``metric``."""
        rows = [(r["round"], r[metric]) for r in self.history if metric in r]
        return (np.array([r for r, _ in rows], dtype=np.int64),
                np.array([v for _, v in rows], dtype=np.float64))


def _finite(values: Union[Sequence[float], np.ndarray], name: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite; got {v.tolist()}")
    return v


def mean_ci(values: Union[Sequence[float], np.ndarray],
            confidence: float = 0.95) -> Tuple[float, float]:
    r"""``(mean, half_width)`` of ``values [n]``: the Student-t interval
    :math:`\bar x \pm t_{n-1,(1+c)/2}\, s/\sqrt n` with the sample standard deviation s
    (ddof 1) and c = ``confidence``; the half-width is NaN for n = 1."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    v = _finite(values, "values")
    if v.size == 1:
        return float(v[0]), math.nan
    half = _t_quantile((1 + confidence) / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return float(v.mean()), float(half)


@functools.lru_cache(maxsize=None)
def _t_quantile(q: float, dof: int) -> float:
    # scipy.special's stdtrit, not scipy.stats' t.ppf: importing scipy.stats and calling t.ppf
    # cost far more than the handful of (q, dof) pairs a summary asks for.
    from scipy.special import stdtrit

    return float(stdtrit(dof, q))


def paired_difference(values: Mapping[int, float], baseline: Mapping[int, float],
                      confidence: float = 0.95) -> Tuple[float, float, int]:
    r"""``(mean, half_width, n)`` of the differences :math:`d_s = x_s - b_s` over the n seeds
    s in both ``values`` and ``baseline`` (``{seed: value}``), with :func:`mean_ci`'s
    interval on :math:`d_1..d_n`."""
    common = sorted(set(values) & set(baseline))
    if not common:
        raise ValueError(f"values (seeds {sorted(values)}) and baseline (seeds "
                         f"{sorted(baseline)}) share no seed")
    x = _finite([values[s] for s in common], "values")
    b = _finite([baseline[s] for s in common], "baseline")
    mean, half = mean_ci(x - b, confidence)
    return mean, half, len(common)


def by_point(runs: Sequence[SweepRun]) -> Dict[str, List[SweepRun]]:
    """``{point label: [runs]}``, the points in order of first appearance in ``runs``."""
    if not runs:
        raise ValueError("runs is empty")
    out: Dict[str, List[SweepRun]] = {}
    for run in runs:
        out.setdefault(run.point, []).append(run)
    return out


def select(runs: Sequence[SweepRun], metric: str = "acc_mean") -> Dict[str, Dict[str, Any]]:
    r"""``{rule: options}``: per rule, the grid point whose mean over its seeds of the last
    :func:`validation_metric` of ``metric`` (``val_acc_mean`` for ``acc_mean``) is best,
    :math:`\arg\max_p \frac{1}{n_p} \sum_s v_{p,s}` (arg min where :func:`lower_is_better`);
    the first point in run order on ties, and a point with a non-finite mean (a diverged run)
    only when no point has a finite one. A rule with one point is chosen as it is. Test
    metrics are never read."""
    by_rule: Dict[str, List[List[SweepRun]]] = {}
    for group in by_point(runs).values():
        by_rule.setdefault(group[0].rule, []).append(group)
    key, sign = validation_metric(metric), (-1.0 if lower_is_better(metric) else 1.0)
    chosen = {}
    for rule, groups in by_rule.items():
        if len(groups) > 1:
            means = np.array([np.mean([_validation(r, key, len(groups)) for r in group])
                              for group in groups])
            score = np.where(np.isfinite(means), sign * means, -np.inf)
            groups = [groups[int(np.argmax(score))]]  # argmax: the first of equal scores
        chosen[rule] = dict(groups[0][0].options)
    return chosen


def _validation(run: SweepRun, key: str, points: int) -> float:
    if run.diverged_round is not None:  # its point loses, as a non-finite mean does
        return math.nan
    try:
        return run.last(key)
    except KeyError:
        recorded = sorted({k for r in run.history for k in r if k.startswith("val_")})
        if recorded:  # a validation split, but not this metric: most likely a misspelt name
            raise ValueError(f"choosing among the {points} grid points of {run.rule} needs "
                             f"{key!r}, which run {run.point} seed {run.seed} never recorded; "
                             f"it recorded {', '.join(recorded)}") from None
        raise ValueError(f"choosing among the {points} grid points of {run.rule} needs "
                         f"{key!r}: run the sweep with a validation split (validation, "
                         "--validation FRACTION)") from None


@dataclass
class SummaryRow:
    """One grid point over its seeds: ``values[metric] = (mean, half_width)`` of the runs'
    last values (:func:`mean_ci`), ``differences[metric] = (mean, half_width)`` paired on
    seeds against the baseline's reference point (:func:`paired_difference`; empty without a
    baseline and for the reference point itself), ``selected`` when the selection picked
    the point (every point without a selection), and ``diverged``, ``{seed: round}`` of the
    runs that diverged, which no value or difference counts."""

    rule: str
    options: Dict[str, Any]
    seeds: List[int]
    values: Dict[str, Tuple[float, float]]
    differences: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    selected: bool = True
    diverged: Dict[int, int] = field(default_factory=dict)

    @property
    def point(self) -> str:
        """The grid point's label (:func:`point_label`)."""
        return point_label(self.rule, self.options)

    @property
    def n(self) -> int:
        """The number of seeds counted: those whose run did not diverge."""
        return len(self.seeds) - len(self.diverged)

    def diverged_note(self) -> str:
        """``""``, or which seeds diverged: ``"seed 2 diverged at round 354 (2 of 3 seeds
        counted)"``."""
        if not self.diverged:
            return ""
        which = ", ".join(f"seed {s} diverged at round {t}" for s, t in self.diverged.items())
        return f"{which} ({self.n} of {len(self.seeds)} seeds counted)"


def summarize(runs: Sequence[SweepRun], metrics: Sequence[str], baseline: Optional[str] = None,
              selection: Optional[Mapping[str, Mapping[str, Any]]] = None) -> List[SummaryRow]:
    """One :class:`SummaryRow` per grid point, in order of first appearance in ``runs``: for
    each of ``metrics``, the mean and 95 % CI over the point's seeds of the runs' last values,
    and, with a ``baseline`` rule, the difference paired on common seeds to the runs of the
    baseline's reference point: its point in ``selection``, or its only point. Every other
    point, the baseline's other grid points included, gets differences. A run that diverged
    (:attr:`SweepRun.diverged_round`) is left out of every value and difference and listed in
    the row's ``diverged``; a point whose runs all diverged, or a metric with a non-finite
    value on some seed, summarises as ``(nan, nan)`` instead of failing the sweep."""
    groups = by_point(runs)
    reference: Optional[List[SweepRun]] = None
    if baseline is not None:
        reference = _reference(groups, baseline, selection)
    rows = []
    for group in groups.values():
        first, counted = group[0], _counted(group)
        row = SummaryRow(first.rule, dict(first.options), [r.seed for r in group],
                         {m: _ci([r.last(m) for r in counted]) for m in metrics},
                         selected=selection is None or (first.rule in selection and dict(
                             selection[first.rule]) == first.options),
                         diverged={r.seed: t for r in group
                                   if (t := r.diverged_round) is not None})
        if reference is not None and group is not reference:
            row.differences = {m: _paired(counted, _counted(reference), m) for m in metrics}
        rows.append(row)
    return rows


def _reference(groups: Dict[str, List[SweepRun]], baseline: str,
               selection: Optional[Mapping[str, Mapping[str, Any]]]) -> List[SweepRun]:
    """The runs of the baseline's reference point."""
    mine = [g for g in groups.values() if g[0].rule == baseline]
    if not mine:
        raise ValueError(f"baseline {baseline!r} has no runs; the runs are of "
                         f"{sorted({g[0].rule for g in groups.values()})}")
    if len(mine) == 1:
        return mine[0]
    if selection is None or baseline not in selection:
        raise ValueError(f"baseline {baseline!r} has {len(mine)} grid points; pass the "
                         "selection that picks one")
    picked = [g for g in mine if g[0].options == dict(selection[baseline])]
    if not picked:
        raise ValueError(f"selection picks {dict(selection[baseline])} for baseline "
                         f"{baseline!r}, which is none of its grid points")
    return picked[0]


def _counted(group: Sequence[SweepRun]) -> List[SweepRun]:
    """The runs of ``group`` that did not diverge."""
    return [r for r in group if r.diverged_round is None]


def _ci(values: Sequence[float]) -> Tuple[float, float]:
    if not values or not np.all(np.isfinite(values)):
        return math.nan, math.nan
    return mean_ci(values)


def _paired(group: Sequence[SweepRun], reference: Sequence[SweepRun],
            metric: str) -> Tuple[float, float]:
    values = {r.seed: r.last(metric) for r in group}
    base = {r.seed: r.last(metric) for r in reference}
    if not set(values) & set(base):  # every common seed diverged on one side
        return math.nan, math.nan
    if not all(np.isfinite([values[s], base[s]]).all() for s in set(values) & set(base)):
        return math.nan, math.nan
    return paired_difference(values, base)[:2]
