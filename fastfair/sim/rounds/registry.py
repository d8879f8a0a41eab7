"""The round runner of every rule and method name (:data:`RUNNERS`): every rule of the
aggregators' registry runs in :class:`~fastfair.sim.rounds.engine.Simulation`, each method of
:data:`fastfair.methods.METHODS` in the runner of its options class."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Type

from fastfair._options import check_name
from fastfair._table import Table
from fastfair.aggregators.registry import RULES
from fastfair.methods import METHODS
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.distributed import Distributed
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.rounds.engine import Simulation
from fastfair.sim.rounds.runner import Runner

#: The runner of each method options class (``"module:Name"``, as :data:`METHODS` names it):
#: every method name whose options are that class runs in that runner.
RUNNER_OF_OPTIONS = {
    "fastfair.methods.fedevg:FedEvgOptions": "fastfair.sim.rounds.fedevg:FedEvgSimulation",
    "fastfair.methods.superfed:SuperFedOptions":
        "fastfair.sim.rounds.superfed:SuperFedSimulation",
    "fastfair.methods.ditto:DittoOptions": "fastfair.sim.rounds.ditto:DittoSimulation",
}


def runners_of(methods: Table[Any],
               runner_of_options: Mapping[str, str] = RUNNER_OF_OPTIONS) -> Table[Type[Runner]]:
    """The table of each name of ``methods`` -> its runner class, keyed by the methods' own
    names and importing no runner until looked up.

    Parameters
    ----------
    methods
        A table of method options classes given as ``"module:Name"`` targets (:data:`METHODS`).
    runner_of_options
        Each options class's ``"module:Name"`` -> its runner's ``"module:Name"``.

    Raises
    ------
    ValueError
        If a method's options class has no runner, naming the method and the class.
    """
    targets = {}
    for name in methods:
        options = methods.target(name)
        if options not in runner_of_options:
            raise ValueError(f"method {name!r} has options {options!r} and no runner; add its "
                             "runner to fastfair.sim.rounds.registry.RUNNER_OF_OPTIONS")
        targets[name] = runner_of_options[options]
    return Table("method runner", targets=targets)


#: The runner of each method of :data:`fastfair.methods.METHODS`, by the same names; every rule
#: of the registry runs in :class:`Simulation`.
RUNNERS = runners_of(METHODS)


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
