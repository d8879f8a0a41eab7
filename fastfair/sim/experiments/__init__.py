"""Experiments (several rules on identical data, :mod:`.experiment`) and sweeps (rules x seeds x
grids as one batched program, :mod:`.sweep`), over what they share: checks, the run folder,
progress, callbacks and checkpoints (:mod:`.common`), and a run folder read back
(:func:`~.loading.load_run`)."""

from fastfair.sim.experiments.experiment import Experiment, ExperimentResult
from fastfair.sim.experiments.loading import load_run
from fastfair.sim.experiments.sweep import Sweep, SweepResult

__all__ = ["Experiment", "ExperimentResult", "Sweep", "SweepResult", "load_run"]
