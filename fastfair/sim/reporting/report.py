"""What a simulation leaves behind: metrics as CSV and JSON, a side-by-side summary table, and
PNG plots of fairness over rounds and of the final per-client accuracy distribution."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from fastfair.sim.checkpoint import writing

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
    A failed write (a full disk) raises :class:`~fastfair.sim.checkpoint.FileWriteError`
    naming the file."""
    rows = [{"rule": rule, **rec} for rule, hist in histories.items() for rec in hist]
    columns: List[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    with writing(out / "metrics.csv"), open(out / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    text = json.dumps(histories, indent=1)
    with writing(out / "metrics.json"), open(out / "metrics.json", "w") as f:
        f.write(text)


def write_final_accuracy(out: Path, finals: Dict[str, np.ndarray], client_ids: np.ndarray) -> None:
    """``final_accuracy.csv``: the final per-client test accuracy of every rule."""
    rules = list(finals)
    with writing(out / "final_accuracy.csv"), \
            open(out / "final_accuracy.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["client", *rules])
        for k, cid in enumerate(client_ids):
            writer.writerow([int(cid), *[f"{finals[r][k]:.6g}" for r in rules]])


def summarize(histories: Dict[str, List[dict]], seconds: Dict[str, float]) -> Dict[str, dict]:
    """Per rule: the metrics of its last evaluated round, the lag-1 autocorrelation of its mean
    accuracy series (higher: smoother progress) and its wall time."""
    from fastfair.sim.reporting.metrics import acf

    out = {}
    for rule, hist in histories.items():
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
    """The summary side by side (accuracies in %, AUROC x 100)."""
    columns = SUMMARY_COLUMNS + [c for c in GROUP_COLUMNS + AUROC_COLUMNS
                                 if summary and all(c[0] in row for row in summary.values())]
    header = (f"{'rule':<12}" + "".join(f"{label:>11}" for _, label in columns)
              + f"{'ACF(1)':>8}{'time':>9}")
    lines = [header, "-" * len(header)]
    for rule, row in summary.items():
        cells = []
        for key, _ in columns:
            if key in ("acc_gini", "acc_gini_groups"):
                cells.append(f"{row[key]:>11.3f}")
            else:
                scale = 1e4 if key == "acc_variance" else 100.0
                cells.append(f"{row[key] * scale:>11.2f}")
        lines.append(f"{rule:<12}" + "".join(cells) + f"{row['acc_mean_acf1']:>8.2f}"
                     + f"{row['seconds']:>8.1f}s")
    lines.append("(accuracy columns in %, variance in %^2, ACF(1) of the mean-accuracy series, "
                 "time = wall seconds of the run"
                 + (", AUROC x 100)" if any(k == "auroc_mean" for k, _ in columns) else ")"))
    return "\n".join(lines)


def plot(out: Path, histories: Dict[str, List[dict]], finals: Dict[str, np.ndarray],
         title: str) -> List[Path]:
    """``fairness.png`` (mean, worst-10% and, with groups, worst-group accuracy; Gini over
    rounds) and
    ``final_accuracy.png`` (distribution of final per-client accuracy); returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for rule, hist in histories.items():
        evals = [r for r in hist if "acc_mean" in r]
        rounds = [r["round"] for r in evals]
        line, = axes[0].plot(rounds, [100 * r["acc_mean"] for r in evals], label=f"{rule} mean")
        axes[0].plot(rounds, [100 * r["acc_worst10"] for r in evals], "--", color=line.get_color(),
                     label=f"{rule} worst 10%")
        if evals and "acc_worst_group" in evals[-1]:
            axes[0].plot(rounds, [100 * r["acc_worst_group"] for r in evals], ":",
                         color=line.get_color(), label=f"{rule} worst group")
        axes[1].plot(rounds, [r["acc_gini"] for r in evals], color=line.get_color(), label=rule)
    axes[0].set(xlabel="round", ylabel="test accuracy (%)", title="mean and worst-10% clients")
    axes[1].set(xlabel="round", ylabel="Gini of client accuracy", title="inequality across clients")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    paths = [out / "fairness.png", out / "final_accuracy.png"]
    try:
        with writing(paths[0]):
            fig.savefig(paths[0], dpi=110)
    finally:
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    bins = np.linspace(0, 100, 21).tolist()  # a list: matplotlib's bins type
    for rule, acc in finals.items():
        ax.hist(100 * acc, bins=bins, histtype="step", linewidth=2, label=rule)
    ax.set(xlabel="final test accuracy of a client (%)", ylabel="clients",
           title="distribution of client accuracy after the last round")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        with writing(paths[1]):
            fig.savefig(paths[1], dpi=110)
    finally:
        plt.close(fig)
    return paths


def parse_rules(text: str) -> Sequence[str]:
    rules = [r.strip() for r in text.split(",") if r.strip()]
    if not rules:
        raise ValueError("--compare needs at least one rule name")
    if len(set(rules)) != len(rules):
        raise ValueError(f"--compare lists a rule twice: {text}")
    return rules
