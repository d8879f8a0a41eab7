"""What a sweep leaves behind: the summary table (terminal), ``sweep_summary.csv`` / ``.json``
(one row per grid point), ``sweep_runs.csv`` (one row per run) and two plots: the fairness
trade-off of every chosen point with error bars, and per-round curves with bands over seeds
(docs/sweeps.md §5)."""

from __future__ import annotations

import csv
import json
import math
import shutil
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from fastfair import _files as files
from fastfair.sim import run_files
from fastfair.sim.reporting.figures import subplots
from fastfair.sim.reporting.stats import (
    DIVERGED,
    SummaryRow,
    SweepRun,
    by_point,
    mean_ci,
    options_json,
    summarize,
    validation_metric,
)

LABELS = {"acc_mean": "mean acc", "acc_weighted_mean": "weighted", "acc_worst10": "worst 10%",
          "acc_worst5": "worst 5%", "acc_best10": "best 10%", "acc_best5": "best 5%",
          "acc_variance": "variance", "acc_gini": "Gini", "acc_parity_gap": "max-min",
          "acc_worst_group": "worst grp", "acc_gini_groups": "grp Gini", "test_loss": "test loss",
          "val_loss": "val loss"}
#: The confidence of every interval a sweep reports (:func:`~fastfair.sim.reporting.stats.mean_ci`).
CONFIDENCE = 0.95
#: Below this many seeds the curves' band is the range over seeds: the t interval of 2 seeds
#: (t = 12.7) would hide the curves.
CI_BAND_SEEDS = 3
#: Per-run record entries that are not metrics of the run (``seconds`` is the round's time).
_NOT_METRICS = ("round", "seconds", "participants")


def label(metric: str) -> str:
    """The column heading of ``metric`` (``val_`` ones prefixed ``val``)."""
    if metric in LABELS:
        return LABELS[metric]
    if metric.startswith("val_") and metric[4:] in LABELS:
        return "val " + LABELS[metric[4:]]
    return metric


#: The range of every bounded metric: accuracies and their Gini are fractions in [0, 1] (one
#: unit in every file, table and plot). An interval on one is clipped to it.
BOUNDS = (0.0, 1.0)


def bounded(metric: str) -> bool:
    """Whether ``metric`` lies in :data:`BOUNDS`: accuracies (``acc_*``, ``acc5_*``,
    ``val_acc_*``) and their Gini, the calibration errors (``ece_*``, ``mce_*``), not a
    variance (in [0, 1/4]) nor the losses."""
    base = metric[4:] if metric.startswith("val_") else metric
    return (base.startswith(("acc_", "acc5_", "ece_", "mce_"))
            and base not in ("acc_variance", "acc5_variance"))


def cell(pair: Tuple[float, float], metric: str, signed: bool = False) -> str:
    """``(mean, half_width)`` of ``metric`` as a table shows it: ``0.550 ± 0.064`` (a variance
    with 4 decimals), signed for a difference, the mean alone where the half-width is NaN (one
    seed), ``n/a`` where the mean is."""
    mean, half = pair
    if math.isnan(mean):
        return "n/a"
    digits = 4 if metric.endswith("acc_variance") else 3
    text = f"{mean:{'+' if signed else ''}.{digits}f}"
    return text if math.isnan(half) else f"{text} ± {half:.{digits}f}"


def terminal_width() -> int:
    """The columns of the terminal standard output goes to (``COLUMNS`` when set); 160 where
    it goes to no terminal (a file, a pipe)."""
    return shutil.get_terminal_size((160, 24)).columns


def column_blocks(widths: Sequence[int], lead: int, width: Optional[int]) -> List[List[int]]:
    """The columns of ``widths`` split into blocks, in order, each fitting ``width``
    characters beside the ``lead`` characters every block repeats (a block holds one column
    at least, however wide); one block when ``width`` is None."""
    if width is None:
        return [list(range(len(widths)))]
    blocks: List[List[int]] = [[]]
    used = lead
    for i, w in enumerate(widths):
        if blocks[-1] and used + w > width:
            blocks.append([])
            used = lead
        blocks[-1].append(i)
        used += w
    return blocks


