"""One column of a table (:mod:`fastfair.reproduce.run`): its sweep run, continued from its
checkpoint or read back when a resumed table finished it, and the log line that starts it with
the time the table has left."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from fastfair.reproduce.prepare import build_split
from fastfair.reproduce.table import Column, TableSpec
from fastfair.sim import run_files

LOG = logging.getLogger("fastfair")


def run_column(spec: TableSpec, column: Column, run: Any, config: Any, folder: Optional[str],
               out: Path, progress: bool, threads: Optional[int], checkpoint_every: int,
               resume: bool) -> Tuple[Any, bool]:
    """The sweep result of one column in its folder ``out``, and whether this call ran any of
    it: read back where a resumed table finished it, continued from its checkpoint, else run
    (afresh: a folder left without a checkpoint is emptied first)."""
    from fastfair.sim.experiments.loading import load_run
    from fastfair.sim.experiments.sweep import CONFIG, Sweep

    if resume and (out / run_files.SWEEP_SUMMARY_JSON).exists():
        return load_run(out), False
    if resume and (out / run_files.CHECKPOINT).exists():
        return Sweep.resume(out, progress=progress, threads=threads).run(), True
    if resume and (out / CONFIG).exists():
        shutil.rmtree(out)  # a column stopped before its first checkpoint: run it again
    dataset = None
    if column.prepare is not None:
        options = dict(column.prepare)
        dataset = build_split(options.pop("split"), str(folder), options)
    sweep = Sweep(config, run.rules or [], spec.seeds,
                  rule_options=run.run.get("rule_options", {}), baseline=spec.baseline,
                  metrics=(spec.metric, *spec.also), out=out, progress=progress,
                  dataset=dataset, threads=threads, checkpoint_every=checkpoint_every)
    try:
        return sweep.run(), True
    except ValueError as exc:   # the table and column the refusal is about
        raise ValueError(f"table file {spec.path} (column {column.name!r}): {exc}") from None


def log_column(i: int, plans: Sequence[Any], work: Sequence[int],
               spent: Sequence[Tuple[float, int]]) -> None:
    """Logs the start of column ``i`` of ``plans`` (``(column, run file, config, data folder)``
    each, their work ``runs x rounds`` in ``work``; ``spent``: ``(seconds, work)`` of the columns
    run so far) with its runs and rounds and, once this call has run a
    column, the time left for the table, from the seconds per run-round of those."""
    column, run, config, _ = plans[i]
    line = (f"column {i + 1} of {len(plans)}: {column.name} ({len(run.rules or [])} rules x "
            f"{work[i] // max(1, len(run.rules or [])) // config.rounds} seeds x "
            f"{config.rounds} rounds)")
    done = sum(w for _, w in spent)
    if done:
        rate = sum(s for s, _ in spent) / done
        line += (f"; about {duration(rate * work[i])} for it, "
                 f"{duration(rate * sum(work[i:]))} for the table")
    LOG.info("%s", line)


def duration(seconds: float) -> str:
    """``seconds`` for a log line: ``"42 s"``, or ``"17 min"`` from two minutes on."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
