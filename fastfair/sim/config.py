"""Every knob of a simulation: the composition of the layers' settings, each defined and checked
beside the layer it configures (:mod:`fastfair.sim.settings` says how). Its flat field names are
the serialised (``config.json``, ``sweep.json``), command-line and configuration-file form;
``fastfair simulate`` and ``fastfair sweep`` make their options from the fields' metadata."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional

from fastfair.sim import names
from fastfair.sim.data.settings import DataSettings
from fastfair.sim.population.settings import PopulationSettings
from fastfair.sim.rounds.settings import DEVICE, ExecutionSettings, RuleSettings
from fastfair.sim.settings import (
    DATA,
    EVALUATION,
    EXECUTION,
    RULES,
    TRAINING,
    doc,
    ordered_fields,
    refuse_unused,
)
from fastfair.sim.training.settings import EvaluationSettings, TrainingSettings

if TYPE_CHECKING:
    from fastfair.sim.data.base import FederatedDataset

__all__ = ["DATA", "DEVICE", "EVALUATION", "EXECUTION", "RULES", "TRAINING", "SimulationConfig",
           "doc"]


@dataclass
class SimulationConfig(EvaluationSettings, ExecutionSettings, PopulationSettings,
                       TrainingSettings, DataSettings, RuleSettings):
    """Every knob of one run: the rule's settings (:class:`~fastfair.sim.rounds.settings.
    RuleSettings`), the data's (:class:`~fastfair.sim.data.settings.DataSettings`), local
    training's (:class:`~fastfair.sim.training.settings.TrainingSettings`), the population's
    (:class:`~fastfair.sim.population.settings.PopulationSettings`), evaluation's and the run's
    (:class:`~fastfair.sim.training.settings.EvaluationSettings`,
    :class:`~fastfair.sim.rounds.settings.ExecutionSettings`). The defaults (100 Synthetic(1, 1)
    clients, 10 per round, 200 rounds) compare rules in seconds per rule on 2 cores.

    Each layer checks its own fields when the configuration is made, then this class checks
    what spans layers (the model against the data set): a wrong type is a ``TypeError`` and a
    value out of range a ``ValueError``, both naming the field.
    """

    def _check(self) -> None:
        model = self.model or names.get_dataset(self.dataset).default_model
        refuse_unused(self, {"hidden": model != "mlp"},
                      f"dataset={self.dataset!r}, model={self.model!r}")
        names.check_pair(self.dataset, self.model)

    def to_dict(self) -> Dict[str, Any]:
        """The flat fields in their saved order (:func:`fastfair.sim.settings.ordered_fields`),
        as ``config.json`` and ``sweep.json`` hold them."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in ordered_fields(type(self))}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SimulationConfig":
        """The configuration of the flat fields ``d`` (those of :meth:`to_dict`, or some of
        them): ValueError naming the keys that are not fields."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown configuration keys: {', '.join(unknown)}")
        return cls(**d)

    def with_clients_of(self, dataset: Optional[FederatedDataset]) -> "SimulationConfig":
        """This configuration for a run on ``dataset``, a data set given in place of
        ``self.dataset`` (e.g. an :class:`~fastfair.sim.data.arrays.ArrayDataset`): ``clients``
        left at its default becomes the data set's ``num_clients``; one set otherwise stays
        (a runner refuses it when it differs). ``dataset`` None: this configuration.

        Raises
        ------
        ValueError
            The data set has fewer clients than ``per_round``.
        """
        if dataset is None or "clients" in self.non_default_fields() \
                or self.clients == dataset.num_clients:
            return self
        k = int(dataset.num_clients)
        if self.per_round > k:
            raise ValueError(f"the data set given has {k} clients, fewer than per_round "
                             f"({self.per_round}): set per_round (--per-round) to at most {k}")
        return dataclasses.replace(self, clients=k)
