"""What every simulation runner shares: the choice of evaluation clients, per-round records with
evaluation metrics on evaluation rounds, and versioned checkpoints. The classification engine
(:class:`~fastfair.sim.rounds.engine.Simulation`) and the FedEvg / SuPerFed runners subclass it, so
an :class:`~fastfair.sim.experiments.experiment.Experiment` writes the same files for all of
them."""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from fastfair.sim.checkpoint import from_plain, to_plain
from fastfair.sim.data.base import ClientBatch, FederatedDataset
from fastfair.sim.data.catalog import build_dataset, check_files
from fastfair.sim.distributed import Distributed
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.population import PopulationAvailability, check_population, with_population
from fastfair.sim.process import torch_threads
from fastfair.sim.reporting.metrics import (
    auroc_metrics,
    class_metrics,
    client_auroc,
    fairness_metrics,
    gini,
)
from fastfair.sim.reporting.stats import DIVERGED, diverged_round
from fastfair.sim.rounds.availability import Availability, build_availability, check_availability
from fastfair.sim.rounds.build import model_for
from fastfair.sim.seeding import Stream, numpy_rng, raw_seed

Result = Tuple[np.ndarray, np.ndarray, np.ndarray]
#: A round's evaluation: (accuracy, loss, counts) on the test split, and on the validation
#: split (None without one).
Evaluation = Tuple[Result, Optional[Result]]
LOG = logging.getLogger("fastfair")


