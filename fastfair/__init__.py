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

import importlib
from typing import TYPE_CHECKING, Any

from fastfair import aggregators, ops
from fastfair._C import build_info, get_num_threads, set_num_threads
from fastfair.state import StateDict, load_state, save_state

if TYPE_CHECKING:
    from fastfair import reference

__version__ = "0.1.0"
__all__ = ["aggregators", "ops", "reference", "StateDict", "build_info", "get_num_threads",
           "load_state", "save_state", "set_num_threads", "__version__"]


def __getattr__(name: str) -> Any:
    # The oracles load on first use (``fastfair.reference``): the command line, which imports
    # this package for its rules, starts without them.
    if name == "reference":
        return importlib.import_module("fastfair.reference")
    raise AttributeError(f"module 'fastfair' has no attribute {name!r}")
