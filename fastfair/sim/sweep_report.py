"""What a sweep leaves behind: the summary table (terminal), ``sweep_summary.csv`` / ``.json``
(one row per grid point), ``sweep_runs.csv`` (one row per run) and two plots: the fairness
trade-off of every chosen point with error bars, and per-round curves with bands over seeds."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from fastfair.sim.stats import SummaryRow, SweepRun, mean_ci

LABELS = {"acc_mean": "mean acc", "acc_weighted_mean": "weighted", "acc_worst10": "worst 10%",
          "acc_worst5": "worst 5%", "acc_best10": "best 10%", "acc_variance": "variance",
          "acc_gini": "Gini", "acc_parity_gap": "max-min", "acc_worst_group": "worst grp",
          "test_loss": "test loss"}


def _scale(metric: str) -> float:
    """Accuracies in %, variance in %^2, Gini and losses as they are."""
    if metric.endswith("variance"):
        return 1e4
    return 1.0 if metric.endswith(("gini", "loss")) else 100.0


def _cell(pair, metric: str, signed: bool = False) -> str:
    mean, half = pair
    scale = _scale(metric)
    digits = 3 if scale == 1.0 else 2
    sign = "+" if signed else ""
    text = f"{mean * scale:{sign}.{digits}f}"
    return text + ("" if math.isnan(half) else f" ± {half * scale:.{digits}f}")


def sweep_table(rows: Sequence[SummaryRow], metrics: Sequence[str],
                baseline: Optional[str]) -> str:
    """Per grid point (``*``: chosen on the validation split): seeds, mean ± 95 % CI half-width
    of each metric, then the difference to ``baseline`` paired on seeds (± its CI)."""
    diff = baseline is not None and any(r.differences for r in rows)
    names = [LABELS.get(m, m) for m in metrics]
    width = max([len(r.point) + 2 for r in rows] + [12])
    cells = [[_cell(r.values[m], m) for m in metrics]
             + ([_cell(r.differences[m], m, signed=True) if r.differences else "baseline"
                 for m in metrics] if diff else []) for r in rows]
    heads = names + ([f"Δ {n}" for n in names] if diff else [])
    widths = [max(len(h), *(len(c[i]) for c in cells)) + 2 for i, h in enumerate(heads)]
    header = f"{'point':<{width}}{'n':>3}" + "".join(f"{h:>{w}}" for h, w in zip(heads, widths))
    lines = [header, "-" * len(header)]
    for row, cs in zip(rows, cells):
        label = ("*" if row.selected else " ") + row.point
        lines.append(f"{label:<{width}}{len(row.seeds):>3}"
                     + "".join(f"{c:>{w}}" for c, w in zip(cs, widths)))
    lines.append("(mean ± half-width of the 95% Student-t interval over seeds; accuracies in %, "
                 "variance in %^2")
    if diff:
        lines.append(f" Δ: difference to {baseline} paired on seeds (same data, initial model "
                     "and client samples), ± its 95% interval")
    if not all(r.selected for r in rows):
        lines.append(" *: the grid point chosen on the validation split, never on the test "
                     "split")
    lines[-1] += ")"
    return "\n".join(lines)


def write_sweep(out: Path, runs: Sequence[SweepRun], rows: Sequence[SummaryRow],
                selection: Mapping[str, Mapping[str, Any]], metrics: Sequence[str],
                baseline: Optional[str], select_metric: str = "acc_mean") -> List[Path]:
    """Writes the summary (CSV, JSON), the per-run table and the plots into ``out``; returns
    the paths."""
    out = Path(out)
    paths = [out / "sweep_summary.csv", out / "sweep_summary.json", out / "sweep_runs.csv"]
    records = [_row_record(r, metrics) for r in rows]
    with open(paths[0], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    paths[1].write_text(json.dumps({"baseline": baseline, "select": select_metric,
                                    "selection": selection, "points": records}, indent=1))
    last = sorted({k for run in runs for rec in run.history for k in rec
                   if k not in ("round", "seconds", "participants")})
    with open(paths[2], "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rule", "options", "seed", "seconds", *last])
        for run in runs:
            values = []
            for key in last:
                try:
                    values.append(f"{run.last(key):.6g}")
                except KeyError:
                    values.append("")
            writer.writerow([run.rule, json.dumps(run.options), run.seed, f"{run.seconds:.3f}",
                             *values])
    chosen = [r for r in rows if r.selected]
    paths.append(plot_tradeoff(out / "tradeoff.png", chosen))
    paths.append(plot_curves(out / "curves.png", runs, chosen))
    return paths


def _row_record(row: SummaryRow, metrics: Sequence[str]) -> Dict[str, Any]:
    record: Dict[str, Any] = {"point": row.point, "rule": row.rule,
                              "options": json.dumps(row.options), "n": len(row.seeds),
                              "selected": row.selected}
    for m in metrics:
        record[f"{m}_mean"], record[f"{m}_ci"] = row.values[m]
    for m in metrics:
        record[f"{m}_diff"], record[f"{m}_diff_ci"] = row.differences.get(m, (None, None))
    return record


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_tradeoff(path: Path, rows: Sequence[SummaryRow]) -> Path:
    """Mean accuracy against worst-10 % accuracy and against Gini, one point per grid point
    with 95 % CI error bars on both axes."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, other, label in ((axes[0], "acc_worst10", "worst-10% client accuracy (%)"),
                             (axes[1], "acc_gini", "Gini of client accuracy")):
        for row in rows:
            if other not in row.values or "acc_mean" not in row.values:
                continue
            (x, xe), (y, ye) = row.values["acc_mean"], row.values[other]
            s = _scale(other)
            ax.errorbar(100 * x, s * y, xerr=None if math.isnan(xe) else 100 * xe,
                        yerr=None if math.isnan(ye) else s * ye, fmt="o", capsize=3,
                        label=row.point)
        ax.set(xlabel="mean client accuracy (%)", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].set_title("higher and to the right is better")
    axes[1].set_title("lower and to the right is better")
    axes[1].legend(fontsize=8)
    fig.suptitle("rules over seeds (error bars: 95% CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(path: Path, runs: Sequence[SweepRun], rows: Sequence[SummaryRow]) -> Path:
    """Per-round mean and worst-10 % accuracy of each grid point: the mean over seeds as a
    line, the 95 % CI over seeds as a band (no band for one seed)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharex=True)
    for row in rows:
        mine = [r for r in runs if r.rule == row.rule and r.options == row.options]
        color = None
        for ax, metric in zip(axes, ("acc_mean", "acc_worst10")):
            rounds, _ = mine[0].curve(metric)
            values = np.array([r.curve(metric)[1] for r in mine]) * 100
            stats = [mean_ci(values[:, j]) for j in range(values.shape[1])]
            mean = np.array([m for m, _ in stats])
            line, = ax.plot(rounds, mean, label=row.point, color=color)
            color = line.get_color()
            if len(mine) > 1:
                half = np.array([h for _, h in stats])
                ax.fill_between(rounds, mean - half, mean + half, color=color, alpha=0.2)
    axes[0].set(xlabel="round", ylabel="test accuracy (%)", title="mean client accuracy")
    axes[1].set(xlabel="round", ylabel="test accuracy (%)", title="worst-10% clients")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("mean over seeds, band: 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
