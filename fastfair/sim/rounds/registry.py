"""The round runner of every rule and method name (:data:`RUNNERS`): every rule of the
aggregators' registry runs in :class:`~fastfair.sim.rounds.engine.Simulation`, FedEvg, SuPerFed
and Ditto in their own runners."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

from fastfair._options import check_name
from fastfair.aggregators.registry import RULES
from fastfair.methods import METHODS
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.distributed import Distributed
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.rounds.ditto import DittoSimulation
from fastfair.sim.rounds.engine import Simulation
from fastfair.sim.rounds.fedevg import FedEvgSimulation
from fastfair.sim.rounds.runner import Runner
from fastfair.sim.rounds.superfed import SuperFedSimulation

#: The runner of each method of :data:`fastfair.methods.METHODS` (tests/sim/rounds/test_registry.py
#: checks that every one has its runner); every rule of the registry runs in :class:`Simulation`.
RUNNERS: Dict[str, Type[Runner]] = {
    "fedevg": FedEvgSimulation, "superfed-mm": SuperFedSimulation,
    "superfed-lm": SuperFedSimulation, "ditto": DittoSimulation}


def runner_class(rule: str) -> Type[Runner]:
    """The runner class of a rule or method name (ValueError listing them all if unknown)."""
    check_name("rule", rule, [*RULES, *METHODS])
    return RUNNERS.get(rule, Simulation)


def make_runner(config: SimulationConfig, dist: Optional[Distributed] = None, *,
                dataset: Optional[FederatedDataset] = None,
                model: Optional[FlatModel] = None, plan: Any = None) -> Runner:
    """The runner of ``config.rule`` (a :class:`Simulation` for the rules, the method's own
    runner for FedEvg, SuPerFed and Ditto) on ``dataset`` / ``model`` when given, from ``plan``
    (what its :meth:`~fastfair.sim.rounds.runner.Runner.validate` returned) when given."""
    return runner_class(config.rule)(config, dist, dataset=dataset, model=model, plan=plan)