class Runner:
    """What every round runner is: one template of construction, rounds, evaluation and
    checkpoints, the method supplying only what differs.

    Construction (:meth:`__init__`) checks the configuration, then :meth:`_build` (the rule,
    the server optimiser, the method's options: everything that can be refused before data are
    read), the data set (:meth:`_dataset`), the model (:meth:`_model`) and its initial
    parameters from the seed, the availability model, and finally :meth:`_setup` (the method's
    own state and its evaluation data). A round is :meth:`sample` then ``_play`` then
    :meth:`finish` (:meth:`step` does all three; a sweep calls them for many runs at once).
    Subclasses implement ``_play`` (one round with a non-empty cohort), ``_evaluate``,
    ``_state`` and ``_load`` (with :meth:`_checked` for every array a checkpoint holds).

    ``unused`` names the configuration fields a runner does not use, each with what to do
    instead; a run that sets one of them to a non-default value is refused before it starts
    (:meth:`check_config`). ``takes_model``: whether a user's model may replace
    ``config.model``. ``plays_batched``: whether a sweep may play several runs of this runner
    as one batched program (:meth:`fastfair.sim.rounds.engine.Simulation.play_round`)."""

    version = 2
    unused: Dict[str, str] = {}
    takes_model = True
    plays_batched = False
    config: Any
    history: List[Dict[str, Any]]
    round: int
    eval_ids: np.ndarray
    device: torch.device = torch.device("cpu")
    model: Optional[FlatModel]

    def __init__(self, config: Any, dist: Optional[Distributed] = None, *,
                 dataset: Optional[FederatedDataset] = None,
                 model: Optional[FlatModel] = None, plan: Any = None) -> None:
        """``dataset`` (e.g. an :class:`~fastfair.sim.data.arrays.ArrayDataset` of your own
        per-client arrays) replaces ``config.dataset``, and ``model`` (e.g. a
        :class:`~fastfair.sim.models.module.ModuleModel` around your module) replaces
        ``config.model`` where the method trains a model (``takes_model``). ``plan``: what
        :meth:`validate` returned for this configuration (None: resolved here)."""
        config = config.with_clients_of(dataset)  # clients left at default: the data set's
        self.check_config(config)
        if model is not None and not self.takes_model:
            raise ValueError(f"rule {config.rule!r} trains a model of its own; it takes no model")
        self.config = config
        self.dist = self._process(dist)
        self._build(plan if plan is not None else self.resolve(config))
        self.dataset = self._dataset(dataset)
        if self.dataset.num_clients != config.clients:
            raise ValueError(f"config.clients is {config.clients} but the dataset has "
                             f"{self.dataset.num_clients} clients")
        self.model = self._model(model)
        if self.model is not None:
            init = torch.Generator().manual_seed(raw_seed(config.seed, Stream.MODEL_INIT))
            self.params = self.model.init(init).float().to(self.device)
        self.availability: Union[Availability, PopulationAvailability] = build_availability(
            config.availability, config.clients, config.per_round, config.seed,
            config.availability_options)
        if getattr(config, "population", None) is not None:  # devices on a virtual clock
            self.availability, self.dataset = with_population(
                config, self.dataset, 0 if self.model is None else int(self.params.numel()),
                lambda n: build_availability(config.availability, config.clients, n,
                                             config.seed, config.availability_options))
        self.round = 0
        self.history = []
        self._setup()

    # ------------------------------------------------------------------ what a method supplies
    def _process(self, dist: Optional[Distributed]) -> Distributed:
        """This process's place in the run (one process unless given)."""
        return dist or Distributed()

    @classmethod
    def resolve(cls, config: Any) -> Any:
        """What the runner resolves of ``config``'s rule settings before any data are read,
        refusing bad ones (the rules' engine: a
        :class:`~fastfair.sim.rounds.build.RulePlan`); None where there is nothing."""
        return None

    def _build(self, plan: Any) -> None:
        """Takes what the configuration names besides data and model from ``plan`` (what
        :meth:`resolve` returned) or builds it (method options), before any data are read."""

    def _dataset(self, dataset: Optional[FederatedDataset]) -> FederatedDataset:
        """The data set the run trains on: the user's ``dataset``, else the configuration's."""
        return build_dataset(self.config) if dataset is None else dataset

    def _model(self, model: Optional[FlatModel]) -> Optional[FlatModel]:
        """The flat model (``model``, else the configuration's for the data set); None for a
        method whose global model is not a flat model."""
        return model or model_for(self.config, self.dataset)

    def _setup(self) -> None:
        """The method's own state and its evaluation data, once everything else is built."""

    # ------------------------------------------------------------------ the round
    @classmethod
    def check_config(cls, config: Any) -> None:
        """Raises ValueError naming the first field ``config`` sets that this runner ignores."""
        for name in config.non_default_fields():
            if name in cls.unused:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"rule {config.rule!r} does not use {name} ({flag}): "
                                 f"{cls.unused[name]}")

    @classmethod
    def validate(cls, config: Any) -> Any:
        """Checks everything about ``config`` that needs no training data (names, options,
        unused fields, whether the data set's files are there), so that a bad run is refused
        before anything is built or written. Returns :meth:`resolve`'s plan, for the runner of
        ``config`` (its ``plan``)."""
        cls.check_config(config)
        check_availability(config.availability, config.availability_options)
        check_population(getattr(config, "population", None),
                         getattr(config, "population_options", {}))
        check_files(config)
        return cls.resolve(config)

    def step(self) -> Dict[str, Any]:
        """Plays round ``self.round + 1``; returns its record (with evaluation metrics on
        evaluation rounds)."""
        t = self.round + 1
        started = time.perf_counter()
        ids = self.sample(t)
        # Nobody available (Bernoulli availability): the model stays as it is.
        record = self._play(t, ids) if ids.shape[0] else {"participants": 0}
        return self.finish(t, record, started)

    def sample(self, t: int) -> np.ndarray:
        """The clients available and sampled in round ``t``: ``[m]`` int64 ids (m may be 0)."""
        return self.availability.sample(t)

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

    def finish(self, t: int, record: Dict[str, Any], started: float,
                evaluation: Optional[Evaluation] = None) -> Dict[str, Any]:
        """Closes round ``t`` (played from ``started``, a ``time.perf_counter()``): appends its
        ``record`` to the history with evaluation metrics on evaluation rounds (from
        ``evaluation`` when the caller scored the model already, as a sweep does), in the last
        round of a binary task each evaluation client's AUROC (``auroc_client<id>``), and the
        seconds it took; returns the record. A round in which the run diverged (the record's
        own ``diverged``, or :meth:`divergence`) is recorded with ``diverged`` (why) and no
        evaluation, and logged as a warning naming the rule, seed and options."""
        self.round = t
        record = {"round": t, **record, **self.availability.round_record()}
        why = record.get(DIVERGED) or self.divergence()
        if why:
            record[DIVERGED] = why
            self._warn_diverged(t, why)
        elif self.evaluation_due(t):
            record.update(self.evaluate_metrics(evaluation))
        if t == self.config.rounds and not why:
            per_client = self.client_auroc()
            if per_client is not None:
                record.update({f"auroc_client{int(k)}": float(v)
                               for k, v in zip(self.eval_ids, per_client)})
        record["seconds"] = time.perf_counter() - started
        self.history.append(record)
        return record

    def divergence(self) -> Optional[str]:
        """Why the global model cannot be used any more, or None: its parameters are not all
        finite (checked after every round whatever the rule; a method without a flat model
        has none to check). One float32 sum over them, which NaN and inf reach (0.4 ms for
        10^6 parameters on one core, a sixth of ``isfinite().all()``); only a sum that
        overflowed is checked element by element."""
        params = getattr(self, "params", None)
        if params is None or math.isfinite(float(params.sum())) \
                or bool(torch.isfinite(params).all()):
            return None
        return "the global model is not finite after the server step"

    @property
    def diverged(self) -> Optional[int]:
        """The round in which the run diverged, or None: it plays no round after it, and its
        record of that round holds ``diverged`` (why) and no evaluation."""
        return diverged_round(self.history)

    def _warn_diverged(self, t: int, why: str) -> None:
        c = self.config
        options = f", options {dict(c.rule_options)}" if c.rule_options else ""
        LOG.warning("%s (seed %d%s) diverged at round %d: %s; it stops there and counts in no "
                    "summary (lower lr, --lr, now %g, or the server's step size)", c.rule,
                    c.seed, options, t, why, c.lr)

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

    def binary_scores(self) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(scores [N], labels [N], offsets [E + 1])`` of the global model on the evaluation
        clients' test samples, for a binary task (two classes, one label per sample); None
        for other tasks and for methods without one global model."""
        return None

    def class_scores(self) -> Optional[
            Tuple[Optional[np.ndarray], np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """``(top5 [E] or None, confidence [R], correct [R], labels [R], offsets [E + 1])`` of
        the global
        model on the evaluation clients' test samples
        (:func:`~fastfair.sim.training.evaluate.class_scores`), for a classification task when
        the run asks for them (``class_metrics``); None otherwise and for methods without one
        global model."""
        return None

    def client_auroc(self) -> Optional[np.ndarray]:
        """``[E]`` AUROC of the global model on each evaluation client's test samples (NaN
        for a client whose samples hold one class); None unless the task is binary
        (:meth:`binary_scores`)."""
        scored = self.binary_scores()
        return None if scored is None else client_auroc(*scored)

    def global_state_dict(self) -> Dict[str, torch.Tensor]:
        """The global model now, as named tensors: a module's own ``state_dict`` (ready for
        ``module.load_state_dict``) for a :class:`~fastfair.sim.models.module.ModuleModel`."""
        assert self.model is not None  # a method without a flat model (FedEvg) overrides this
        return self.model.state_dict(self.params)

    def evaluate_validation(self) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`evaluate` on the validation split of the evaluation clients that have one
        (None when the run holds out none)."""
        return None

    def evaluate_metrics(self, evaluation: Optional[Evaluation] = None) -> Dict[str, float]:
        """The fairness summary of client accuracy (``acc_*``), the sample-weighted test loss,
        for a binary task the same of client AUROC with the pooled AUROC (``auroc_*``,
        :func:`~fastfair.sim.reporting.metrics.auroc_metrics`), top-5 accuracy, calibration and
        per-class accuracy when the run asks for them (``acc5_*``, ``ece_*``, ``mce_*``,
        ``acc_class<c>``,
        :func:`~fastfair.sim.reporting.metrics.class_metrics`),
        the same on the validation split (``val_acc_*``, ``val_loss``) when the run holds one
        out, and :meth:`extra_metrics`. ``evaluation`` gives the two results (test, and
        validation or None) when the caller computed them (a batched sweep)."""
        test, val = evaluation if evaluation is not None else (self.evaluate(),
                                                                self.evaluate_validation())
        acc, loss, counts = test
        out = {f"acc_{k}": v for k, v in fairness_metrics(acc, weights=counts).items()}
        out["test_loss"] = float(np.dot(loss, counts) / counts.sum())
        scored = self.binary_scores()
        if scored is not None:
            out.update(auroc_metrics(client_auroc(*scored), counts, scored[0], scored[1]))
        classes = self.class_scores()
        if classes is not None:
            out.update(class_metrics(*classes, counts))
        groups = self.dataset.groups(self.eval_ids)
        if groups is not None:
            # Each group's mean client accuracy; the worst of them is the fairness target, the
            # Gini over them the spread across groups.
            present = np.unique(groups)
            means = {int(g): float(acc[groups == g].mean()) for g in present}
            out.update({f"acc_group{g}": v for g, v in means.items()})
            out["acc_worst_group"] = min(means.values())
            out["acc_gini_groups"] = gini(list(means.values()))
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

    @staticmethod
    def _checked(state: Dict[str, Any], key: str, like: Any) -> Any:
        """``state[key]`` as the type, dtype and device of ``like`` (a tensor or a NumPy
        array), refused with ValueError naming ``key`` when its shape differs."""
        if key not in state:
            raise ValueError(f"checkpoint has no {key!r}")
        if isinstance(like, torch.Tensor):
            value: Any = torch.as_tensor(state[key]).to(dtype=like.dtype, device=like.device)
        else:
            value = np.asarray(state[key], dtype=like.dtype)
        if tuple(value.shape) != tuple(like.shape):
            raise ValueError(f"checkpoint {key} has shape {tuple(value.shape)}; this run's has "
                             f"{tuple(like.shape)}")
        return value.clone() if isinstance(value, torch.Tensor) else value.copy()

    def state_dict(self) -> Dict[str, Any]:
        """Everything that changes between rounds; with the config it continues a run exactly.
        Only tensors and plain values (NumPy arrays as tagged tensors,
        :func:`fastfair.sim.checkpoint.to_plain`), so ``torch.save`` / ``torch.load`` with its
        default ``weights_only=True`` round-trip it."""
        return to_plain({"version": self.version, "round": self.round,
                         "history": [dict(r) for r in self.history],
                         "availability": self.availability.state_dict(), **self._state()})

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from :meth:`state_dict`; raises, changing nothing, when it does not fit."""
        state = from_plain(state)
        if state.get("version") != self.version:
            raise ValueError(f"checkpoint version {state.get('version')!r} is not {self.version}")
        rounds, history = state.get("round"), state.get("history")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or not isinstance(
                history, list) or not 0 <= rounds <= self.config.rounds or len(history) != rounds:
            raise ValueError(f"checkpoint is inconsistent: round {rounds!r} with "
                             f"{len(history) if isinstance(history, list) else history!r} "
                             f"round records, of a run of {self.config.rounds} rounds")
        before = self.availability.state_dict()
        self.availability.load_state_dict(state.get("availability") or {})
        try:
            self._load(state)
        except Exception:
            self.availability.load_state_dict(before)
            raise
        self.round = int(state["round"])
        self.history = [dict(r) for r in state["history"]]


class MethodRunner(Runner):
    """A runner of a method whose tiny per-client models train and evaluate on one torch
    thread (see :func:`torch_threads`) in one process."""

    #: Why the method needs flat parameter rows, i.e. a model without buffers (batch norm)
    #: trained on one label per sample; None where it takes any model.
    flat_rows_only: Optional[str] = None

    def _model(self, model: Optional[FlatModel]) -> Optional[FlatModel]:
        model = super()._model(model)
        if self.flat_rows_only and model is not None and (model.num_buffers
                                                          or self.dataset.label_shape):
            raise ValueError(self.flat_rows_only)
        return model

    def step(self) -> Dict[str, Any]:
        with torch_threads(1):
            return super().step()

    def evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        with torch_threads(1):
            return self._evaluate()

    def _process(self, dist: Optional[Distributed]) -> Distributed:
        """Refuses a multi-process launch (the method keeps per-client state in one process)."""
        if dist is not None and dist.world_size > 1:
            raise ValueError(f"rule {self.config.rule!r} runs in one process; launch it "
                             "without torchrun")
        return dist or Distributed()
