"""Regenerates docs/fidelity.md: every rule against FedAvg and FairAvg over seeds, on each workload,
beside what its paper claims, with a verdict computed from the paired differences.

    python scripts/fidelity.py --seeds 5 --out docs/fidelity.md      # about 10 minutes on 2 cores

Each workload is one ``fastfair.sim.Sweep`` (all rules x seeds as one batched program); the
verdict of a row compares the rule with FedAvg on the metric its paper claims to improve:
*reproduced* when the paired difference has the claimed sign and its 95 % interval excludes 0
while mean accuracy does not drop beyond its own interval, *partly* when the sign is right but
the interval includes 0 (or mean accuracy drops), *not reproduced* when the sign is wrong and its
interval excludes 0, *inconclusive* otherwise.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from fastfair.sim import SimulationConfig, Sweep
from fastfair.sim.reporting.stats import SummaryRow, summarize

CROSS_DEVICE = ["fedavg", "fairavg", "fedprox", "aaggff-d", "fedmaba", "fedcvar", "qfedavg", "term",
                "afl", "propfair", "fedmgda"]
METRICS = ("acc_mean", "acc_worst10", "acc_gini", "acc_variance")

#: Per rule: the metric its paper claims it improves over FedAvg, the claim in words and where.
CLAIMS: Dict[str, Tuple[str, str]] = {
    "fairavg": ("acc_gini", "uniform client weights spread accuracy more evenly than FedAvg's "
                            "sample-size weights (FairAvg vs FedAvg)"),
    "fedprox": ("acc_mean", "the proximal term stabilises training on heterogeneous clients "
                            "(FedProx; no fairness claim)"),
    "aaggff-d": ("acc_worst10", "better worst-client accuracy and lower disparity than FedAvg "
                                "at similar mean accuracy, cross-device (AAggFF)"),
    "aaggff-s": ("acc_worst10", "better worst-client accuracy and lower disparity than FedAvg "
                                "at similar mean accuracy, cross-silo (AAggFF)"),
    "fedmaba": ("acc_variance", "lower variance of client accuracy than FedAvg at similar mean "
                                "accuracy (FedMABA)"),
    "fedcvar": ("acc_worst10", "a better tail (CVaR) of client losses under restricted "
                               "availability (Fed-CVaR-Avg)"),
    "qfedavg": ("acc_variance", "lower variance of client accuracy, better worst 10 % "
                                "(q-FFL / q-FedAvg)"),
    "term": ("acc_worst10", "a positive tilt improves the worst clients (TERM)"),
    "afl": ("acc_worst10", "optimises the worst mixture of clients (agnostic FL)"),
    "propfair": ("acc_worst10", "better worst-10 % accuracy at similar mean (PropFair)"),
    "fedmgda": ("acc_worst10", "no client's loss worsens: a fairer spread than FedAvg "
                               "(FedMGDA+)"),
}


def write_digits_clients(root: Path, clients: int) -> None:
    """scikit-learn's digits (pixels / 16), split over ``clients`` by Dirichlet(0.3), written as
    ``root/client_<k>.npz`` (x, y, x_test, y_test: each client's first 80 % to train)."""
    from sklearn.datasets import load_digits

    from fastfair.sim.data.arrays import partition_labels

    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    for k, rows in enumerate(partition_labels(y, clients, "dirichlet", seed=0, alpha=0.3)):
        cut = max(1, int(round(0.8 * len(rows))))
        np.savez(root / f"client_{k:03d}.npz", x=x[rows[:cut]], y=y[rows[:cut]],
                 x_test=x[rows[cut:]], y_test=y[rows[cut:]])


def workloads(fixture_dir: Path) -> Dict[str, Tuple[SimulationConfig, List[str], str]]:
    """The fidelity table's workloads: configuration, rules and a description."""
    write_digits_clients(fixture_dir, clients=50)
    return {
        "synthetic": (SimulationConfig(), CROSS_DEVICE,
                      "Synthetic(1, 1), K = 100, m = 10, 200 rounds, logistic regression"),
        "digits": (SimulationConfig(dataset="digits"), CROSS_DEVICE,
                   "scikit-learn digits, Dirichlet(0.3) over K = 100, m = 10, 200 rounds, "
                   "logistic regression"),
        "cross-silo": (SimulationConfig(clients=10, per_round=10), ["aaggff-s"] + CROSS_DEVICE,
                       "Synthetic(1, 1), K = 10, every client every round, 200 rounds"),
        "grouped": (SimulationConfig(dataset="grouped", clients=1_000_000, per_round=1000,
                                     rounds=100, eval_clients=1000), CROSS_DEVICE,
                    "the million-client grouped workload, m = 1000, 100 rounds"),
        "npz-files": (SimulationConfig(dataset="npz-clients", data_dir=str(fixture_dir),
                                       clients=50, per_round=10), CROSS_DEVICE,
                      "digits written as per-client .npz files (the on-disk path), K = 50, "
                      "m = 10, 200 rounds, MLP"),
    }


def verdict(row: SummaryRow, metric: str) -> str:
    """The verdict of ``row`` on ``metric`` (module docstring)."""
    diff, half = row.differences.get(metric, (math.nan, math.nan))
    if math.isnan(diff):
        return "n/a"
    sign = -1.0 if metric in ("acc_gini", "acc_variance") else 1.0
    d = sign * diff
    sure = not math.isnan(half) and abs(diff) > half
    mean_diff, mean_half = row.differences["acc_mean"]
    mean_drops = metric != "acc_mean" and mean_diff < 0 and abs(mean_diff) > mean_half
    if d > 0 and sure and not mean_drops:
        return "reproduced"
    if d > 0:
        return "partly"
    return "not reproduced" if sure else "inconclusive"


def _cell(pair, metric: str, signed: bool = False) -> str:
    mean, half = pair
    scale = 1.0 if metric == "acc_gini" else (1e4 if metric == "acc_variance" else 100.0)
    digits = 3 if scale == 1.0 else 1
    text = f"{mean * scale:{'+' if signed else ''}.{digits}f}"
    return text if math.isnan(half) else f"{text} ± {half * scale:.{digits}f}"


def table(rows: List[SummaryRow], against_fairavg: List[SummaryRow]) -> List[str]:
    """The markdown rows of one workload: values, paired differences to FedAvg (``rows``) and
    to FairAvg (``against_fairavg``, the same runs summarised against it), claim, verdict."""
    lines = ["| rule | mean acc | worst 10 % | Gini | variance | Δ mean | Δ worst 10 % | Δ Gini "
             "| Δ worst 10 % vs FairAvg | claim (metric) | verdict |", "|" + "---|" * 11]
    for row, other in zip(rows, against_fairavg):
        claim = CLAIMS.get(row.rule)
        cells = [_cell(row.values[m], m) for m in METRICS]
        diffs = ([_cell(row.differences[m], m, True) for m in METRICS[:3]] if row.differences
                 else ["baseline"] * 3)
        diffs.append(_cell(other.differences["acc_worst10"], "acc_worst10", True)
                     if other.differences else "baseline")
        said = f"{claim[1]} (`{claim[0]}`)" if claim else "the baseline"
        result = verdict(row, claim[0]) if claim and row.differences else ""
        lines.append(f"| {row.point} | " + " | ".join(cells + diffs) + f" | {said} | {result} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("docs/fidelity.md"))
    parser.add_argument("--only", help="comma list of workloads (default: all)")
    args = parser.parse_args(argv)
    seeds = list(range(args.seeds))
    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        chosen = workloads(Path(tmp))
        names = args.only.split(",") if args.only else list(chosen)
        for name in names:
            config, rules, what = chosen[name]
            started = time.perf_counter()
            # q-FFL sets its Lipschitz constant to 1 / the client learning rate (the rule's own
            # default, 1, cannot know the rate).
            options = {"qfedavg": {"lipschitz": 1.0 / config.lr}}
            result = Sweep(config, rules, seeds, rule_options=options, baseline="fedavg",
                           metrics=METRICS).run()
            seconds = time.perf_counter() - started
            print(f"{name}: {len(result.runs)} runs in {seconds:.0f} s", file=sys.stderr)
            fair = summarize(result.runs, METRICS, "fairavg", result.selection)
            sections += [f"## {name}", "", f"{what}; seeds {seeds[0]}-{seeds[-1]}, "
                         f"{len(result.runs)} runs in {seconds:.0f} s.", "",
                         *table(result.rows, fair), ""]
    args.out.write_text("\n".join(HEADER + sections + NOTES))
    return 0


HEADER = ["# Fidelity: what each rule does here, against what its paper claims", "",
          "Generated by `python scripts/fidelity.py --seeds 5 --out docs/fidelity.md` "
          "(do not edit by hand). Accuracies in %, variance in %^2; mean ± half-width of the "
          "95 % Student-t interval over seeds; Δ: difference to FedAvg paired on seeds "
          "(docs/sweeps.md §3). The verdict compares the rule with FedAvg on the metric its "
          "paper claims to improve (scripts/fidelity.py says how).", ""]

NOTES = ["## Notes", "",
         "- **AAggFF-S** (cross-silo): every published setting (the thesis' range (0, 3) with "
         "its eq. 3.7, the authors' range (0, 1/K) with their objective) drifts towards the "
         "client with the largest cumulative response and lost 9-17 points of mean accuracy to "
         "FedAvg over 200 rounds (seeds 0-9, docs/algorithms.md §2.4.4); the default "
         "regulariser is therefore 64x Theorem 3.1's (`alpha_scale`), which keeps mean "
         "accuracy (-0.2 ± 1.5 points over seeds 0-9) and behaves like FairAvg with a lean at "
         "200 rounds; its fairness gain shows in longer runs (500 rounds: worst 10 % 40.7 -> "
         "51.2 %).",
         "- **AAggFF-D** hardly moves off uniform weights at these horizons: its rows track "
         "FairAvg's (the `Δ worst 10 % vs FairAvg` column).",
         "- **q-FedAvg** runs with the q-FFL paper's Lipschitz constant 1/lr (10 here); the "
         "rule's default, 1, is a placeholder the rule cannot set itself.",
         "- **TERM**'s default tilt 0.1 (the TERM and AAggFF authors' setting) is close to "
         "FedAvg by design; larger tilts trade mean accuracy for the worst clients "
         "(`fastfair sweep --grid term:tilt=0.1,1,10 --validation 0.2` chooses one).",
         "- **Fed-CVaR-Avg** runs the paper's alpha = gamma = 0.1 and threshold rate 0.05 x the "
         "client's; the paper's client rate is 0.01, and at the simulator's 0.1 a high-loss "
         "batch steps at 9.1x it, which hurts (docs/algorithms.md §6.3.1). Its claim is about "
         "restricted availability, which these uniform-availability workloads do not have.",
         "- **FedMGDA**'s normalising norm is floored at 1 % of the cohort's largest update "
         "(`norm_floor`), so near-zero updates no longer get coefficients of 1e5-1e8.",
         "- **PropFair** runs its authors' code defaults (M = 2, the Huber continuation past "
         "M - epsilon).",
         "- **npz-files** reads digits through the on-disk per-client `.npz` path; it checks the "
         "file path with real data, not a paper's setting.", ""]

if __name__ == "__main__":
    sys.exit(main())
