"""Models over flat parameters, one row per client, so that a cohort trains as one program:
logistic regression and the MLP (:mod:`.flat`), any ``torch.nn.Module`` (:mod:`.module`), the
cohort's dropout and batch norm (:mod:`.layers`) and the papers' networks by name (:mod:`.zoo`)."""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.models.catalog import build_model  # noqa: F401
    from fastfair.sim.models.flat import (  # noqa: F401
        MLP,
        FlatModel,
        LogisticRegression,
        check_model,
        make_model,
    )
    from fastfair.sim.models.module import ModuleModel  # noqa: F401
    from fastfair.sim.names import MODELS  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.models.flat": (
        "MLP", "FlatModel", "LogisticRegression", "check_model", "make_model"),
    "fastfair.sim.models.module": ("ModuleModel",),
    "fastfair.sim.models.catalog": ("build_model",),
    "fastfair.sim.names": ("MODELS",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
