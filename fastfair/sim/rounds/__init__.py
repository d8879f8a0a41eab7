"""Round runners: what every runner shares (:mod:`.runner`), what a configuration builds
(:mod:`.build`), who is available (:mod:`.availability`), the rules' engine (:mod:`.engine`),
FedEvg (:mod:`.fedevg`), SuPerFed (:mod:`.superfed`), Ditto (:mod:`.ditto`) and the runner of
every name (:mod:`.registry`)."""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.rounds.ditto import DittoSimulation  # noqa: F401
    from fastfair.sim.rounds.engine import Simulation  # noqa: F401
    from fastfair.sim.rounds.fedevg import FedEvgSimulation  # noqa: F401
    from fastfair.sim.rounds.registry import RUNNERS, make_runner, runner_class  # noqa: F401
    from fastfair.sim.rounds.runner import Runner  # noqa: F401
    from fastfair.sim.rounds.superfed import SuperFedSimulation  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.rounds.ditto": ("DittoSimulation",),
    "fastfair.sim.rounds.engine": ("Simulation",),
    "fastfair.sim.rounds.fedevg": ("FedEvgSimulation",),
    "fastfair.sim.rounds.registry": ("RUNNERS", "make_runner", "runner_class"),
    "fastfair.sim.rounds.runner": ("Runner",),
    "fastfair.sim.rounds.superfed": ("SuperFedSimulation",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
