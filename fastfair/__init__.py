"""fastfair: fair federated aggregation at any scale.

Subpackages: ``fastfair.ops`` (compiled kernels over DLPack arrays), ``fastfair.aggregators``
(the aggregation rules), ``fastfair.reference`` (readable float64 oracles of every kernel and rule).

These, and ``import fastfair`` itself, need NumPy alone. PyTorch is imported only where it is truly
needed: the simulator (``fastfair.sim``, ``pip install "fastfair[sim]"``), FedEvg
(``fastfair.methods.fedevg``), SuPerFed's local-model initialisation and the autograd reference
``fastfair.reference.superfed_gradients`` (``pip install "fastfair[torch]"``; without torch the
last three raise an ``ImportError`` that says so). Ops and rules also take torch tensors when torch
is installed, and return results in the framework of their inputs. Every ``state_dict()`` saves
with ``torch.save`` (read back by ``torch.load``'s weights-only default) or with
:func:`save_state` / :func:`load_state`, NumPy alone (:mod:`fastfair.state`).
"""

from typing import TYPE_CHECKING

from fastfair._C import build_info, get_num_threads, set_num_threads
from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    import fastfair.aggregators as aggregators  # noqa: F401
    import fastfair.ops as ops  # noqa: F401
    import fastfair.reference as reference  # noqa: F401
    from fastfair.state import StateDict, load_state, save_state  # noqa: F401

__version__ = "0.1.0"
__all__ = ["aggregators", "ops", "reference", "StateDict", "build_info", "get_num_threads",
           "load_state", "save_state", "set_num_threads", "__version__"]

#: Each submodule and the public names it defines, and the sub-packages, all imported on first
#: use (PEP 562): the command line imports this package for its version and build, and starts
#: without the rules, the kernels' wrappers and the oracles.
_EXPORTS = {"fastfair.state": ("StateDict", "load_state", "save_state")}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, ("aggregators", "ops", "reference"))
