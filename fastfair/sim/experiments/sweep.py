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
seeds) train their cohorts together: one
:meth:`~fastfair.sim.rounds.engine.Simulation.play_round` per round for all of them, each run with
its own global model, rule, server optimiser and keys, and each run's records equal to the same run
alone. A run that diverges stops at that round and the others go on as they would without it
(docs/simulator.md, "Diverged runs"). Methods (FedEvg, SuPerFed) run one after another on the same
data sets. Every run's final global model (but a diverged run's) is kept
(:attr:`~fastfair.sim.experiments.sweep_result.SweepResult.models`, and ``models.pt`` in the output
folder). With ``checkpoint_every`` a sweep saves its state into its folder, and :meth:`Sweep.resume`
continues it bit for bit. ``fastfair sweep`` is the command-line layer over this class.

.. code-block:: python

    import torch

    models = torch.load("out/models.pt", weights_only=True)   # {run name: state_dict}
    net.load_state_dict(models["fedavg/seed0"])                # a ModuleModel's own module
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from fastfair._options import check_name
from fastfair.sim import checkpoint, run_files
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.data.catalog import build_dataset
from fastfair.sim.data.validation import with_validation
from fastfair.sim.distributed import Distributed
from fastfair.sim.experiments import stopping
from fastfair.sim.experiments.common import (
    Orchestration,
    check_named,
    check_rules,
    check_seeds,
    play_alone,
    point_config,
    round_hooks,
    run_summary,
    with_fairness,
)
from fastfair.sim.experiments.sweep_result import SweepResult, run_name
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.population.report import population_metrics
from fastfair.sim.process import run_tuned
from fastfair.sim.reporting import report, sweep_report, tidy
from fastfair.sim.reporting.callbacks import RoundCallback
from fastfair.sim.reporting.stats import (
    SweepRun,
    point_label,
    select,
    selectable_metrics,
    summarize,
)
from fastfair.sim.rounds.engine import Simulation, evaluate_runs
from fastfair.sim.rounds.registry import make_runner, runner_class
from fastfair.sim.rounds.runner import Runner

#: The metrics a sweep summarises by default (accuracy columns of the simulate table).
METRICS = ("acc_mean", "acc_worst10", "acc_gini", "acc_variance")
CONFIG = run_files.SWEEP_CONFIG
#: The file of a sweep's folder holding every run's final global model.
MODELS_FILE = run_files.MODELS
#: The file of a sweep's folder holding every run's final per-client accuracy, one row per run
#: and evaluation client (``run, rule, point, seed, client, accuracy``).
FINALS_FILE = run_files.SWEEP_FINALS
#: Added to the metrics when every run's data set has groups: the worst group's accuracy and
#: the Gini over the groups' accuracies, with their paired differences.
GROUP_METRICS = ("acc_worst_group", "acc_gini_groups")


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


