"""The two layers whose batched form differs from m independent copies, made exact per client:
dropout with masks keyed by (client key, call, element), and batch norm whose statistics count a
client's real rows only.

:class:`CohortMode` intercepts ``torch.nn.functional.dropout`` / ``dropout1d`` / ``dropout2d`` /
``dropout3d`` and ``batch_norm`` (which ``nn.Dropout*`` and ``nn.BatchNorm*`` call) while one
client's forward pass runs under ``torch.func.vmap``. Everything else passes through untouched.

- Dropout: element ``i`` of the ``c``-th dropout call of a client is kept when
  :func:`fastfair.sim.seeding.keyed_uniform` of the client's key, ``c`` and ``i`` is ``>= p``, and
  kept elements are scaled by ``1 / (1 - p)`` as PyTorch does. The key is the client's own
  (:func:`fastfair.sim.seeding.step_keys`), so a client draws the same masks in any cohort, on
  any number of processes and on CPU or GPU alike.
- Batch norm in training mode: mean and (biased) variance over the rows a client really has in
  this minibatch (``valid``; padding rows excluded), running statistics updated with the unbiased
  variance ``var * n / (n - 1)`` as PyTorch does. In evaluation mode: PyTorch's own.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, Optional

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from fastfair.sim.seeding import keyed_uniform


class CohortMode(TorchFunctionMode):
    """Active around one client's forward pass (inside ``vmap``, or alone): ``key`` is the
    client's 0-dim int64 key of this step and ``valid`` its ``[B]`` bool mask of real minibatch
    rows. With ``channels_last`` (alone training on the CPU), 4-d inputs of 2-d convolutions
    and max pooling are passed in ``channels_last`` memory format (the values are the same):
    oneDNN's kernels for it run faster (docs/benchmarks.md, design measurements), and the
    layers after keep the format."""

    def __init__(self, key: torch.Tensor, valid: torch.Tensor,
                 channels_last: bool = False) -> None:
        super().__init__()
        self.key, self.valid, self.calls = key, valid, 0
        self.handlers = {**_HANDLERS, **_LAYOUT} if channels_last else _HANDLERS
        self.handled = False  # whether any call of the block went to a handler

    def __torch_function__(self, func, types, args=(), kwargs=None):
        handler = self.handlers.get(func)
        if handler is None:
            return func(*args, **(kwargs or {}))
        self.handled = True
        return handler(self, func, *args, **(kwargs or {}))

    def rows(self, batch: int) -> torch.Tensor:
        """The valid mask for an input of ``batch`` rows: the minibatch's own, or each row
        repeated when a module folded another dimension into the batch (``[B * T, ...]``)."""
        B = self.valid.shape[0]
        if batch == B:
            return self.valid
        if batch % B:
            raise ValueError(f"batch norm got {batch} rows in a minibatch of {B}: it cannot tell "
                             "a client's real rows from padding")
        return self.valid.repeat_interleave(batch // B)


def _channels_last(mode: CohortMode, func: Callable, input: torch.Tensor, *args: Any,
                   **kwargs: Any) -> Any:
    """``func`` on a 4-d ``input`` in ``channels_last`` memory format, its 4-d output in that
    format too (a convolution of one input channel returns the default one), so that the
    elementwise layers between, forward and backward, see one format."""
    if input.dim() != 4:
        return func(input, *args, **kwargs)
    out = func(input.contiguous(memory_format=torch.channels_last), *args, **kwargs)
    if isinstance(out, torch.Tensor) and out.dim() == 4:
        out = out.contiguous(memory_format=torch.channels_last)
    return out


def _dropout(mode: CohortMode, func: Callable, input: torch.Tensor, p: float = 0.5,
             training: bool = True, inplace: bool = False, *,
             feature_dims: int = 0) -> torch.Tensor:
    """Keyed dropout; ``feature_dims`` trailing dimensions share one mask value (dropoutNd)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    mode.calls += 1
    shape = tuple(input.shape[:input.dim() - feature_dims]) + (1,) * feature_dims
    keep = keyed_uniform(mode.key, mode.calls, shape, input.device) >= p
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    out = input * (keep.to(input.dtype) * scale)
    return input.copy_(out) if inplace else out


def _batch_norm(mode: CohortMode, func: Callable, input: torch.Tensor,
                running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
                weight: Optional[torch.Tensor] = None,
                bias: Optional[torch.Tensor] = None, training: bool = False,
                momentum: Optional[float] = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """Batch norm whose training statistics count the client's valid rows only."""
    if not training:
        return F.batch_norm(input, running_mean, running_var, weight, bias, False,
                            0.0 if momentum is None else momentum, eps)
    rows = mode.rows(input.shape[0]).to(input.dtype)
    channel = [1, -1] + [1] * (input.dim() - 2)
    dims = [0] + list(range(2, input.dim()))
    w = rows.reshape([-1] + [1] * (input.dim() - 1))
    n = rows.sum() * math.prod(input.shape[2:])
    mean = (input * w).sum(dims) / n.clamp(min=1)
    centered = input - mean.reshape(channel)
    var = (centered.square() * w).sum(dims) / n.clamp(min=1)
    out = centered * torch.rsqrt(var + eps).reshape(channel)
    if weight is not None:
        out = out * weight.reshape(channel)
    if bias is not None:
        out = out + bias.reshape(channel)
    if running_mean is not None and running_var is not None:
        assert momentum is not None  # ModuleModel refuses batch norm with momentum=None
        with torch.no_grad():
            unbiased = var.detach() * n / (n - 1).clamp(min=1)
            running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
            running_var.mul_(1 - momentum).add_(unbiased * momentum)
    return out


_HANDLERS: Dict[Callable, Callable[..., Any]] = {
    F.dropout: _dropout,
    F.dropout1d: functools.partial(_dropout, feature_dims=1),
    F.dropout2d: functools.partial(_dropout, feature_dims=2),
    F.dropout3d: functools.partial(_dropout, feature_dims=3),
    F.batch_norm: _batch_norm,
}
_LAYOUT: Dict[Callable, Callable[..., Any]] = {F.conv2d: _channels_last,
                                               F.max_pool2d: _channels_last}
