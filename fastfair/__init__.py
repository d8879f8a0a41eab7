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

from fastfair._lazy import lazy_exports

__version__ = "0.1.0"
#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
