"""fastfair: fair federated aggregation at any scale.

Subpackages: ``fastfair.ops`` (compiled kernels over DLPack arrays), ``fastfair.aggregators``
(the aggregation rules), ``fastfair.reference`` (readable float64 oracles of every kernel and rule).
"""

from fastfair import aggregators, ops, reference
from fastfair._C import build_info, get_num_threads, set_num_threads

__version__ = "0.1.0"
__all__ = ["aggregators", "ops", "reference", "build_info", "get_num_threads", "set_num_threads",
           "__version__"]
