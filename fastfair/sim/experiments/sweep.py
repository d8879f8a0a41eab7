"""Sweeps: every rule x hyperparameter grid point x seed, run as one batched program, with the
statistics that say which rule is fairer and by how much beyond seed noise.

.. code-block:: python

    from fastfair.sim import SimulationConfig, Sweep

    result = Sweep(SimulationConfig(validation=0.2), rules=["fedavg", "term", "qfedavg"],
                   seeds=[0, 1, 2], grid={"term": {"tilt": [0.1, 1.0]}},
                   baseline="fedavg").run()
    print(result.table())

Runs of the same seed share the data set, the initial model and every round's client sample,
so differences between rules on one seed are paired. Every rule's runs (all grid points and
seeds) train their cohorts together: one :func:`~fastfair.sim.rounds.engine.play_round` per round for
all of them, each run with its own global model, rule, server optimiser and keys, and each run's
records equal to the same run alone. Methods (FedEvg, SuPerFed) run one after another on the
same data sets. ``fastfair sweep`` is the command-line layer over this class.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.data.catalog import build_dataset
from fastfair.sim.distributed import Distributed
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.process import run_tuned
from fastfair.sim.reporting import report, sweep_report
from fastfair.sim.reporting.stats import SummaryRow, SweepRun, point_label, select, summarize
from fastfair.sim.rounds.engine import Simulation, evaluate_runs, play_round, with_validation
from fastfair.sim.rounds.registry import make_runner, runner_class
from fastfair.sim.rounds.runner import Runner

#: The metrics a sweep summarises by default (accuracy columns of the simulate table).
METRICS = ("acc_mean", "acc_worst10", "acc_gini", "acc_variance")
CONFIG = "sweep.json"
GROUP_METRIC = "acc_worst_group"


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: a rule, the options of its grid point and a seed."""

    rule: str
    options: Tuple[Tuple[str, Any], ...]
    seed: int

    @property
    def name(self) -> str:
        """``rule(opt=value,...)/seed<s>``: the run's name in logs and callbacks."""
        return run_name(point_label(self.rule, dict(self.options)), self.seed)


def run_name(point: str, seed: int) -> str:
    """The name of the run of grid point ``point`` with ``seed``."""
    return f"{point}/seed{seed}"


def grid_points(rule: str, fixed: Mapping[str, Any],
                grid: Mapping[str, Sequence[Any]]) -> List[Dict[str, Any]]:
    """The option sets of ``rule``: ``fixed`` options with every combination of the ``grid``
    values (``{option: [v1, v2, ...]}``, in the given order); ``[fixed]`` without a grid."""
    for name, values in grid.items():
        if name in fixed:
            raise ValueError(f"{rule}: option {name!r} is both fixed and on the grid")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"grid of {rule}: {name} needs a non-empty list of values; got "
                             f"{values!r}")
    names = list(grid)
    return [{**fixed, **dict(zip(names, combo))}
            for combo in itertools.product(*(grid[n] for n in names))]


@dataclass
class SweepResult:
    """What a sweep produced: every run (:class:`~fastfair.sim.reporting.stats.SweepRun`), the grid
    point chosen per rule on the validation split (``selection``), the summary rows (mean and
    95 % CI over seeds, paired differences against ``baseline``), the wall time and the output
    folder (None when nothing was written)."""

    runs: List[SweepRun]
    selection: Dict[str, Dict[str, Any]]
    rows: List[SummaryRow]
    metrics: Tuple[str, ...]
    baseline: Optional[str]
    seconds: float
    out: Optional[Path]

    def table(self) -> str:
        """The summary as ``fastfair sweep`` prints it."""
        return sweep_report.sweep_table(self.rows, self.metrics, self.baseline)


