"""Round runners: what every runner shares (:mod:`.runner`), what a configuration builds
(:mod:`.build`), who is available (:mod:`.availability`), the rules' engine (:mod:`.engine`),
FedEvg (:mod:`.fedevg`), SuPerFed (:mod:`.superfed`) and the runner of every name
(:mod:`.registry`)."""

from fastfair.sim.rounds.engine import Simulation
from fastfair.sim.rounds.fedevg import FedEvgSimulation
from fastfair.sim.rounds.registry import RUNNERS, make_runner, runner_class
from fastfair.sim.rounds.runner import Runner
from fastfair.sim.rounds.superfed import SuperFedSimulation

__all__ = ["FedEvgSimulation", "RUNNERS", "Runner", "Simulation", "SuperFedSimulation",
           "make_runner", "runner_class"]
