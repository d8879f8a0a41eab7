"""Experiments (several rules on identical data, :mod:`.experiment`) and sweeps (rules x seeds x
grids as one batched program, :mod:`.sweep`), over what they share: checks, the run folder,
progress, callbacks and checkpoints (:mod:`.common`), and a run folder read back
(:func:`~.loading.load_run`)."""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.experiments.experiment import Experiment, ExperimentResult  # noqa: F401
    from fastfair.sim.experiments.loading import load_run  # noqa: F401
    from fastfair.sim.experiments.sweep import Sweep  # noqa: F401
    from fastfair.sim.experiments.sweep_result import SweepResult  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.experiments.experiment": ("Experiment", "ExperimentResult"),
    "fastfair.sim.experiments.loading": ("load_run",),
    "fastfair.sim.experiments.sweep": ("Sweep",),
    "fastfair.sim.experiments.sweep_result": ("SweepResult",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