class Sweep:
    """Runs ``rules`` x grid points x ``seeds`` from one configuration.

    Parameters
    ----------
    config
        The shared configuration (its ``seed``, ``rule`` and ``rule_options`` are replaced per
        run). With ``validation`` > 0, every run holds out that fraction of each client's
        training samples and the grid point of each rule is chosen on it.
    rules
        Rule and method names.
    seeds
        Seeds; runs of one seed share data, initial model and client samples.
    grid
        ``{rule: {option: [values]}}``: every combination is a grid point of the rule.
    rule_options
        ``{rule: {option: value}}``: options fixed for every point of a rule.
    baseline
        The rule the paired differences are taken against (None: no differences).
    select
        The metric (without ``val_``) whose validation value picks each rule's grid point.
    metrics
        The metrics summarised.
    out
        Output folder (created; must be empty or absent); None writes nothing.
    progress
        A progress bar over rounds on standard error.
    callbacks
        :class:`~fastfair.sim.reporting.callbacks.RoundCallback` s that see every run's rounds, under the
        run's name (:attr:`RunSpec.name`).
    batched
        Train the runs of the rules together (default); False runs them one after another
        (the reference the batched program is compared with).
    dataset, model, dist, threads
        As for :class:`~fastfair.sim.experiments.experiment.Experiment` (``dataset`` is used for every
        seed).
    """

    def __init__(self, config: SimulationConfig, rules: Sequence[str],
                 seeds: Sequence[int] = (0,),
                 grid: Optional[Mapping[str, Mapping[str, Sequence[Any]]]] = None,
                 rule_options: Optional[Mapping[str, Mapping[str, Any]]] = None, *,
                 baseline: Optional[str] = None, select: str = "acc_mean",
                 metrics: Sequence[str] = METRICS, out: Union[str, Path, None] = None,
                 progress: bool = False, callbacks: Sequence[Any] = (),
                 batched: bool = True, dataset: Optional[FederatedDataset] = None,
                 model: Optional[FlatModel] = None, dist: Optional[Distributed] = None,
                 threads: Optional[int] = 1) -> None:
        rules, seeds = list(rules), list(seeds)
        if not rules or len(set(rules)) != len(rules):
            raise ValueError(f"rules must be distinct names, at least one; got {rules}")
        if not seeds or len(set(seeds)) != len(seeds) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise ValueError(f"seeds must be distinct integers >= 0, at least one; got {seeds}")
        grid, fixed = dict(grid or {}), dict(rule_options or {})
        for name, what in (("grid", grid), ("rule_options", fixed)):
            extra = sorted(set(what) - set(rules))
            if extra:
                raise ValueError(f"{name} names {', '.join(map(repr, extra))}, which is not run")
        if baseline is not None and baseline not in rules:
            raise ValueError(f"baseline {baseline!r} is not among the rules {rules}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise ValueError(f"threads must be an integer >= 1 or None; got {threads!r}")
        self.points = {r: grid_points(r, dict(fixed.get(r, {})), dict(grid.get(r, {})))
                       for r in rules}
        if any(len(p) > 1 for p in self.points.values()) and not config.validation:
            raise ValueError("a grid needs a validation split to choose its points on: set "
                             "validation (--validation), e.g. 0.2")
        self.specs = [RunSpec(r, tuple(sorted(o.items())), s)
                      for r in rules for o in self.points[r] for s in seeds]
        self.configs = {spec: dataclasses.replace(config, rule=spec.rule, seed=spec.seed,
                                                  rule_options=dict(spec.options))
                        for spec in self.specs}
        for cfg in self.configs.values():
            runner_class(cfg.rule).validate(cfg)
        self.base, self.rules, self.seeds = config, rules, seeds
        self.grid, self.fixed, self.baseline, self.select = grid, fixed, baseline, select
        self.metrics = tuple(metrics)
        self.out = None if out is None else Path(out)
        self.progress, self.callbacks, self.batched = progress, list(callbacks), batched
        self.dataset, self.model = dataset, model
        self.dist = dist or Distributed(device=torch.device(config.device))
        self.threads = threads

    def run(self) -> SweepResult:
        """Runs every run, then writes and returns the statistics."""
        return run_tuned(self.threads, self._run)

    def _run(self) -> SweepResult:
        lead = self.dist.rank == 0
        if lead and self.out is not None:
            if self.out.exists() and any(self.out.iterdir()):
                raise ValueError(f"out folder {self.out} is not empty; pick a new folder")
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / CONFIG).write_text(json.dumps(self._saved_config(), indent=1))
        started = time.perf_counter()
        datasets = {s: self._dataset(s) for s in self.seeds}
        finished: Dict[RunSpec, SweepRun] = {}
        try:
            batchable = [s for s in self.specs if runner_class(s.rule) is Simulation]
            groups = [batchable] if self.batched else [[s] for s in batchable]
            for group in groups:
                if group:
                    self._play_batched(group, datasets, finished)
            for spec in self.specs:
                if spec not in finished:
                    runner = make_runner(self.configs[spec], self.dist,
                                         dataset=datasets[spec.seed], model=self.model)
                    self._play_alone(spec, runner, finished)
        finally:
            for callback in self.callbacks:
                callback.close()
        runs = [finished[s] for s in self.specs]
        metrics = self.metrics
        if GROUP_METRIC not in metrics and all(_has(run, GROUP_METRIC) for run in runs):
            metrics += (GROUP_METRIC,)  # a data set with latent groups: its fairness target
        selection = select(runs, self.select)
        rows = summarize(runs, metrics, self.baseline, selection)
        seconds = time.perf_counter() - started
        result = SweepResult(runs, selection, rows, metrics, self.baseline, seconds,
                             self.out if lead else None)
        if lead and self.out is not None:
            self._write(result)
        return result

    def _dataset(self, seed: int) -> FederatedDataset:
        base = self.dataset
        if base is None:
            base = build_dataset(dataclasses.replace(self.base, seed=seed))
        return with_validation(base, self.base.validation)

    def _play_batched(self, specs: List[RunSpec], datasets, finished) -> None:
        """The runs ``specs`` (all of the engine), round by round as one program."""
        sims: List[Simulation] = []
        first: Dict[int, Simulation] = {}
        for s in specs:
            sims.append(Simulation(self.configs[s], self.dist, dataset=datasets[s.seed],
                                   model=self.model, evaluate_like=first.get(s.seed)))
            first.setdefault(s.seed, sims[-1])
        names = [s.name for s in specs]
        for sim, name in zip(sims, names):
            self._start(name, sim.config)
        rounds = self.base.rounds
        started = time.perf_counter()
        for t in self._rounds(rounds, specs):
            t0 = time.perf_counter()
            cohorts = [sim.sample(t) for sim in sims]
            playing = [r for r, ids in enumerate(cohorts) if ids.shape[0]]
            records = [{"participants": 0} for _ in sims]
            if playing:
                done = play_round([sims[r] for r in playing], t, [cohorts[r] for r in playing])
                for r, record in zip(playing, done):
                    records[r] = record
            evaluations = evaluate_runs(sims) if sims[0].evaluation_due(t) else None
            for r, (sim, name) in enumerate(zip(sims, names)):
                record = sim.finish(t, records[r], t0,
                                     None if evaluations is None else evaluations[r])
                self._round(name, record)
        seconds = (time.perf_counter() - started) / len(sims)
        finals = evaluate_runs(sims)
        for r, (spec, sim) in enumerate(zip(specs, sims)):
            finished[spec] = self._finish(spec, sim, finals[r][0][0], seconds)

    def _play_alone(self, spec: RunSpec, runner: Runner, finished) -> None:
        self._start(spec.name, runner.config)
        started = time.perf_counter()
        for _ in self._rounds(self.base.rounds, [spec]):
            self._round(spec.name, runner.step())
        finished[spec] = self._finish(spec, runner, runner.evaluate()[0],
                                      time.perf_counter() - started)

    def _rounds(self, rounds: int, specs: List[RunSpec]):
        from tqdm import tqdm

        label = specs[0].name if len(specs) == 1 else f"{len(specs)} runs"
        return tqdm(range(1, rounds + 1), desc=label, unit="round", file=sys.stderr,
                    disable=not (self.progress and self.dist.rank == 0), dynamic_ncols=True)

    def _start(self, name: str, config: SimulationConfig) -> None:
        if self.dist.rank == 0:
            for callback in self.callbacks:
                callback.on_run_start(name, config.to_dict())

    def _round(self, name: str, record: Dict[str, Any]) -> None:
        if self.dist.rank == 0:
            for callback in self.callbacks:
                callback.on_round(name, record)

    def _finish(self, spec: RunSpec, runner: Runner, final: np.ndarray,
                seconds: float) -> SweepRun:
        run = SweepRun(spec.rule, dict(spec.options), spec.seed, list(runner.history),
                       np.asarray(final, dtype=np.float64), seconds)
        if self.dist.rank == 0:
            summary = report.summarize({spec.name: run.history}, {spec.name: seconds})
            for callback in self.callbacks:
                callback.on_run_end(spec.name, summary.get(spec.name, {}))
        return run

    def _saved_config(self) -> Dict[str, Any]:
        return {"config": self.base.to_dict(), "rules": self.rules, "seeds": self.seeds,
                "grid": self.grid, "rule_options": self.fixed, "baseline": self.baseline,
                "select": self.select, "metrics": list(self.metrics)}

    def _write(self, result: SweepResult) -> None:
        histories = {run_name(run.point, run.seed): run.history for run in result.runs}
        report.write_metrics(self.out, histories)
        sweep_report.write_sweep(self.out, result.runs, result.rows, result.selection,
                                 result.metrics, result.baseline, self.select)


def _has(run: SweepRun, metric: str) -> bool:
    return any(metric in record for record in run.history)