def sweep_table(rows: Sequence[SummaryRow], metrics: Sequence[str],
                baseline: Optional[str], width: Optional[int] = None) -> str:
    """The summary for a terminal: per grid point its seeds n, mean ± 95 % CI half-width of
    each of ``metrics``, then (with differences) the difference ``point - baseline`` paired on
    seeds ± its half-width; where some rule had several points, ``*`` marks the chosen ones.
    Every value as recorded (accuracies as fractions), with 3 decimals (variance 4). With
    ``width``, a table wider than it is split into blocks of columns one under the other, each
    repeating the point and n (:func:`column_blocks`), and the notes are wrapped to it."""
    if not rows:
        raise ValueError("rows is empty")
    diff = baseline is not None and any(r.differences for r in rows)
    choice = not all(r.selected for r in rows)
    names = [label(m) for m in metrics]
    heads = names + ([f"Δ {n}" for n in names] if diff else [])
    cells = [[cell(r.values[m], m) for m in metrics]
             + ([cell(r.differences[m], m, signed=True) if r.differences else "baseline"
                 for m in metrics] if diff else []) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) + 2 for i, h in enumerate(heads)]
    first = max([len(r.point) + 2 for r in rows] + [len("point") + 2])
    lines: List[str] = []
    for block in column_blocks(widths, first + 3, width):
        header = f"{'point':<{first}}{'n':>3}" + "".join(f"{heads[i]:>{widths[i]}}"
                                                         for i in block)
        lines += ([""] if lines else []) + [header, "-" * len(header)]
        for row, cs in zip(rows, cells):
            name = ("*" if choice and row.selected else " ") + row.point
            lines.append(f"{name:<{first}}{row.n:>3}"
                         + "".join(f"{cs[i]:>{widths[i]}}" for i in block))
    notes = [f"(mean ± half-width of the {CONFIDENCE:.0%} Student-t interval over the n "
             "seeds, none for one seed; accuracies as fractions in [0, 1])"]
    notes += [f"(! {row.point}: {row.diverged_note()}; a diverged run counts in no value)"
              for row in rows if row.diverged]
    if diff:
        notes.append(f"(Δ: the point minus {baseline}, paired on seeds: runs of a seed share "
                     "data, initial model and client samples; ± its "
                     f"{CONFIDENCE:.0%} interval)")
    if choice:
        notes.append("(*: the grid point of each rule chosen on the validation split, never on "
                     "the test split)")
    lines += [textwrap.fill(note, width) if width else note for note in notes]
    return "\n".join(lines)


def write_sweep(out: Path, runs: Sequence[SweepRun], rows: Sequence[SummaryRow],
                selection: Mapping[str, Mapping[str, Any]], metrics: Sequence[str],
                baseline: Optional[str], select_metric: str = "acc_mean") -> List[Path]:
    """Writes into ``out`` and returns the paths of:

    - ``sweep_summary.csv``, one row per grid point: ``point, rule, options`` (JSON), ``n,
      selected`` (``n``: the seeds counted), where some run diverged ``diverged`` (which
      seeds, at which round, e.g. ``seed 2 diverged at round 354 (2 of 3 seeds counted)``),
      per metric ``<m>_mean, <m>_ci`` (the CI half-width), then ``<m>_diff,
      <m>_diff_ci`` (paired on seeds against ``baseline``; empty without); NaN as empty;
    - ``sweep_summary.json``: the same rows (options as objects, NaN as null) under
      ``points``, with ``baseline``, ``select`` (``select_metric``), ``select_on`` (the
      validation metric read), ``confidence``, ``metrics`` and ``selection``;
    - ``sweep_runs.csv``, one row per run: ``rule, point, options, seed, seconds`` and the last
      value of every metric any run recorded (empty where this one did not; a run that
      diverged has none but ``diverged``: ``at round T: why``);
    - ``tradeoff.png`` (:func:`plot_tradeoff`) and ``curves.png`` (:func:`plot_curves`) of
      the selected points."""
    if not rows:
        raise ValueError("rows is empty")
    out = Path(out)
    paths = [out / run_files.SWEEP_SUMMARY_CSV, out / run_files.SWEEP_SUMMARY_JSON,
             out / run_files.SWEEP_RUNS]
    marked = any(r.diverged for r in rows)  # the column only where a run diverged
    records = [_row_record(r, metrics, marked) for r in rows]
    with files.atomic(paths[0], text=True) as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    with files.atomic(paths[1], text=True) as f:
        f.write(json.dumps(
            {"baseline": baseline, "select": select_metric,
             "select_on": validation_metric(select_metric), "confidence": CONFIDENCE,
             "metrics": list(metrics),
             "selection": {rule: json.loads(options_json(o)) for rule, o in selection.items()},
             "points": [{**r, "options": json.loads(r["options"])} for r in records]},
            indent=1, allow_nan=False))
    _write_runs(paths[2], runs)
    chosen = {r.point for r in rows if r.selected}
    mine = [run for run in runs if run.point in chosen and run.diverged_round is None]
    if not mine:  # every chosen run diverged: nothing to draw
        return paths
    with files.writing(out / run_files.TRADEOFF_PNG):
        paths.append(plot_tradeoff(out / run_files.TRADEOFF_PNG, mine))
    with files.writing(out / run_files.CURVES_PNG):
        paths.append(plot_curves(out / run_files.CURVES_PNG, mine))
    return paths


