"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.sim.experiments.experiment import Experiment as Experiment
from fastfair.sim.experiments.experiment import ExperimentResult as ExperimentResult
from fastfair.sim.experiments.loading import load_run as load_run
from fastfair.sim.experiments.sweep import Sweep as Sweep
from fastfair.sim.experiments.sweep_result import SweepResult as SweepResult
