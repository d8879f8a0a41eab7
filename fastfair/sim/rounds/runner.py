"""What every simulation runner shares: the choice of evaluation clients, per-round records with
evaluation metrics on evaluation rounds, and versioned checkpoints. The classification engine
(:class:`~fastfair.sim.rounds.engine.Simulation`) and the FedEvg / SuPerFed runners subclass it, so an
:class:`~fastfair.sim.experiments.experiment.Experiment` writes the same files for all of them."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from fastfair.sim.checkpoint import from_plain, to_plain
from fastfair.sim.data.base import ClientBatch, FederatedDataset
from fastfair.sim.data.catalog import check_files
from fastfair.sim.process import torch_threads
from fastfair.sim.reporting.metrics import fairness_metrics
from fastfair.sim.rounds.availability import check_availability
from fastfair.sim.seeding import Stream, numpy_rng

Result = Tuple[np.ndarray, np.ndarray, np.ndarray]
#: A round's evaluation: (accuracy, loss, counts) on the test split, and on the validation
#: split (None without one).
Evaluation = Tuple[Result, Optional[Result]]


class Runner:
    """Subclasses set ``config`` (with ``seed``, ``clients``, ``eval_clients``, ``eval_every``,
    ``rounds``), ``availability``, ``history`` and ``round``, and implement ``_play`` (one round
    with a non-empty cohort), ``_evaluate``, ``_state`` and ``_load``.

    ``unused`` names the configuration fields a runner does not use, each with what to do
    instead; a run that sets one of them to a non-default value is refused before it starts
    (:meth:`check_config`)."""

    version = 2
    unused: Dict[str, str] = {}

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Raises ValueError naming the first field ``config`` sets that this runner ignores."""
        for name in config.non_default_fields():
            if name in cls.unused:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"rule {config.rule!r} does not use {name} ({flag}): "
                                 f"{cls.unused[name]}")

    @classmethod
    def validate(cls, config: Any) -> None:
        """Checks everything about ``config`` that needs no training data (names, options,
        unused fields, whether the data set's files are there), so that a bad run is refused
        before anything is built or written."""
        cls.check_config(config)
        check_availability(config.availability, config.availability_options)
        check_files(config)
    config: Any
    history: List[Dict[str, Any]]
    round: int
    eval_ids: np.ndarray

    def step(self) -> Dict[str, Any]:
        """Plays round ``self.round + 1``; returns its record (with evaluation metrics on
        evaluation rounds)."""
        t = self.round + 1
        started = time.perf_counter()
        ids = self.availability.sample(t)
        # Nobody available (Bernoulli availability): the model stays as it is.
        record = self._play(t, ids) if ids.shape[0] else {"participants": 0}
        return self._finish(t, record, started)

    def _play(self, t: int, ids: np.ndarray) -> Dict[str, Any]:
        """Round ``t`` with the sampled clients ``ids`` (m >= 1); returns the round's record."""
        raise NotImplementedError

    def _pick_eval_clients(self, dataset: FederatedDataset,
                           device: Optional[torch.device] = None) -> ClientBatch:
        """Chooses the evaluation clients (all, or a fixed random subset of ``eval_clients`` for
        large K, less those without test data, so that ``eval_ids`` lines up with what
        :meth:`evaluate` returns) and returns their test data."""
        cfg = self.config
        rng = numpy_rng(cfg.seed, Stream.EVAL_CLIENTS)
        k = min(cfg.eval_clients, cfg.clients)
        ids = np.arange(cfg.clients) if k == cfg.clients else np.sort(
            rng.choice(cfg.clients, size=k, replace=False))
        batch = dataset.client_data(ids, "test", device)
        has_test = batch.counts > 0
        if not has_test.any():
            raise ValueError("no evaluation client has test data; raise --eval-clients")
        if not has_test.all():  # rare (tiny digits clients): drop them, reading the rest again
            ids = ids[has_test]
            batch = dataset.client_data(ids, "test", device)
        self.eval_ids = ids
        return batch

    def _finish(self, t: int, record: Dict[str, Any], started: float,
                evaluation: Optional[Evaluation] = None) -> Dict[str, Any]:
        """Closes round t: its record, with evaluation metrics on evaluation rounds (from
        ``evaluation`` when the caller scored the model already)."""
        self.round = t
        record = {"round": t, **record}
        if self.evaluation_due(t):
            record.update(self.evaluate_metrics(evaluation))
        record["seconds"] = time.perf_counter() - started
        self.history.append(record)
        return record

    def evaluation_due(self, t: int) -> bool:
        """Whether round ``t`` ends with an evaluation (every ``eval_every`` and the last)."""
        return t % self.config.eval_every == 0 or t == self.config.rounds

    def evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(accuracy [E], loss [E], test counts [E])`` per evaluation client ``eval_ids``."""
        return self._evaluate()

    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def extra_metrics(self) -> Dict[str, float]:
        """Method-specific numbers recorded beside the accuracy summary."""
        return {}

    def global_state_dict(self) -> Dict[str, torch.Tensor]:
        """The global model now, as named tensors: a module's own ``state_dict`` (ready for
        ``module.load_state_dict``) for a :class:`~fastfair.sim.models.module.ModuleModel`."""
        return self.model.state_dict(self.params)

    def evaluate_validation(self) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`evaluate` on the validation split of the evaluation clients that have one
        (None when the run holds out none)."""
        return None

    def evaluate_metrics(self, evaluation: Optional[Evaluation] = None) -> Dict[str, float]:
        """The fairness summary of client accuracy (``acc_*``), the sample-weighted test loss,
        the same on the validation split (``val_acc_*``, ``val_loss``) when the run holds one
        out, and :meth:`extra_metrics`. ``evaluation`` gives the two results (test, and
        validation or None) when the caller computed them (a batched sweep)."""
        test, val = evaluation if evaluation is not None else (self.evaluate(),
                                                                self.evaluate_validation())
        acc, loss, counts = test
        out = {f"acc_{k}": v for k, v in fairness_metrics(acc, weights=counts).items()}
        out["test_loss"] = float(np.dot(loss, counts) / counts.sum())
        groups = self.dataset.groups(self.eval_ids)
        if groups is not None:
            # Each group's mean client accuracy; the worst of them is the fairness target.
            present = np.unique(groups)
            means = {int(g): float(acc[groups == g].mean()) for g in present}
            out.update({f"acc_group{g}": v for g, v in means.items()})
            out["acc_worst_group"] = min(means.values())
        if val is not None:
            v_acc, v_loss, v_counts = val
            out.update({f"val_acc_{k}": v for k, v in
                        fairness_metrics(v_acc, weights=v_counts).items()})
            out["val_loss"] = float(np.dot(v_loss, v_counts) / v_counts.sum())
        out.update(self.extra_metrics())
        return out

    def _state(self) -> Dict[str, Any]:
        raise NotImplementedError

    def _load(self, state: Dict[str, Any]) -> None:
        """Installs a checkpoint's state; raises (changing nothing) when it does not fit."""
        raise NotImplementedError

    def state_dict(self) -> Dict[str, Any]:
        """Everything that changes between rounds; with the config it continues a run exactly.
        Only tensors and plain values (NumPy arrays as tagged tensors,
        :func:`fastfair.sim.checkpoint.to_plain`), so ``torch.save`` / ``torch.load`` with its
        default ``weights_only=True`` round-trip it."""
        return to_plain({"version": self.version, "round": self.round,
                         "history": [dict(r) for r in self.history], **self._state()})

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from :meth:`state_dict`; raises, changing nothing, when it does not fit."""
        state = from_plain(state)
        if state.get("version") != self.version:
            raise ValueError(f"checkpoint version {state.get('version')!r} is not {self.version}")
        self._load(state)
        self.round = int(state["round"])
        self.history = [dict(r) for r in state["history"]]


class MethodRunner(Runner):
    """A runner of a method whose tiny per-client models train and evaluate on one torch
    thread (see :func:`torch_threads`) in one process."""

    def step(self) -> Dict[str, Any]:
        with torch_threads(1):
            return super().step()

    def evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        with torch_threads(1):
            return self._evaluate()

    def single_process(self, dist: Optional[Any]) -> None:
        """Refuses a multi-process launch (the method keeps per-client state in one process)."""
        if dist is not None and dist.world_size > 1:
            raise ValueError(f"rule {self.config.rule!r} runs in one process; launch it "
                             "without torchrun")