def _number(x: Optional[float]) -> Optional[float]:
    """None (an empty CSV cell, JSON null) for a missing or non-finite number."""
    return None if x is None or not math.isfinite(x) else float(x)


def _row_record(row: SummaryRow, metrics: Sequence[str], marked: bool) -> Dict[str, Any]:
    record: Dict[str, Any] = {"point": row.point, "rule": row.rule,
                              "options": options_json(row.options),
                              "n": row.n, "selected": row.selected}
    if marked:
        record["diverged"] = row.diverged_note()
    for m in metrics:
        record[f"{m}_mean"], record[f"{m}_ci"] = map(_number, row.values[m])
    for m in metrics:
        record[f"{m}_diff"], record[f"{m}_diff_ci"] = map(_number,
                                                           row.differences.get(m, (None, None)))
    return record


def _write_runs(path: Path, runs: Sequence[SweepRun]) -> None:
    columns: List[str] = []
    for run in runs:
        for record in run.history:
            columns += [k for k in record if k not in _NOT_METRICS and k not in columns]
    with files.atomic(path, text=True) as f:
        writer = csv.writer(f)
        writer.writerow(["rule", "point", "options", "seed", "seconds", *columns])
        for run in runs:
            last = {}
            for record in run.history:  # later records overwrite: each metric's last value
                last.update(record)
            if run.diverged_round is not None:  # no number of a diverged run: why, and when
                last = {DIVERGED: f"at round {run.diverged_round}: {last[DIVERGED]}"}
            writer.writerow([run.rule, run.point,
                             options_json(run.options), run.seed,
                             f"{run.seconds:.3f}", *[_csv_value(last.get(k)) for k in columns]])


def _csv_value(value: Any) -> str:
    return "" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def _worst(runs: Sequence[SweepRun]) -> Tuple[str, str]:
    """The worst-off metric the plots show: the worst group's accuracy when every run has
    groups, else the worst 10 % of clients'."""
    if all(any("acc_worst_group" in r for r in run.history) for run in runs):
        return "acc_worst_group", "worst group"
    return "acc_worst10", "worst-10% clients"


def clipped_errors(mean: float, half: float, low: float = BOUNDS[0],
                   high: float = BOUNDS[1]) -> Optional[Tuple[List[float], List[float]]]:
    """The error bar ``[[below], [above]]`` of ``mean ± half`` clipped to ``[low, high]`` (what
    ``errorbar``'s ``xerr``/``yerr`` take); None for a NaN ``half`` (one seed: no interval)."""
    if math.isnan(half):
        return None
    return [max(0.0, mean - max(low, mean - half))], [max(0.0, min(high, mean + half) - mean)]


