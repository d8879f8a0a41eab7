"""Experiments (several rules on identical data, :mod:`.experiment`) and sweeps (rules x seeds x
grids as one batched program, :mod:`.sweep`), over what they share: checks, the run folder,
progress, callbacks and checkpoints (:mod:`.common`)."""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.experiments.experiment import Experiment, ExperimentResult  # noqa: F401
    from fastfair.sim.experiments.sweep import Sweep, SweepResult  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.experiments.experiment": ("Experiment", "ExperimentResult"),
    "fastfair.sim.experiments.sweep": ("Sweep", "SweepResult"),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
