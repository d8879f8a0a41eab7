"""Experiments: one or several rules on identical data, client samples and seeds, with the outputs
(metrics, summary, final per-client accuracy, plots), checkpoints and resume.

.. code-block:: python

    from fastfair.sim import Experiment, SimulationConfig

    result = Experiment(SimulationConfig(rounds=50), rules=["fedavg", "aaggff-d"],
                        rule_options={"aaggff-d": {"cdf": "frechet"}}, out="runs/x").run()
    print(result.table())

``fastfair simulate`` is a thin command-line layer over this class and writes the same files.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from fastfair import _files as files
from fastfair.sim import checkpoint, run_files
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.distributed import Distributed
from fastfair.sim.experiments import common
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.names import DATASETS
from fastfair.sim.population.report import tier_table, write_participation
from fastfair.sim.process import run_tuned
from fastfair.sim.reporting import report, tidy
from fastfair.sim.reporting.callbacks import RoundCallback
from fastfair.sim.rounds.registry import make_runner, runner_class

CONFIG = run_files.EXPERIMENT_CONFIG
MODELS_FILE = run_files.MODELS


@dataclass(repr=False)
class ExperimentResult:
    """What an experiment produced: per rule its round records (``histories``) and final
    per-client accuracy on the evaluation clients ``eval_ids`` (``finals``), the summary of its
    last evaluation and wall time (``summary``), the output folder (None when not written) and
    its final global model as a ``state_dict`` (``models``; a module's own keys, ready for
    ``module.load_state_dict``). Accuracies are fractions in [0, 1] here as in every file.

    :func:`~fastfair.sim.experiments.loading.load_run` reads one back from its folder;
    :meth:`to_pandas` gives a tidy table; a notebook displays the summary table."""

    histories: Dict[str, List[Dict[str, Any]]]
    finals: Dict[str, np.ndarray]
    eval_ids: np.ndarray
    summary: Dict[str, Dict[str, float]]
    out: Optional[Path]
    models: Dict[str, Dict[str, torch.Tensor]] = field(default_factory=dict)

    def table(self) -> str:
        """The summary side by side, as ``fastfair simulate`` prints it, and the device tiers
        of a population run."""
        tiers = tier_table(self.histories)
        return report.summary_table(self.summary) + ("\n\n" + tiers if tiers else "")

    def _runs(self) -> List[tidy.Run]:
        return [({"run": rule, "rule": rule}, history,
                 self.finals.get(rule, np.zeros(0)), self.eval_ids)
                for rule, history in self.histories.items()]

    def to_records(self, kind: str = "rounds") -> List[Dict[str, Any]]:
        """The results as tidy records (plain dicts; :mod:`~fastfair.sim.reporting.tidy`).

        Parameters
        ----------
        kind
            ``"rounds"``: one record per rule x round x metric (``run``, ``rule``, ``round``,
            ``metric``, ``value``); ``"clients"``: one per rule x evaluation client (``run``,
            ``rule``, ``client``, ``accuracy``: its final test accuracy).

        Returns
        -------
        list of dict
            The rows, rules in order, then rounds, then metrics as recorded.
        """
        return tidy.records(self._runs(), kind)

    def to_pandas(self, kind: str = "rounds") -> Any:
        """:meth:`to_records` as a ``pandas.DataFrame`` (needs pandas: ``pip install pandas``).
        ``df.pivot_table(index="round", columns="rule", values="value")`` on one metric's rows
        gives its curves side by side."""
        return tidy.to_pandas(self.to_records(kind))

    def __repr__(self) -> str:
        rounds = max((int(r["round"]) for h in self.histories.values() for r in h), default=0)
        out = None if self.out is None else str(self.out)
        return (f"ExperimentResult(rules={list(self.histories)}, rounds={rounds}, "
                f"eval_clients={len(self.eval_ids)}, out={out!r})")

    def _repr_html_(self) -> str:
        keys = [k for k, _ in report.SUMMARY_COLUMNS + report.GROUP_COLUMNS
                if self.summary and all(k in row for row in self.summary.values())]
        body = [[rule, *(float(row[k]) for k in keys), float(row["seconds"])]
                for rule, row in self.summary.items()]
        labels = dict(report.SUMMARY_COLUMNS + report.GROUP_COLUMNS)
        return tidy.html_table(["rule", *(labels[k] for k in keys), "seconds"], body,
                               f"{self!r}: last evaluation (accuracies as fractions)")


class Experiment(common.Orchestration):
    """Runs ``rules`` (rule or method names) one after another from the same configuration.

    Parameters
    ----------
    config
        The shared configuration; its ``rule`` / ``rule_options`` are used when ``rules`` is
        None.
    rules
        Names of rules (:data:`fastfair.aggregators.RULES`) and methods (FedEvg, SuPerFed); one
        name may be given as a string.
    rule_options
        ``{rule: {option: value}}``; a rule without an entry runs with its defaults.
    out
        Output folder (created; must be empty or absent). None: nothing is written and
        ``checkpoint_every`` must be 0.
    checkpoint_every
        Save a checkpoint every N rounds (0: never); :meth:`resume` continues from it exactly.
    progress
        A progress bar per rule (``tqdm.auto``: a widget in a notebook, text on standard
        error); None (default): shown when standard error is a terminal or in a notebook,
        not in a job's log or a pipe.
    dataset, model
        Your own :class:`~fastfair.sim.data.base.FederatedDataset` / flat model instead of
        ``config.dataset`` / ``config.model``.
    dist
        This process's place under ``torchrun`` (default: one process). Only rank 0 writes.
    threads
        Threads of torch and of fastfair's kernels while the experiment runs (restored after);
        None keeps the process's settings. The default, 1, is the fastest choice on a shared or
        busy machine and for small models; raise it for large cohorts of large models on idle
        cores.
    callbacks
        Per-round hooks (:class:`~fastfair.sim.reporting.callbacks.RoundCallback`): each rule's
        start with its config as a dict, every round's record and the rule's summary row, as they
        happen, the run being named by the rule; closed when :meth:`run` returns or raises.
        Only rank 0 calls them. A resumed experiment calls them for the rounds it plays, from
        the checkpoint on (rounds before it are not replayed; those after it, lost with the
        crash, are seen again).
    fair_over, group_prior
        Shorthands for ``config.fair_over`` (``"clients"`` or ``"groups"``: every rule runs over
        the data set's groups, :class:`~fastfair.aggregators.OverGroups`) and
        ``config.group_prior`` (``"uniform"`` or ``"size"``); None keeps the config's.

    Every rule name, option, value and configuration field is checked when the experiment is
    made, before anything runs or is written. :meth:`resume` (from
    :class:`~fastfair.sim.experiments.common.Orchestration`) continues a checkpointed run.
    """

    CONFIG = CONFIG

    def __init__(self, config: SimulationConfig,
                 rules: Union[str, Sequence[str], None] = None,
                 rule_options: Optional[Mapping[str, Mapping[str, Any]]] = None, *,
                 out: Union[str, Path, None] = None, checkpoint_every: int = 0,
                 progress: Optional[bool] = None, dataset: Optional[FederatedDataset] = None,
                 model: Optional[FlatModel] = None, dist: Optional[Distributed] = None,
                 threads: Optional[int] = 1,
                 callbacks: Optional[Sequence[RoundCallback]] = None,
                 fair_over: Optional[str] = None, group_prior: Optional[str] = None) -> None:
        config = common.with_fairness(config.with_clients_of(dataset), fair_over, group_prior)
        if rules is None:
            rules = [config.rule]
            rule_options = {config.rule: dict(config.rule_options)}
        rules = common.check_rules(rules)
        options = {r: dict(o) for r, o in (rule_options or {}).items()}
        common.check_named(rules, rule_options=options)
        self._settings(config.device, out, checkpoint_every, progress, dist, threads, callbacks)
        self.configs = {r: dataclasses.replace(config, rule=r, rule_options=options.get(r, {}))
                        for r in rules}
        self.plans = {r: runner_class(cfg.rule).validate(cfg) for r, cfg in self.configs.items()}
        self.base = dataclasses.replace(config, rule=rules[0],
                                        rule_options=options.get(rules[0], {}))
        self.rules = rules
        self.dataset, self.model = dataset, model

    @classmethod
    def _arguments(cls, saved: Dict[str, Any]) -> Tuple[tuple, Dict[str, Any]]:
        return ((SimulationConfig.from_dict(saved["config"]), saved["rules"],
                 saved["rule_options"]), {"checkpoint_every": saved["checkpoint_every"]})

    def _saved_config(self) -> Dict[str, Any]:
        return {"rules": self.rules, "config": self.base.to_dict(),
                "rule_options": {r: c.rule_options for r, c in self.configs.items()},
                "checkpoint_every": self.checkpoint_every}

    def run(self) -> ExperimentResult:
        """Runs every rule not finished yet and writes the outputs.

        Returns
        -------
        ExperimentResult
            Every rule's history, final per-client accuracy, summary and final model.
        """
        return run_tuned(self.threads, lambda: self._owning(self._run))

    def _run(self) -> ExperimentResult:
        lead = self._start()
        state = self._state or {}
        histories: Dict[str, List[dict]] = dict(state.get("histories", {}))
        finals: Dict[str, np.ndarray] = dict(state.get("finals", {}))
        seconds: Dict[str, float] = dict(state.get("seconds", {}))
        models: Dict[str, Dict[str, torch.Tensor]] = dict(state.get("models", {}))
        eval_ids = np.zeros(0, dtype=np.int64)
        with common.round_hooks(self.callbacks, self.dist) as hooks:
            for rule in self.rules:
                runner = make_runner(self.configs[rule], self.dist, dataset=self.dataset,
                                     model=self.model, plan=self.plans[rule])
                eval_ids = runner.eval_ids
                if rule in finals:
                    continue
                if state.get("current_rule") == rule:
                    runner.load_state_dict(state["current"])
                self._open()

                def save(spent: float, rule=rule, runner=runner) -> None:
                    self._checkpoint(histories=histories, finals=finals,
                                     seconds={**seconds, rule: spent}, models=models,
                                     current_rule=rule, current=runner.state_dict(),
                                     eval_ids=runner.eval_ids)

                bar = self._bar(self.configs[rule].rounds, runner.round, f"{rule:>10}")
                seconds[rule] = common.play_alone(
                    runner, rule, hooks, bar, self.checkpoint_every, save if lead else None,
                    seconds.get(rule, 0.0))
                histories[rule] = runner.history
                if lead and self.out is not None:  # each client's kept rounds, where counted
                    write_participation(self.out, rule, runner.availability)
                if runner.diverged is None:  # a diverged run has no final accuracy nor model
                    finals[rule] = runner.evaluate()[0]
                    # On the CPU, as a sweep keeps them: a GPU run's models.pt loads anywhere.
                    models[rule] = {k: v.detach().cpu()
                                    for k, v in runner.global_state_dict().items()}
                hooks.on_run_end(rule, common.run_summary(rule, runner.history, seconds[rule]))
                if lead and self.checkpoint_every:
                    self._checkpoint(histories=histories, finals=finals, seconds=seconds,
                                     models=models, current_rule=None, current=None,
                                     eval_ids=eval_ids)
        self._open()
        summary = report.summarize(histories, seconds)
        if lead and self.out is not None:
            self._write(histories, finals, eval_ids, summary, models)
        return ExperimentResult(histories, finals, eval_ids, summary,
                                self.out if lead else None, models)

    def _write(self, histories, finals, eval_ids, summary, models) -> None:
        assert self.out is not None  # run() writes only into an output folder
        report.write_metrics(self.out, histories)
        report.write_final_accuracy(self.out, finals, eval_ids)
        checkpoint.save(self.out / MODELS_FILE, models)
        b = self.base
        model = b.model or DATASETS[b.dataset].default_model
        title = f"{b.dataset}, K={b.clients}, m={b.per_round}, {model}, seed {b.seed}"
        report.plot(self.out, histories, finals, title)
        with files.atomic(self.out / run_files.SUMMARY, text=True) as f:
            f.write(json.dumps(summary, indent=1))
