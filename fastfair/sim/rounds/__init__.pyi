"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.sim.rounds.ditto import DittoSimulation as DittoSimulation
from fastfair.sim.rounds.engine import Simulation as Simulation
from fastfair.sim.rounds.fedevg import FedEvgSimulation as FedEvgSimulation
from fastfair.sim.rounds.registry import RUNNERS as RUNNERS
from fastfair.sim.rounds.registry import make_runner as make_runner
from fastfair.sim.rounds.registry import runner_class as runner_class
from fastfair.sim.rounds.runner import Runner as Runner
from fastfair.sim.rounds.superfed import SuperFedSimulation as SuperFedSimulation
