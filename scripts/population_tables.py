"""Prints a table of docs/populations.md, "What it shows", from the sweeps that section shows.

    python scripts/population_tables.py deadlines    # 3 sweeps: wait for all, deadline, over tiers
    python scripts/population_tables.py restricted   # 1 sweep: the rare tier of Fed-CVaR-Avg

Each sweep runs as its ``fastfair sweep`` command in a scratch folder; the table is its final
round, mean ± half-width of the 95 % t interval over the seeds, and differences paired on seeds
(``python scripts/doc_outputs.py population-deadlines population-restricted`` writes both into
the docs; under a minute each on one core).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from fastfair.sim.reporting.stats import mean_ci, paired_difference

TIERS = ("--dataset", "grouped", "--groups", "3", "--group-power", "0", "--clients", "60",
         "--per-round", "10", "--rounds", "60", "--eval-every", "20", "--population", "devices",
         "--population-option", "tier_by_group=true", "--seeds", "0,1,2")
DEADLINE = ("--policy", "deadline", "--over-select", "0.5", "--deadline", "4")
#: The deadline sweeps: (label, arguments, rules shown).
DEADLINES = (
    ("wait for all", (*TIERS, "--policy", "all", "--compare", "fedavg,afl,term,qfedavg,fedcvar"),
     ("fedavg", "fedcvar")),
    ("deadline", (*TIERS, *DEADLINE, "--compare", "fedavg,afl,term,qfedavg,fedcvar"),
     ("fedavg", "afl", "term", "qfedavg", "fedcvar")),
    ("deadline, over tiers", (*TIERS, *DEADLINE, "--compare", "fedavg,afl,term,qfedavg",
                              "--fair-over", "groups"),
     ("fedavg", "afl", "term", "qfedavg")))
RESTRICTED = ("--dataset", "grouped", "--groups", "2", "--group-power", "2", "--clients", "60",
              "--per-round", "2", "--rounds", "300", "--eval-every", "100", "--population",
              "examples/populations/rare_tiers.csv", "--population-option", "tier_by_group=true",
              "--population-option", "process=bernoulli", "--population-option",
              "online_probs=[0.9,0.1]", "--compare", "fedavg,fedcvar", "--seeds", "0,1,2")

Runs = Dict[str, Dict[int, Dict[str, float]]]


def sweep(args: Sequence[str], tmp: Path, name: str) -> Runs:
    """``{rule: {seed: final metrics}}`` of ``fastfair sweep ARGS`` run in ``tmp``."""
    root = Path(__file__).resolve().parent.parent
    args = [str(root / a) if a.startswith("examples/") else a for a in args]
    subprocess.run([sys.executable, "-m", "fastfair", "sweep", *args, "--quiet", "--out",
                    str(tmp / name)], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
    runs: Runs = {}
    with open(tmp / name / "sweep_runs.csv", newline="") as f:
        for row in csv.DictReader(f):
            runs.setdefault(row["point"], {})[int(row["seed"])] = {
                k: float(v) for k, v in row.items() if k not in ("rule", "point", "options")
                and v}
    return runs


def interval(values: Dict[int, Dict[str, float]], metric: str, digits: int = 3) -> str:
    mean, half = mean_ci([values[s][metric] for s in sorted(values)])
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def difference(values: Dict[int, Dict[str, float]], base: Dict[int, Dict[str, float]],
               metric: str) -> str:
    mean, half, _ = paired_difference({s: v[metric] for s, v in values.items()},
                                      {s: v[metric] for s, v in base.items()})
    return "0" if values is base else f"{mean:+.3f} ± {half:.3f}"


def row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def deadlines(tmp: Path) -> List[str]:
    runs: List[Tuple[str, Runs, Sequence[str]]] = [
        (label, sweep(args, tmp, f"s{i}"), rules)
        for i, (label, args, rules) in enumerate(DEADLINES)]
    base = runs[1][1]["fedavg"]
    lines = [row(("run", "mean acc", "low-tier acc", "low-tier kept", "high-tier kept",
                  "virtual s", "wasted", "Δ low-tier acc", "Δ mean acc")),
             "|---" * 9 + "|"]
    for label, points, rules in runs:
        for rule in rules:
            v = points[rule]
            lines.append(row((f"{label}, {rule}", interval(v, "acc_mean"),
                              interval(v, "acc_group0"), interval(v, "participation_tier0"),
                              interval(v, "participation_tier2"),
                              interval(v, "virtual_time", 1), interval(v, "wasted_share"),
                              difference(v, base, "acc_group0"),
                              difference(v, base, "acc_mean"))))
    return lines


def restricted(tmp: Path) -> List[str]:
    points = sweep(RESTRICTED, tmp, "restricted")
    metrics = ("acc_mean", "acc_group0", "acc_group1", "acc_worst10")
    lines = [row(("rule", "mean acc", "frequent-tier acc", "rare-tier acc", "worst 10 %")),
             "|---" * 5 + "|"]
    for rule in ("fedavg", "fedcvar"):
        lines.append(row((rule, *(interval(points[rule], m) for m in metrics))))
    lines.append(row(("fedcvar - fedavg, paired on seeds",
                      *(difference(points["fedcvar"], points["fedavg"], m) for m in metrics))))
    return lines


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/population_tables.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("table", choices=("deadlines", "restricted"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="population-tables-") as tmp:
        lines = (deadlines if args.table == "deadlines" else restricted)(Path(tmp))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
