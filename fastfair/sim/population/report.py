"""What a population run reports beyond the rounds' records: each client's kept rounds
(``participation_<rule>.csv``) and the tiers side by side (:func:`tier_table`)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from fastfair._files import atomic
from fastfair.sim import run_files
from fastfair.sim.population.keys import TierKey, tiers_recorded


def write_participation(out: Path, rule: str, availability: Any) -> None:
    """``participation_<rule>.csv`` (``client, tier, rounds``: every client kept at least once
    and its kept rounds) where ``availability`` counted them (a population with
    ``track_participation``); nothing otherwise."""
    if not getattr(availability, "track_participation", False):
        return
    ids, rounds = availability.participation()
    tiers = availability.population.tier(ids)
    path = Path(out) / run_files.participation(rule)
    with atomic(path, text=True) as f:
        writer = csv.writer(f)
        writer.writerow(["client", "tier", "rounds"])
        writer.writerows(zip(ids.tolist(), tiers.tolist(), rounds.tolist()))


def tier_table(histories: Dict[str, List[Dict[str, Any]]]) -> str:
    """Per rule, the last round's virtual time and, per tier g, the mean accuracy of its
    evaluation clients (``acc_group{g}``, where the tiers are the groups), its participation
    rate and wasted share; empty when the runs have no population."""
    lines: List[str] = []
    for rule, history in histories.items():
        if not history or "virtual_time" not in history[-1]:
            continue
        last = history[-1]
        evaluated = [r for r in history if "acc_mean" in r]
        tiers = tiers_recorded(last)
        if not lines:
            lines += [f"{'rule':<12}{'hours':>8}{'tier':>6}{'acc':>8}{'kept':>8}"
                      f"{'wasted':>10}"]
        for g in tiers:
            acc = evaluated[-1].get(f"acc_group{g}", np.nan) if evaluated else np.nan
            hours = f"{last['virtual_time'] / 3600:.2f}" if g == tiers[0] else ""
            kept = last[str(TierKey("participation", g))]
            wasted = last[str(TierKey("wasted_share", g))]
            lines.append(f"{rule if g == tiers[0] else '':<12}{hours:>8}{g:>6}"
                         f"{acc:>8.3f}{kept:>8.3f}{wasted:>10.3f}")
    if lines:
        lines.append("(hours of virtual time; acc: the tier's evaluation clients' mean accuracy "
                     "where the tiers are the groups; kept: the share of rounds a client of the "
                     "tier was kept; wasted: its work lost to dropouts and lateness; all three "
                     "as fractions in [0, 1])")
    return "\n".join(lines)


def population_metrics(histories: Sequence[List[Dict[str, Any]]],
                       metrics: Sequence[str]) -> Tuple[str, ...]:
    """The population's metrics every one of ``histories`` recorded and ``metrics`` lacks:
    ``virtual_time``, ``wasted_share`` and, per tier g, ``acc_group{g}`` (its accuracy where
    the tiers are the groups) and ``participation_tier{g}``; none for runs without a
    population. (Each tier's wasted share stays in the round records.)"""
    if not histories or not all(h and "virtual_time" in h[-1] for h in histories):
        return ()
    last = histories[0][-1]
    names = ["virtual_time", "wasted_share"]
    for g in tiers_recorded(last):
        names += [f"acc_group{g}", str(TierKey("participation", g))]
    return tuple(n for n in names if n not in metrics
                 and all(any(n in r for r in h) for h in histories))