class Sweep(Orchestration):
    """Runs ``rules`` x grid points x ``seeds`` from one configuration.

    Parameters
    ----------
    config
        The shared configuration (its ``seed``, ``rule`` and ``rule_options`` are replaced per
        run). With ``validation`` > 0, every run holds out that fraction of each client's
        training samples and the grid point of each rule is chosen on it.
    rules
        Rule and method names (one name may be given as a string).
    seeds
        Seeds (one may be given as an integer); runs of one seed share data, initial model and
        client samples (a :class:`~fastfair.sim.models.module.ModuleModel` given as ``model``
        starts each seed
        from weights drawn from that seed, unless built with ``init="given"``).
    grid
        ``{rule: {option: [values]}}``: every combination is a grid point of the rule; the
        options ``objective`` and ``objective.KEY`` span the client objective
        (:func:`~fastfair.sim.experiments.common.point_config`).
    rule_options
        ``{rule: {option: value}}``: options fixed for every point of a rule.
    baseline
        The rule the paired differences are taken against (None: no differences).
    select
        The metric (without ``val_``) whose validation value picks each rule's grid point.
    metrics
        The metrics summarised; every run that does not diverge must record each (ValueError
        naming the run and the metric once the runs are played).
    out
        Output folder (created; must be empty or absent); None writes nothing and
        ``checkpoint_every`` must be 0. It receives the metrics, the summary and
        ``models.pt``, every run's final global model by run name.
    checkpoint_every
        Save a checkpoint every N rounds (0: never): the batched runs' states together, and
        the method run in progress; :meth:`resume` continues from it bit for bit.
    progress
        A progress bar over rounds (``tqdm.auto``); None (default): shown when standard error
        is a terminal or in a notebook, not in a job's log or a pipe.
    callbacks
        :class:`~fastfair.sim.reporting.callbacks.RoundCallback` s that see every run's
        rounds, under the run's name (:attr:`RunSpec.name`); only rank 0 calls them, and they
        are closed when :meth:`run` returns or raises.
    batched
        Train the runs of the rules together (default); False runs them one after another
        (the reference the batched program is compared with).
    dataset, model, dist, threads, fair_over, group_prior
        As for :class:`~fastfair.sim.experiments.experiment.Experiment` (``dataset`` is used
        for every seed; ``fair_over="groups"`` runs every rule over the data set's groups).
    """

    CONFIG = CONFIG
    fills_idle_cores = True

    def __init__(self, config: SimulationConfig, rules: Union[str, Sequence[str]],
                 seeds: Union[int, Sequence[int]] = (0,),
                 grid: Optional[Mapping[str, Mapping[str, Sequence[Any]]]] = None,
                 rule_options: Optional[Mapping[str, Mapping[str, Any]]] = None, *,
                 baseline: Optional[str] = None, select: str = "acc_mean",
                 metrics: Sequence[str] = METRICS, out: Union[str, Path, None] = None,
                 checkpoint_every: int = 0, progress: Optional[bool] = None,
                 callbacks: Optional[Sequence[RoundCallback]] = (), batched: bool = True,
                 dataset: Optional[FederatedDataset] = None, model: Optional[FlatModel] = None,
                 dist: Optional[Distributed] = None, threads: Optional[int] = 1,
                 fair_over: Optional[str] = None, group_prior: Optional[str] = None) -> None:
        config = with_fairness(config.with_clients_of(dataset), fair_over, group_prior)
        rules, seeds = check_rules(rules), check_seeds(seeds)
        grid, fixed = dict(grid or {}), dict(rule_options or {})
        check_named(rules, grid=grid, rule_options=fixed)
        if baseline is not None and baseline not in rules:
            raise ValueError(f"baseline (--baseline) {baseline!r} is not among the rules "
                             f"{rules}: pass one of them or None")
        self._settings(config.device, out, checkpoint_every, progress, dist, threads, callbacks)
        self.points = {r: grid_points(r, dict(fixed.get(r, {})), dict(grid.get(r, {})))
                       for r in rules}
        if any(len(p) > 1 for p in self.points.values()) and not config.validation:
            raise ValueError("a grid needs a validation split to choose its points on: set "
                             "validation (--validation), e.g. 0.2")
        check_name("select metric (--select)", select, selectable_metrics())
        self.specs = [RunSpec(r, tuple(sorted(o.items())), s)
                      for r in rules for o in self.points[r] for s in seeds]
        self.configs = {spec: point_config(config, spec.rule, spec.seed, dict(spec.options))
                        for spec in self.specs}
        self.plans = {spec: runner_class(cfg.rule).validate(cfg)
                      for spec, cfg in self.configs.items()}
        self.base, self.rules, self.seeds = config, rules, seeds
        self.grid, self.fixed, self.baseline, self.select = grid, fixed, baseline, select
        self.metrics = tuple(metrics)
        self.batched = batched
        self.dataset, self.model = dataset, model

    @classmethod
    def _arguments(cls, saved: Dict[str, Any]) -> Tuple[tuple, Dict[str, Any]]:
        args = (SimulationConfig.from_dict(saved["config"]), saved["rules"], saved["seeds"],
                saved["grid"], saved["rule_options"])
        return args, {"baseline": saved["baseline"], "select": saved["select"],
                      "metrics": saved["metrics"], "batched": saved.get("batched", True),
                      "checkpoint_every": saved.get("checkpoint_every", 0)}

    def _saved_config(self) -> Dict[str, Any]:
        return {"config": self.base.to_dict(), "rules": self.rules, "seeds": self.seeds,
                "grid": self.grid, "rule_options": self.fixed, "baseline": self.baseline,
                "select": self.select, "metrics": list(self.metrics),
                "checkpoint_every": self.checkpoint_every, "batched": self.batched}

    def run(self) -> SweepResult:
        """Runs every run not finished yet, then writes and returns the statistics.

        Returns
        -------
        SweepResult
            Every run, the selected grid points and the summary rows.
        """
        return run_tuned(self.threads, lambda: self._owning(self._run))

    def _run(self) -> SweepResult:
        lead = self._start()
        state = self._state or {}
        started = time.perf_counter() - state.get("seconds", 0.0)
        datasets = {s: self._dataset(s) for s in self.seeds}
        finished = self._restored(state.get("finished", {}))
        saved_models = state.get("models", {})
        self._models: Dict[RunSpec, Dict[str, torch.Tensor]] = {
            spec: dict(saved_models[spec.name]) for spec in finished if spec.name in saved_models}
        self._eval_ids: Dict[int, np.ndarray] = {
            int(seed): np.asarray(ids, dtype=np.int64)
            for seed, ids in state.get("eval_ids", {}).items()}
        current = state.get("current")
        with round_hooks(self.callbacks, self.dist) as hooks:
            for group in self._groups():
                if all(s in finished for s in group):
                    continue
                names = [s.name for s in group]
                resumed = current if current is not None and current["names"] == names else None
                if runner_class(group[0].rule).plays_batched:
                    self._play_batched(group, datasets, finished, hooks, resumed, started)
                else:
                    self._play_alone(group[0], datasets, finished, hooks, resumed, started)
                if lead and self.checkpoint_every:
                    self._save(finished, started)
        self._open()
        runs = [finished[s] for s in self.specs]
        for run in runs:   # a metric no round records is named, not a KeyError of the summary
            lacking = [m for m in self.metrics if run.diverged_round is None and not _has(run, m)]
            if lacking:
                raise ValueError(f"metrics: run {run.point} seed {run.seed} recorded no "
                                 f"{', '.join(map(repr, lacking))}: this setting does not "
                                 "compute it (a group's accuracy without groups, AUROC of a "
                                 "task that is not binary); summarise other metrics")
        metrics = self.metrics
        metrics += tuple(m for m in GROUP_METRICS  # a data set with groups: its fairness target
                         if m not in metrics and all(_has(run, m) for run in runs))
        metrics += population_metrics([run.history for run in runs], metrics)  # tiers, clock
        selection = select(runs, self.select)
        rows = summarize(runs, metrics, self.baseline, selection)
        seconds = time.perf_counter() - started
        models = {spec.name: self._models[spec] for spec in self.specs if spec in self._models}
        result = SweepResult(runs, selection, rows, metrics, self.baseline, seconds,
                             self.out if lead else None, models, dict(self._eval_ids))
        if lead and self.out is not None:
            self._write(result)
        return result

    def _groups(self) -> List[List[RunSpec]]:
        """The runs in the order they are played: the engine's runs as one batched group (or
        one by one without ``batched``), then each method run alone."""
        batchable = [s for s in self.specs if runner_class(s.rule).plays_batched]
        groups = [batchable] if self.batched else [[s] for s in batchable]
        return [g for g in groups if g] + [[s] for s in self.specs if s not in batchable]

    def _dataset(self, seed: int) -> FederatedDataset:
        base = self.dataset
        if base is None:
            base = build_dataset(dataclasses.replace(self.base, seed=seed))
        return with_validation(base, self.base.validation)

    def _play_batched(self, specs: List[RunSpec], datasets, finished, hooks: RoundCallback,
                      resumed: Optional[Dict[str, Any]], started: float) -> None:
        """The runs ``specs`` (all of the engine), round by round as one program, from the
        checkpoint ``resumed`` when given."""
        sims: List[Simulation] = []
        first: Dict[int, Simulation] = {}
        for s in specs:
            sims.append(Simulation(self.configs[s], self.dist, dataset=datasets[s.seed],
                                   model=self.model, evaluate_like=first.get(s.seed),
                                   plan=self.plans[s]))
            first.setdefault(s.seed, sims[-1])
        if resumed is not None:
            for sim, saved in zip(sims, resumed["states"]):
                sim.load_state_dict(saved)
        self._open()
        names = [s.name for s in specs]
        for sim, name in zip(sims, names):
            hooks.on_run_start(name, sim.config.to_dict())
        rounds, done = self.base.rounds, sims[0].round
        group_started = time.perf_counter() - (resumed["seconds"] if resumed else 0.0)
        bar = self._bar(rounds, done, names[0] if len(names) == 1 else f"{len(names)} runs")
        for t in range(done + 1, rounds + 1):
            t0 = time.perf_counter()
            # A run that diverged plays no more rounds; the others play as they would alone.
            live = [r for r, sim in enumerate(sims) if sim.diverged is None]
            if not live:
                break
            cohorts = {r: sims[r].sample(t) for r in live}
            playing = [r for r in live if cohorts[r].shape[0]]
            records = {r: {"participants": 0} for r in live}
            if playing:
                played = Simulation.play_round([sims[r] for r in playing], t,
                                               [cohorts[r] for r in playing])
                for r, record in zip(playing, played):
                    records[r] = record
            evaluations = evaluate_runs([sims[r] for r in live]) \
                if sims[0].evaluation_due(t) else None
            for j, r in enumerate(live):
                hooks.on_round(names[r], sims[r].finish(
                    t, records[r], t0, None if evaluations is None else evaluations[j]))
            bar.update(1)
            def save() -> None:
                self._save(finished, started, {
                    "names": names, "states": [sim.state_dict() for sim in sims],
                    "seconds": time.perf_counter() - group_started})

            if self.dist.rank == 0 and self.checkpoint_every and t % self.checkpoint_every == 0:
                save()
            stopping.check(names[0] if len(names) == 1 else f"{len(names)} runs", t,
                           save if self.dist.rank == 0 and self.checkpoint_every else None,
                           self.dist, saves=bool(self.checkpoint_every))
        bar.close()
        seconds = (time.perf_counter() - group_started) / len(sims)
        finishing = [sim for sim in sims if sim.diverged is None]
        finals = dict(zip(map(id, finishing), evaluate_runs(finishing) if finishing else []))
        for spec, sim in zip(specs, sims):  # a diverged run has no final accuracy
            final = finals[id(sim)][0][0] if id(sim) in finals else np.zeros(0)
            finished[spec] = self._finish(spec, sim, final, seconds, hooks)

    def _play_alone(self, spec: RunSpec, datasets, finished, hooks: RoundCallback,
                    resumed: Optional[Dict[str, Any]], started: float) -> None:
        """The run ``spec`` (a method's) alone, from the checkpoint ``resumed`` when given."""
        runner = make_runner(self.configs[spec], self.dist, dataset=datasets[spec.seed],
                             model=self.model, plan=self.plans[spec])
        if resumed is not None:
            runner.load_state_dict(resumed["states"][0])
        self._open()

        def save(spent: float) -> None:
            self._save(finished, started, {"names": [spec.name], "states": [runner.state_dict()],
                                           "seconds": spent})

        bar = self._bar(self.base.rounds, runner.round, spec.name)
        seconds = play_alone(runner, spec.name, hooks, bar, self.checkpoint_every,
                             save if self.dist.rank == 0 else None,
                             resumed["seconds"] if resumed else 0.0)
        final = runner.evaluate()[0] if runner.diverged is None else np.zeros(0)
        finished[spec] = self._finish(spec, runner, final, seconds, hooks)

    def _finish(self, spec: RunSpec, runner: Runner, final: np.ndarray, seconds: float,
                hooks: RoundCallback) -> SweepRun:
        run = SweepRun(spec.rule, dict(spec.options), spec.seed, list(runner.history),
                       np.asarray(final, dtype=np.float64), seconds)
        if runner.diverged is None:  # a diverged run leaves no model
            self._models[spec] = {k: v.detach().cpu().clone()
                                  for k, v in runner.global_state_dict().items()}
        self._eval_ids[spec.seed] = np.asarray(runner.eval_ids, dtype=np.int64)
        hooks.on_run_end(spec.name, run_summary(spec.name, run.history, seconds))
        return run

    def _save(self, finished: Dict[RunSpec, SweepRun], started: float,
              current: Optional[Dict[str, Any]] = None) -> None:
        """Checkpoints the finished runs and the group in progress (``current``: its run
        names, their ``state_dict`` s and its seconds so far)."""
        self._checkpoint(seconds=time.perf_counter() - started, current=current, finished={
            spec.name: {"history": run.history, "final": run.final, "seconds": run.seconds}
            for spec, run in finished.items()},
            models={spec.name: self._models[spec] for spec in finished if spec in self._models},
            eval_ids={str(seed): ids for seed, ids in self._eval_ids.items()})

    def _restored(self, saved: Dict[str, Any]) -> Dict[RunSpec, SweepRun]:
        """The finished runs of a checkpoint, by run."""
        return {spec: SweepRun(spec.rule, dict(spec.options), spec.seed,
                               [dict(r) for r in saved[spec.name]["history"]],
                               np.asarray(saved[spec.name]["final"], dtype=np.float64),
                               float(saved[spec.name]["seconds"]))
                for spec in self.specs if spec.name in saved}

    def _write(self, result: SweepResult) -> None:
        assert self.out is not None  # run() writes only into an output folder
        histories = {run_name(run.point, run.seed): run.history for run in result.runs}
        report.write_metrics(self.out, histories)
        sweep_report.write_sweep(self.out, result.runs, result.rows, result.selection,
                                 result.metrics, result.baseline, self.select)
        tidy.write_client_accuracy(self.out / FINALS_FILE, result.to_records("clients"))
        checkpoint.save(self.out / MODELS_FILE, result.models)


def _has(run: SweepRun, metric: str) -> bool:
    return any(metric in record for record in run.history)
