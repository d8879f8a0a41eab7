"""The types of the aggregators' round methods: host ids and vectors, and torch's tensors, which
the results follow (a type checker sees ``torch.Tensor``; at run time torch is not imported)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor
else:
    Tensor = Any

#: Client ids ``[m]`` on the host: a NumPy integer array or a sequence of ints.
HostIds = Union[np.ndarray, Sequence[int]]
#: A per-client vector ``[m]`` on the host (losses, sample counts).
HostVector = Union[np.ndarray, Sequence[float]]
#: Ids of either kind, and the optional sample counts of a round.
AnyIds = Union[HostIds, Tensor]
Counts = Optional[Union[HostVector, Tensor]]
