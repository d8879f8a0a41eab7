"""A cohort's local training and evaluation: their settings (:mod:`.settings`), the step
schedule (:mod:`.schedule`), the runs a training pass serves (:mod:`.lanes`), training by
kernel or autograd (:mod:`.local`) and evaluation in large batches (:mod:`.evaluate`). The
settings import without torch; the rest on first use."""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.training.evaluate import evaluate_clients  # noqa: F401
    from fastfair.sim.training.local import train_clients, train_lanes  # noqa: F401
    from fastfair.sim.training.schedule import LocalTrainingConfig  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.training.evaluate": ("evaluate_clients",),
    "fastfair.sim.training.local": ("train_clients", "train_lanes"),
    "fastfair.sim.training.schedule": ("LocalTrainingConfig",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
