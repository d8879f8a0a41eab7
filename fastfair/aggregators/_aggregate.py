"""Applying a round's coefficients to the client updates: :meth:`Aggregating.aggregate`, which
every :class:`~fastfair.aggregators.base.Aggregator` has."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, overload

import numpy as np

from fastfair import ops

if TYPE_CHECKING:
    import torch


class Aggregating:
    """The aggregation step of every rule; the framework of the result follows the updates'."""

    @overload
    def aggregate(self, updates: "torch.Tensor", coefficients: Any = None, *,
                  base: Optional["torch.Tensor"] = None, lr: float = 1.0,
                  out: Optional["torch.Tensor"] = None) -> "torch.Tensor": ...

    @overload
    def aggregate(self, updates: np.ndarray, coefficients: Any = None, *,
                  base: Optional[np.ndarray] = None, lr: float = 1.0,
                  out: Optional[np.ndarray] = None) -> np.ndarray: ...

    @overload
    def aggregate(self, updates: Sequence[Mapping[str, Any]], coefficients: Any = None, *,
                  base: Optional[Mapping[str, Any]] = None, lr: float = 1.0,
                  out: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]: ...

    @overload
    def aggregate(self, updates: Sequence[Sequence[Any]], coefficients: Any = None, *,
                  base: Any = None, lr: float = 1.0, out: Any = None) -> List[Any]: ...

    @overload
    def aggregate(self, updates: Any, coefficients: Any = None, *, base: Any = None,
                  lr: float = 1.0, out: Any = None) -> Any: ...

    def aggregate(self, updates: Any, coefficients: Any = None, *, base: Any = None,
                  lr: float = 1.0, out: Any = None) -> Any:
        r"""Applies round coefficients to the client updates.

        .. math:: \mathrm{base} \leftarrow \mathrm{base} - \mathrm{lr}\sum_i c_i X_i
           \quad\text{(or returns } \textstyle\sum_i c_i X_i \text{ without ``base``)}

        ``updates`` are pseudo-gradients ``X_i = global - local_i``: ``[m, *S]``, m lists of L
        arrays, N ``state_dict`` s or ``nn.Module`` s (a dict back; integer entries such as
        BatchNorm's ``num_batches_tracked`` are not averaged: see
        :func:`fastfair.ops.weighted_average`), or a :class:`fastfair.ops.Accumulator` already
        holding ``sum_i c_i X_i`` (then ``coefficients`` is None). Runs through
        :func:`fastfair.ops.weighted_average`.
        """
        if isinstance(updates, ops.Accumulator):
            if coefficients is not None:
                raise ValueError("coefficients must be None when updates is an Accumulator "
                                 "(it already holds the weighted sum)")
            total: Any = updates.result(normalize=False)  # one array, or a list of them
            stacked = [total] if isinstance(total, list) else total[None]
            return ops.weighted_average(stacked, [1.0], base=base, lr=lr, out=out)
        if coefficients is None:
            raise ValueError("coefficients is required: pass the output of weights()")
        return ops.weighted_average(updates, coefficients, base=base, lr=lr, out=out)
