"""What a simulation leaves behind: metrics as CSV and JSON, a side-by-side summary table, and
PNG plots of fairness over rounds and of the final per-client accuracy distribution."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from fastfair._files import atomic, writing
from fastfair.sim import run_files
from fastfair.sim.reporting.figures import subplots
from fastfair.sim.reporting.stats import DIVERGED, diverged_round

SUMMARY_COLUMNS = [("acc_mean", "mean acc"), ("acc_weighted_mean", "weighted"),
                   ("acc_worst10", "worst 10%"), ("acc_worst5", "worst 5%"),
                   ("acc_best10", "best 10%"), ("acc_variance", "variance"),
                   ("acc_gini", "Gini"), ("acc_parity_gap", "max-min")]
#: Shown only when the data set has groups: the worst group's accuracy and the Gini over the
#: groups' accuracies.
GROUP_COLUMNS = [("acc_worst_group", "worst grp"), ("acc_gini_groups", "grp Gini")]
#: Shown only for a binary task: the clients' AUROC, mean, weighted by test samples and worst
#: 10 %, and the AUROC of every test sample pooled (x 100, as the papers print it).
AUROC_COLUMNS = [("auroc_mean", "AUC mean"), ("auroc_weighted_mean", "AUC wtd"),
                 ("auroc_worst10", "AUC wrst10"), ("auroc_pooled", "AUC pooled")]


def write_metrics(out: Path, histories: Dict[str, List[dict]]) -> None:
    """``metrics.csv`` (one row per rule and round) and ``metrics.json`` ({rule: [records]}).
    A failed write (a full disk) raises :class:`~fastfair._files.FileWriteError`
    naming the file."""
    rows = [{"rule": rule, **rec} for rule, hist in histories.items() for rec in hist]
    columns: List[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    with atomic(out / run_files.METRICS_CSV, text=True) as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    text = json.dumps(histories, indent=1)
    with atomic(out / run_files.METRICS_JSON, text=True) as f:
        f.write(text)


def write_final_accuracy(out: Path, finals: Dict[str, np.ndarray], client_ids: np.ndarray) -> None:
    """``final_accuracy.csv``: the final per-client test accuracy of every rule."""
    rules = list(finals)
    with atomic(out / run_files.FINAL_ACCURACY_CSV, text=True) as f:
        writer = csv.writer(f)
        writer.writerow(["client", *rules])
        for k, cid in enumerate(client_ids):
            writer.writerow([int(cid), *[f"{finals[r][k]:.6g}" for r in rules]])


def summarize(histories: Dict[str, List[dict]], seconds: Dict[str, float]) -> Dict[str, dict]:
    """Per rule: the metrics of its last evaluated round, the lag-1 autocorrelation of its mean
    accuracy series (higher: smoother progress) and its wall time; for a rule whose run
    diverged, no metric but ``diverged_round`` and ``diverged`` (why) beside its wall time."""
    from fastfair.sim.reporting.metrics import acf

    out: Dict[str, dict] = {}
    for rule, hist in histories.items():
        at = diverged_round(hist)
        if at is not None:
            out[rule] = {"diverged_round": at, DIVERGED: hist[-1].get(DIVERGED, ""),
                         "seconds": seconds.get(rule, 0.0)}
            continue
        evals = [r for r in hist if "acc_mean" in r]
        if not evals:
            continue
        series = [r["acc_mean"] for r in evals]
        lag1 = float(acf(series, 1)[1]) if len(series) > 1 else float("nan")
        keys = [k for k, _ in SUMMARY_COLUMNS + GROUP_COLUMNS + AUROC_COLUMNS if k in evals[-1]]
        out[rule] = {**{k: evals[-1][k] for k in keys}, "acc_mean_acf1": lag1,
                     "seconds": seconds.get(rule, 0.0)}
    return out


def summary_table(summary: Dict[str, dict]) -> str:
    """The summary side by side, every value as recorded (accuracies and AUROC as fractions in
    [0, 1]); a run that diverged as the round it diverged at, with no numbers."""
    scored = [row for row in summary.values() if "diverged_round" not in row]
    columns = SUMMARY_COLUMNS + [c for c in GROUP_COLUMNS + AUROC_COLUMNS
                                 if scored and all(c[0] in row for row in scored)]
    header = (f"{'rule':<12}" + "".join(f"{label:>11}" for _, label in columns)
              + f"{'ACF(1)':>8}{'time':>9}")
    lines = [header, "-" * len(header)]
    for rule, row in summary.items():
        if "diverged_round" in row:
            lines.append(f"{rule:<12}  diverged at round {row['diverged_round']}: "
                         f"{row[DIVERGED]} (no metrics)" + f"{row['seconds']:>8.1f}s")
            continue
        cells = [f"{row[key]:>11.{5 if key == 'acc_variance' else 4}f}" for key, _ in columns]
        lines.append(f"{rule:<12}" + "".join(cells) + f"{row['acc_mean_acf1']:>8.2f}"
                     + f"{row['seconds']:>8.1f}s")
    lines.append("(accuracies and AUROC as fractions in [0, 1], variance of the clients' "
                 "accuracies, ACF(1) of the mean-accuracy series, time = wall seconds of the run)")
    return "\n".join(lines)


def plot(out: Path, histories: Dict[str, List[dict]], finals: Dict[str, np.ndarray],
         title: str) -> List[Path]:
    """``fairness.png`` (mean, worst-10% and, with groups, worst-group accuracy; Gini over
    rounds) and
    ``final_accuracy.png`` (distribution of final per-client accuracy); returns the paths."""
    fig, axes = subplots(1, 2, figsize=(12, 4.5))
    for rule, hist in histories.items():
        evals = [r for r in hist if "acc_mean" in r]
        rounds = [r["round"] for r in evals]
        line, = axes[0].plot(rounds, [r["acc_mean"] for r in evals])
        axes[0].plot(rounds, [r["acc_worst10"] for r in evals], "--", color=line.get_color())
        if evals and "acc_worst_group" in evals[-1]:
            axes[0].plot(rounds, [r["acc_worst_group"] for r in evals], ":",
                         color=line.get_color())
        axes[1].plot(rounds, [r["acc_gini"] for r in evals], color=line.get_color(), label=rule)
    grouped = any(evals and "acc_worst_group" in evals[-1] for evals in (
        [r for r in hist if "acc_mean" in r] for hist in histories.values()))
    axes[0].set(xlabel="round", ylabel="test accuracy",
                title="mean (solid), worst-10% clients (dashed)"
                + (", worst group (dotted)" if grouped else ""))
    axes[1].set(xlabel="round", ylabel="Gini of client accuracy", title="inequality across clients")
    for ax in axes:
        ax.grid(alpha=0.3)
    # One legend of the rules beside both panels: inside, it hid the curves of close rules.
    handles, names = axes[1].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               title="rule")
    fig.suptitle(title)
    fig.tight_layout()
    paths = [out / run_files.FAIRNESS_PNG, out / run_files.FINAL_ACCURACY_PNG]
    with writing(paths[0]):
        fig.savefig(paths[0], dpi=110, bbox_inches="tight")

    fig, ax = subplots(figsize=(7, 4.5))
    bins = np.linspace(0, 1, 21).tolist()  # a list: matplotlib's bins type
    for rule, acc in finals.items():
        ax.hist(acc, bins=bins, histtype="step", linewidth=2, label=rule)
    ax.set(xlabel="final test accuracy of a client", ylabel="clients",
           title="distribution of client accuracy after the last round")
    ax.grid(alpha=0.3)
    if finals:  # none when every run diverged
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, title="rule")
    fig.tight_layout()
    with writing(paths[1]):
        fig.savefig(paths[1], dpi=110, bbox_inches="tight")
    return paths


def parse_rules(text: str) -> Sequence[str]:
    rules = [r.strip() for r in text.split(",") if r.strip()]
    if not rules:
        raise ValueError("--compare needs at least one rule name")
    if len(set(rules)) != len(rules):
        raise ValueError(f"--compare lists a rule twice: {text}")
    return rules