#: Markers cycled with the colours, so that points of one colour cycle still differ.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def plot_tradeoff(path: Path, runs: Sequence[SweepRun]) -> Path:
    """Two panels, one marker per grid point of ``runs`` (a colour and shape each, named in one
    legend beside the panels, so that close points never print their names over each other):
    mean accuracy (x) against worst-10 % accuracy (the worst group's, when the data set has
    groups), and against Gini, each at the mean over seeds of the runs' last values with 95 %
    Student-t CI error bars on both axes (none for one seed), clipped to [0, 1], the range of
    both metrics (the caption says so)."""
    worst, what = _worst(runs)
    rows = summarize(runs, ["acc_mean", worst, "acc_gini"])
    fig, axes = subplots(1, 2, figsize=(12, 4.8))
    for ax, other, name in ((axes[0], worst, f"{what} accuracy"),
                            (axes[1], "acc_gini", "Gini of client accuracy")):
        for k, row in enumerate(rows):
            (x, xe), (y, ye) = row.values["acc_mean"], row.values[other]
            ax.errorbar(x, y, xerr=clipped_errors(x, xe), yerr=clipped_errors(y, ye),
                        fmt=MARKERS[k % len(MARKERS)], color=f"C{k % 10}", capsize=3,
                        markersize=7, label=row.point)
        ax.set(xlabel="mean client accuracy", ylabel=name)
        ax.grid(alpha=0.3)
    axes[0].set_title("higher and to the right is better")
    axes[1].set_title("lower and to the right is better")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               title="grid point")
    fig.suptitle(f"last evaluation, mean over seeds (error bars: {CONFIDENCE:.0%} Student-t CI "
                 "over seeds, clipped to [0, 1])")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def curve_band(values: np.ndarray, kind: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean [T], low [T], high [T])`` of ``values [n, T]`` (n seeds, T rounds): the mean over
    seeds and either (``kind="CI"``) its 95 % Student-t interval ``mean ± t s / sqrt(n)`` per round
    (:func:`~fastfair.sim.reporting.stats.mean_ci`; NaN for one seed) clipped to
    :data:`BOUNDS`, the range of the accuracies it is drawn for, or (``"min-max"``) the range over
    seeds."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] == 0:
        raise ValueError(f"values must be [seeds, rounds] with a seed; got shape {v.shape}")
    if kind == "min-max":
        return v.mean(axis=0), v.min(axis=0), v.max(axis=0)
    if kind != "CI":
        raise ValueError(f"kind must be 'CI' or 'min-max'; got {kind!r}")
    stats = np.array([mean_ci(v[:, j], CONFIDENCE) for j in range(v.shape[1])]).reshape(-1, 2)
    mean, half = stats[:, 0], stats[:, 1]
    return mean, np.maximum(mean - half, BOUNDS[0]), np.minimum(mean + half, BOUNDS[1])


def plot_curves(path: Path, runs: Sequence[SweepRun]) -> Path:
    """Per-round mean and worst-10 % test accuracy (the worst group's, when the data set has
    groups) of each grid point of ``runs``: the mean
    over its seeds as a line and a band (:func:`curve_band`: the 95 % CI when every point has
    at least :data:`CI_BAND_SEEDS` seeds, else the range over seeds; the title says which),
    on the evaluation rounds all its seeds share. One legend beside the panels names the
    points."""
    worst, what = _worst(runs)
    points = by_point(runs)
    kind = "CI" if min(len(g) for g in points.values()) >= CI_BAND_SEEDS else "min-max"
    fig, axes = subplots(1, 2, figsize=(12, 4.5), sharex=True)
    for point, group in points.items():
        color = None
        for ax, metric in zip(axes, ("acc_mean", worst)):
            curves = [dict(zip(*run.curve(metric))) for run in group]
            rounds = sorted(set.intersection(*(set(c) for c in curves)))
            values = np.array([[c[t] for t in rounds] for c in curves]).reshape(
                len(curves), len(rounds))
            mean, low, high = curve_band(values, kind)
            line, = ax.plot(rounds, mean, label=point, color=color)
            color = line.get_color()
            ax.fill_between(rounds, low, high, color=color, alpha=0.2)
    axes[0].set(xlabel="round", ylabel="test accuracy", title="mean client accuracy")
    axes[1].set(xlabel="round", ylabel="test accuracy", title=what)
    for ax in axes:
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               title="grid point")
    band = (f"{CONFIDENCE:.0%} Student-t CI over seeds, clipped to [0, 1]" if kind == "CI" else
            f"min-max over seeds (fewer than {CI_BAND_SEEDS} seeds for a CI)")
    fig.suptitle(f"mean over seeds, band: {band}")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
