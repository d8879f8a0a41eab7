"""Prints (or writes into docs/aggregators.md) what one poisoning client does to a round under every
rule, without and with the opt-in bound of :mod:`fastfair.aggregators.bounds`.

    python scripts/poison_table.py                           # print the tables
    python scripts/poison_table.py --write docs/aggregators.md   # rewrite them between markers

The round: ten clients, 100 parameters, nine honest updates of norm about 0.1 and one 1000 times
larger whose client reports a high loss (3 against 0.5 to 1.5), 100 samples each. Each cell is the
norm of the global step ``sum_i c_i s_i X_i`` with lr = 1, computed as the Flower strategy and the
simulator compute it: clip scales ``s_i`` from the update norms, the rule's coefficients ``c_i``
on the clipped updates and capped counts. The second table is the count claim alone: honest
updates, one client reporting ``num-examples`` 1e308, and the coefficient that client gets.
tests/aggregators/test_bounds.py checks that the docs hold what this prints.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from fastfair.aggregators import registry
from fastfair.aggregators.bounds import UpdateBound

#: Every rule of the registry, in the order of the docs' rule table.
RULES = ["fedavg", "fairavg", "fedprox", "fedmaba", "fedcvar", "aaggff-d", "aaggff-s", "term",
         "afl", "propfair", "qfedavg", "fedmgda"]
POISON = 1000.0
CLAIM = 1e308
#: The bounds of the columns: the default (off), the two clips, the count cap, clip and cap.
BOUNDS: Dict[str, UpdateBound] = {
    "none": UpdateBound(),
    "median": UpdateBound(max_update_norm=3.0),
    "absolute": UpdateBound(max_update_norm=0.5, update_norm_reference="absolute"),
    "cap": UpdateBound(max_samples_per_client=1000),
    "both": UpdateBound(max_update_norm=3.0, max_samples_per_client=1000),
}
START, END = "<!-- poison-table: start -->", "<!-- poison-table: end -->"


def poisoned_round(poison: float = POISON, claim: float = 100.0,
                   seed: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(updates [10, 100], losses [10], counts [10])``: nine honest updates of norm about 0.1
    and the last ``poison`` times larger, its client reporting loss 3 and ``claim`` samples."""
    rng = np.random.default_rng(seed)
    updates = 0.01 * rng.standard_normal((10, 100))
    updates[9] *= poison
    losses = np.concatenate([rng.uniform(0.5, 1.5, 9), [3.0]])
    counts = np.full(10, 100.0)
    counts[9] = claim
    return updates, losses, counts


def bounded_step(name: str, updates: np.ndarray, losses: np.ndarray, counts: np.ndarray,
                 bound: UpdateBound) -> Tuple[np.ndarray, np.ndarray]:
    """One round of rule ``name`` (a fresh rule over the ``m`` clients of ``updates [m, d]``)
    under ``bound``: ``(step [d], coefficients [m])`` with ``step = sum_i c_i s_i X_i``."""
    m = updates.shape[0]
    rule = registry.build(name, m)
    scales = bound.scales(np.linalg.norm(updates, axis=1))
    clipped = updates * scales[:, None]
    inputs = {"sq_norms": (clipped ** 2).sum(1), "updates": clipped, "thresholds": losses}
    coef = np.asarray(rule.weights(np.arange(m), losses, num_samples=bound.counts(counts),
                                   **{k: inputs[k] for k in rule.round_inputs}))
    return coef @ clipped, coef


def step_norm(name: str, bound: UpdateBound, poison: float = POISON,
              claim: float = 100.0) -> float:
    """The norm of the global step of :func:`poisoned_round` under ``bound``."""
    return float(np.linalg.norm(bounded_step(name, *poisoned_round(poison, claim), bound)[0]))


def claim_weight(name: str, bound: UpdateBound) -> float:
    """The coefficient of the client claiming 1e308 samples, all updates honest."""
    return float(bounded_step(name, *poisoned_round(1.0, CLAIM), bound)[1][9])


def tables() -> str:
    """Both markdown tables, as docs/aggregators.md holds them."""
    lines: List[str] = [
        "| rule | honest round | 1000x reply | 1000x, `max_update_norm=3` (median) "
        "| 1000x, `max_update_norm=0.5` (absolute) | 1000x claiming 1e308 samples "
        "| 1000x claiming 1e308, `max_samples_per_client=1000` | 1000x claiming 1e308, both |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in RULES:
        cells = [step_norm(name, BOUNDS["none"], poison=1.0), step_norm(name, BOUNDS["none"]),
                 step_norm(name, BOUNDS["median"]), step_norm(name, BOUNDS["absolute"]),
                 step_norm(name, BOUNDS["none"], claim=CLAIM),
                 step_norm(name, BOUNDS["cap"], claim=CLAIM),
                 step_norm(name, BOUNDS["both"], claim=CLAIM)]
        lines.append(f"| `{name}` | " + " | ".join(f"{v:.3g}" for v in cells) + " |")
    lines += ["", "| rule | coefficient of the 1e308 claim | with `max_samples_per_client=1000` |",
              "| --- | --- | --- |"]
    for name in RULES:
        cells = [claim_weight(name, BOUNDS["none"]), claim_weight(name, BOUNDS["cap"])]
        lines.append(f"| `{name}` | " + " | ".join(f"{v:.3g}" for v in cells) + " |")
    return "\n".join(lines)


def write(path: Path, text: str) -> None:
    """Replaces what lies between the markers of ``path`` with ``text``."""
    doc = path.read_text(encoding="utf-8")
    if START not in doc or END not in doc:
        sys.exit(f"{path}: add the markers {START} and {END} first")
    block = f"{START}\n{text}\n{END}"
    path.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, doc,
                           flags=re.S), encoding="utf-8")


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="MD",
                        help="rewrite the tables between the poison-table markers of MD")
    args = parser.parse_args(argv)
    text = tables()
    if args.write is not None:
        write(args.write, text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
