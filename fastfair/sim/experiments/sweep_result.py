"""What a sweep returns (:class:`SweepResult`) and the names of its runs (:func:`run_name`),
apart from the sweep that runs them (:mod:`.sweep`) so that reading a folder back
(:mod:`.loading`) needs no sweep."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from fastfair.sim.reporting import sweep_report, tidy
from fastfair.sim.reporting.stats import SummaryRow, SweepRun


def run_name(point: str, seed: int) -> str:
    """The name of the run of grid point ``point`` with ``seed``."""
    return f"{point}/seed{seed}"



@dataclass(repr=False)
class SweepResult:
    """What a sweep produced: every run (:class:`~fastfair.sim.reporting.stats.SweepRun`), the grid
    point chosen per rule on the validation split (``selection``), the summary rows (mean and
    95 % CI over seeds, paired differences against ``baseline``), the wall time, the output
    folder (None when nothing was written) and every run's final global model.

    ``models`` maps each run's name
    (:attr:`~fastfair.sim.experiments.sweep.RunSpec.name`, e.g. ``"fedavg/seed0"`` or
    ``"term(tilt=1.0)/seed2"``) to its final global model as
    :meth:`~fastfair.sim.rounds.runner.Runner.global_state_dict` gives it (CPU tensors; a
    :class:`~fastfair.sim.models.module.ModuleModel`'s own module ``state_dict``, ready for
    ``module.load_state_dict``). The output folder holds the same as ``models.pt``
    (``torch.load(path, weights_only=True)`` reads it). ``eval_ids`` maps each seed to the ids
    of the clients its runs' ``final`` accuracies are of.

    Accuracies are fractions in [0, 1] here as in every file and table.
    :func:`~fastfair.sim.experiments.loading.load_run` reads one back from its folder;
    :meth:`to_pandas` gives a tidy table; a notebook displays the summary rows."""

    runs: List[SweepRun]
    selection: Dict[str, Dict[str, Any]]
    rows: List[SummaryRow]
    metrics: Tuple[str, ...]
    baseline: Optional[str]
    seconds: float
    out: Optional[Path]
    models: Dict[str, Dict[str, torch.Tensor]] = dataclasses.field(default_factory=dict)
    eval_ids: Dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    def table(self, width: Optional[int] = None) -> str:
        """The summary as ``fastfair sweep`` prints it (``width``: split into blocks of
        columns that fit it; ``fastfair sweep`` passes the terminal's)."""
        return sweep_report.sweep_table(self.rows, self.metrics, self.baseline, width)

    def _runs(self) -> List[tidy.Run]:
        return [({"run": run_name(run.point, run.seed), "rule": run.rule, "point": run.point,
                  "seed": run.seed}, run.history, run.final,
                 self.eval_ids.get(run.seed, np.zeros(0, dtype=np.int64)))
                for run in self.runs]

    def to_records(self, kind: str = "rounds") -> List[Dict[str, Any]]:
        """The results as tidy records (plain dicts; :mod:`~fastfair.sim.reporting.tidy`).

        Parameters
        ----------
        kind
            ``"rounds"``: one record per run x round x metric (``run``, ``rule``, ``point``,
            ``seed``, ``round``, ``metric``, ``value``); ``"clients"``: one per run x
            evaluation client (``run``, ``rule``, ``point``, ``seed``, ``client``,
            ``accuracy``: its final test accuracy).

        Returns
        -------
        list of dict
            The rows, runs in order, then rounds, then metrics as recorded.
        """
        return tidy.records(self._runs(), kind)

    def to_pandas(self, kind: str = "rounds") -> Any:
        """:meth:`to_records` as a ``pandas.DataFrame`` (needs pandas: ``pip install pandas``).
        ``df[df.metric == "acc_mean"].groupby(["point", "round"]).value.mean()`` gives the
        mean curve of every grid point over its seeds."""
        return tidy.to_pandas(self.to_records(kind))

    def __repr__(self) -> str:
        rules = list(dict.fromkeys(run.rule for run in self.runs))
        seeds = sorted({run.seed for run in self.runs})
        out = None if self.out is None else str(self.out)
        return (f"SweepResult(runs={len(self.runs)}, rules={rules}, seeds={seeds}, "
                f"baseline={self.baseline!r}, out={out!r})")

    def _repr_html_(self) -> str:
        body = [[("* " if row.selected else "") + row.point, row.n,
                 *(row.values[m][k] for m in self.metrics for k in (0, 1))]
                for row in self.rows]
        header = ["point", "n", *(f"{sweep_report.label(m)} {what}" for m in self.metrics
                                  for what in ("mean", f"± {sweep_report.CONFIDENCE:.0%} CI"))]
        return tidy.html_table(header, body, f"{self!r} (accuracies as fractions; *: chosen "
                               "on the validation split)")
