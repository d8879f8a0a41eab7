"""The settings of local training (:class:`TrainingSettings`: the model, the rounds, the local
steps and the client learning rate over rounds) and of evaluation (:class:`EvaluationSettings`).
Torch-free: the command line reads them to make its options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from fastfair.sim import names
from fastfair.sim.lr_schedule import LRSchedule, parse_lr_schedule, round_lr
from fastfair.sim.settings import (
    DATA,
    EVALUATION,
    TRAINING,
    Settings,
    at_least_one,
    check_ranges,
    doc,
    named,
    refuse_unused,
)

#: The values of ``precision``, the arithmetic of local training's forward and backward passes,
#: and the torch dtype of each's autocast (None: none; :mod:`fastfair.sim.training.precision`).
PRECISIONS: Dict[str, Optional[str]] = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class TrainingSettings(Settings):
    """The model (``model`` None: the data set's default, :func:`fastfair.sim.names.get_dataset`)
    and local minibatch SGD: ``rounds`` of ``epochs`` passes (or ``local_steps`` steps) of
    ``batch_size`` samples at the client rate :meth:`client_lr` of each round, from ``lr`` under
    ``lr_schedule`` or the per-round factor ``lr_decay``. The schedule is read once, when the
    settings are made."""

    rounds: int = field(default=200, metadata=doc(DATA, "rounds of training"))
    model: Optional[str] = field(default=None, metadata=doc(
        TRAINING, "None: the data set's default (" + ", ".join(
            f"{n}: {names.get_dataset(n).default_model}" for n in names.list_datasets()) + ")",
        choices=tuple(names.list_models())))
    hidden: int = field(default=64, metadata=doc(TRAINING, "MLP hidden width"))
    epochs: int = field(default=1, metadata=doc(TRAINING, "local epochs E"))
    local_steps: Optional[int] = field(default=None, metadata=doc(
        TRAINING, "H local minibatch steps (overrides --epochs)"))
    batch_size: int = field(default=32, metadata=doc(TRAINING, "local minibatch size"))
    lr: float = field(default=0.1, metadata=doc(TRAINING, "client learning rate"))
    lr_decay: float = field(default=1.0, metadata=doc(TRAINING, "per-round lr factor"))
    lr_schedule: Optional[str] = field(default=None, metadata=doc(
        TRAINING, "the client lr over rounds, in place of --lr-decay: step:gamma=G,every=N "
        "(lr G^floor((t-1)/N)) or cosine:min=M[,rounds=T] (from lr to M over T rounds, default "
        "--rounds); docs/simulator.md", metavar="KIND:KEY=VALUE,..."))

    def _check(self) -> None:
        at_least_one(self, "rounds", "batch_size", "epochs", "hidden")
        if self.local_steps is not None and self.local_steps < 1:
            raise ValueError(f"{named('local_steps')} must be >= 1 or None; got "
                             f"{self.local_steps}")
        if self.model is not None and self.model not in names.list_models():
            raise ValueError(f"{named('model')} must be one of "
                             f"{', '.join(map(str, [*names.list_models(), None]))}; got "
                             f"{self.model!r}")
        check_ranges(self, ("lr", self.lr > 0, "> 0"),
                     ("lr_decay", 0 < self.lr_decay <= 1, "in (0, 1]"))
        self._schedule: Optional[LRSchedule] = None
        if self.lr_schedule is not None:
            if self.lr_decay != 1.0:
                raise ValueError("lr_decay (--lr-decay) and lr_schedule (--lr-schedule) both "
                                 "schedule the client lr: give one (lr_decay d is "
                                 f"step:gamma={self.lr_decay:g},every=1)")
            self._schedule = parse_lr_schedule(self.lr_schedule, self.lr, self.rounds)
        refuse_unused(self, {"epochs": self.local_steps is not None},
                      f"local_steps={self.local_steps!r}")

    def client_lr(self, t: int) -> float:
        """The client learning rate of round ``t`` (1-based): ``lr`` under ``lr_schedule``, or
        under the per-round factor ``lr_decay`` (:func:`fastfair.sim.lr_schedule.round_lr`)."""
        return round_lr(self.lr, t, self.lr_decay, self._schedule)


@dataclass
class EvaluationSettings(Settings):
    """What is measured and how often: the global model (or, with ``eval_average_iterates``,
    the running average of the global models) on ``eval_clients`` clients every
    ``eval_every`` rounds, with the ``class_metrics`` and a ``validation`` split on request,
    and every round's ``train_loss`` on request."""

    eval_every: int = field(default=5, metadata=doc(EVALUATION, "evaluate every N rounds"))
    eval_clients: int = field(default=1000, metadata=doc(
        EVALUATION, "clients evaluated (a fixed random subset when K is larger)"))
    class_metrics: bool = field(default=False, metadata=doc(
        EVALUATION, "also report top-5 accuracy (acc5_*, more than 5 classes) and the expected "
        "and maximum calibration errors (ece_*, mce_*; 15 confidence bins) of the global model "
        "on every evaluation client's test samples: one more inference pass an evaluation"))
    # fraction of each client's training samples held out to choose hyperparameters on (0: none)
    validation: float = field(default=0.0, metadata=doc(
        EVALUATION, "hold out this fraction of each client's training samples as a validation "
        "split (val_* metrics; a sweep chooses grid points on it)", metavar="FRACTION"))
    eval_average_iterates: bool = field(default=False, metadata=doc(
        EVALUATION, "evaluate the running average of the global models after each server "
        "step, (w_1 + ... + w_t) / t, instead of the last one (AFL's output, as its authors "
        "evaluate it)"))
    train_loss: bool = field(default=False, metadata=doc(
        EVALUATION, "report every round's train_loss (the received model's mean loss on the "
        "cohort's training rows) even where the rule does not weigh by losses: one more "
        "inference pass over the cohort a round for models other than the logreg kernel's"))

    def _check(self) -> None:
        at_least_one(self, "eval_every", "eval_clients")
        if not 0 <= self.validation <= 0.5:
            raise ValueError(f"{named('validation')} must be in [0, 0.5]; got "
                             f"{self.validation}")
