r"""The server step on the clients' models, as pure functions of NumPy arrays.

With :math:`w` the model sent (L arrays), :math:`w_i` the m replies and :math:`c` the rule's
coefficients, the combined pseudo-gradient is :math:`g = \sum_i c_i (w - w_i)`. Every function
here makes one multi-tensor pass of :func:`fastfair.ops.weighted_average` per dtype over the
replies' arrays (a model of one float dtype is one pass) and never forms the updates
:math:`w - w_i`; integer and boolean arrays (e.g. batch-norm counters) are combined in float64
and rounded back to their dtype. Arrays are told apart by their dtype's kind, never its name:
IEEE half, single and double floats in either byte order are combined exactly (non-native byte
order through a native copy, swapped back), and every other layout (``longdouble``, complex,
structured, strings) is refused by :func:`check_model_dtypes`. :func:`checked_parts` checks
the rule and the server optimiser a strategy combines.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from fastfair import ops
from fastfair.aggregators.base import Aggregator
from fastfair.aggregators.server_opt import SGD, ServerOptimizer

#: Item sizes of the IEEE floats the fused pass takes (half, single, double).
_IEEE_FLOAT_SIZES = (2, 4, 8)


def is_ieee_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is an IEEE half, single or double float, in either byte order (by its
    kind and item size, never its name: ``>f4`` is a float, ``longdouble`` is not IEEE)."""
    return dtype.kind == "f" and dtype.itemsize in _IEEE_FLOAT_SIZES


def checked_parts(aggregator: Aggregator, server_optimizer: Optional[ServerOptimizer]
                  ) -> ServerOptimizer:
    """The server optimiser a strategy steps with (``SGD(lr=1.0)`` for None), once the rule
    and the optimiser are checked: a rule (not an optimiser) that aggregates trained models
    (not gradients at the received model), and a fastfair optimiser; TypeError or ValueError
    naming the argument and the fix otherwise."""
    if isinstance(aggregator, ServerOptimizer):
        raise TypeError(f"aggregator is the server optimiser {aggregator!r}: pass a rule as "
                        "aggregator and the optimiser as server_optimizer=, e.g. "
                        f"FastFairStrategy(FedAvg(num_clients), server_optimizer="
                        f"{aggregator!r})")
    if not isinstance(aggregator, Aggregator):
        raise TypeError("aggregator must be a fastfair rule (e.g. "
                        "fastfair.aggregators.FedAvg(num_clients)); got "
                        f"{type(aggregator).__name__}")
    if aggregator.expects_gradients:
        raise ValueError(f"aggregator {aggregator!r} expects gradients at the received model "
                         "in the replies; the strategy aggregates trained models, so "
                         "configure the rule for model updates")
    if server_optimizer is None:
        server_optimizer = SGD()
    elif not isinstance(server_optimizer, ServerOptimizer):
        raise TypeError("server_optimizer must be a fastfair server optimiser (e.g. "
                        "fastfair.aggregators.FedAdam(lr=0.01)) or None; got "
                        f"{type(server_optimizer).__name__}")
    return server_optimizer


def check_model_dtypes(keys: Sequence[str], arrays: Sequence[np.ndarray]) -> None:
    """Refuses a model the server step cannot combine exactly.

    Parameters
    ----------
    keys, arrays
        The model's L array names and arrays.

    Raises
    ------
    TypeError
        Naming the first array whose dtype is neither an IEEE float (half, single, double; any
        byte order), an integer nor a boolean: ``longdouble`` (its extended precision would be
        rounded to double), complex, structured, string or time arrays.
    """
    for key, a in zip(keys, arrays):
        if not (is_ieee_float(a.dtype) or a.dtype.kind in "iub"):
            raise TypeError(
                f"array {key!r} has dtype {a.dtype} ({a.dtype.name}), which the server step "
                "cannot combine exactly; send IEEE float16/float32/float64 (either byte order), "
                f"integer or boolean arrays, e.g. {key!r}.astype(numpy.float64)")



def _combine(global_arrays: Sequence[np.ndarray], local_arrays: Sequence[Sequence[np.ndarray]],
             global_weight: float, local_weights: np.ndarray,
             out: Optional[List[np.ndarray]] = None) -> List[np.ndarray]:
    """``global_weight * w + sum_i local_weights[i] * w_i`` per array, one pass per dtype.
    ``out``: preallocated results for the float arrays (the others are always fresh)."""
    inputs = [list(global_arrays)] if global_weight != 0.0 else []
    inputs += [list(a) for a in local_arrays]
    weights = np.concatenate([[global_weight] if global_weight != 0.0 else [], local_weights])
    result: List[Optional[np.ndarray]] = [None] * len(global_arrays)
    groups: Dict[np.dtype, List[int]] = {}
    for k, a in enumerate(global_arrays):
        groups.setdefault(a.dtype, []).append(k)
    for dtype, idx in groups.items():
        if is_ieee_float(dtype) and dtype.isnative:
            res = ops.weighted_average([[client[k] for k in idx] for client in inputs], weights,
                                       out=None if out is None else [out[k] for k in idx])
        elif is_ieee_float(dtype):  # the byte swap both ways is exact
            native = dtype.newbyteorder("=")
            res = ops.weighted_average(
                [[client[k].astype(native) for k in idx] for client in inputs], weights)
            res = [r.astype(dtype) for r in res]
        elif dtype.kind not in "iub":
            raise TypeError(f"arrays of dtype {dtype} ({dtype.name}) cannot be combined "
                            "exactly; see check_model_dtypes")
        else:
            res = ops.weighted_average(
                [[client[k].astype(np.float64) for k in idx] for client in inputs], weights)
            res = [np.rint(r).astype(dtype) for r in res]
        for k, r in zip(idx, res):
            result[k] = r
    return cast(List[np.ndarray], result)  # every index is in one dtype's group


def aggregate_arrays(global_arrays: Sequence[np.ndarray],
                     local_arrays: Sequence[Sequence[np.ndarray]], coefficients: Any, *,
                     lr: float = 1.0, out: Optional[List[np.ndarray]] = None
                     ) -> List[np.ndarray]:
    r"""The server step of a rule from the clients' models, without forming their updates.

    .. math:: w' = w - \eta \sum_i c_i (w - w_i) = \Big(1 - \eta\sum_i c_i\Big) w
              + \sum_i \eta\, c_i\, w_i

    Parameters
    ----------
    global_arrays
        The model sent, L arrays :math:`w`.
    local_arrays
        m client models, each L arrays of the shapes and dtypes of ``global_arrays``.
    coefficients
        ``[m]`` the rule's coefficients :math:`c` (they need not sum to 1).
    lr
        Server learning rate :math:`\eta`.
    out
        Optional L preallocated results (contiguous, shapes and dtypes of ``global_arrays``);
        used for the float arrays.

    Returns
    -------
    L new arrays (one multi-tensor pass of :func:`fastfair.ops.weighted_average`; the term in
    :math:`w` is skipped when its weight is exactly 0, e.g. FedAvg with lr = 1).
    """
    c = np.asarray(coefficients, dtype=np.float64)
    return _combine(global_arrays, local_arrays, 1.0 - lr * float(c.sum()), lr * c, out)


def pseudo_gradient(global_arrays: Sequence[np.ndarray],
                    local_arrays: Sequence[Sequence[np.ndarray]],
                    coefficients: Any) -> List[np.ndarray]:
    r"""The combined pseudo-gradient a server optimiser steps on, in one pass:

    .. math:: \sum_i c_i (w - w_i) = \Big(\sum_i c_i\Big) w - \sum_i c_i w_i

    Shapes as :func:`aggregate_arrays`; returns L arrays.
    """
    c = np.asarray(coefficients, dtype=np.float64)
    return _combine(global_arrays, local_arrays, float(c.sum()), -c)


def _all_finite(arrays: Sequence[Any]) -> bool:
    """Whether every float array of ``arrays`` is finite (integer arrays always are)."""
    return all(np.isfinite(a).all() for a in arrays
               if getattr(a, "dtype", np.dtype(np.float64)).kind == "f")


def propose_server_step(optimizer: ServerOptimizer, global_arrays: Sequence[np.ndarray],
                        local_arrays: Sequence[Sequence[np.ndarray]], coefficients: Any, *,
                        out: Optional[List[np.ndarray]] = None
                        ) -> Tuple[Optional[List[np.ndarray]], Callable[[], None]]:
    r""":func:`server_step` in two phases, for a round that commits entirely or not at all.

    Returns ``(new, commit)``. ``new`` is the L new arrays, or None when the step is not finite
    (an overflow of finite replies). The optimiser itself is unchanged until ``commit()``
    (which cannot fail): a plain step (SGD has no buffers) is then counted, and any other
    optimiser's step, taken on a copy of it (one copy of its moment buffers), is swapped in.
    """
    if optimizer.is_plain_step:
        fused = aggregate_arrays(global_arrays, local_arrays, coefficients, lr=optimizer.lr,
                                 out=out)

        def count() -> None:
            optimizer.steps += 1

        return (fused if _all_finite(fused) else None), count
    trial = copy.deepcopy(optimizer)  # buffers copied: the step below writes them in place
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is caught below
        new = _optimizer_step(trial, global_arrays, local_arrays, coefficients, out,
                              check=True)
    buffers = [b for bufs in trial.state.values() if bufs is not None for b in bufs]
    if new is None or not _all_finite(new) or not _all_finite(buffers):
        return None, lambda: None

    def swap_in() -> None:
        optimizer.state = trial.state
        optimizer.steps = trial.steps

    return new, swap_in


def server_step(optimizer: ServerOptimizer, global_arrays: Sequence[np.ndarray],
                local_arrays: Sequence[Sequence[np.ndarray]], coefficients: Any, *,
                out: Optional[List[np.ndarray]] = None) -> List[np.ndarray]:
    r"""The new global model: ``optimizer``'s step on the combined pseudo-gradient.

    An optimiser whose step is plain (:attr:`~fastfair.aggregators.ServerOptimizer.is_plain_step`:
    :class:`~fastfair.aggregators.SGD`) is :func:`aggregate_arrays` with its ``lr`` (one fused
    pass), counted as one step of the optimiser. Any other optimiser gets
    :func:`pseudo_gradient` of the float arrays (one pass) and steps on copies of them; integer
    arrays are averaged as by :func:`aggregate_arrays` with lr = 1. Shapes and ``out`` (the
    results of the float arrays) as :func:`aggregate_arrays`; returns L new arrays.
    """
    if optimizer.is_plain_step:
        fused = aggregate_arrays(global_arrays, local_arrays, coefficients, lr=optimizer.lr,
                                 out=out)
        optimizer.steps += 1
        return fused
    new = _optimizer_step(optimizer, global_arrays, local_arrays, coefficients, out, check=False)
    assert new is not None  # None only with check=True
    return new


def _optimizer_step(optimizer: ServerOptimizer, global_arrays: Sequence[np.ndarray],
                    local_arrays: Sequence[Sequence[np.ndarray]], coefficients: Any,
                    out: Optional[List[np.ndarray]], check: bool) -> Optional[List[np.ndarray]]:
    """A non-plain optimiser's step (see :func:`server_step`); with ``check``, None (without
    stepping) when the pseudo-gradient is not finite."""
    floats = [k for k, a in enumerate(global_arrays) if is_ieee_float(a.dtype)]
    others = [k for k in range(len(global_arrays)) if k not in floats]

    def take(idx: List[int]) -> Tuple[List[np.ndarray], List[List[np.ndarray]]]:
        return [global_arrays[k] for k in idx], [[a[k] for k in idx] for a in local_arrays]

    new: List[Optional[np.ndarray]] = [None] * len(global_arrays)
    sent, local = take(floats)
    grad = pseudo_gradient(sent, local, coefficients)
    if check and not _all_finite(grad):
        return None
    params = [np.empty_like(g) if out is None else out[k] for k, g in zip(floats, sent)]
    for p, g in zip(params, sent):
        np.copyto(p, g)
    optimizer.step(params, grad)
    for k, p in zip(floats, params):
        new[k] = p
    if others:
        for k, p in zip(others, aggregate_arrays(*take(others), coefficients)):
            new[k] = p
    return cast(List[np.ndarray], new)  # every index is a float array or one of the others


def squared_distance(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """``sum_l ||a_l - b_l||^2``: a reply's squared update norm without keeping the update. For
    float arrays the difference and its square are formed in their dtype (the difference of
    nearby values is exact) and summed pairwise (relative error about log2(size) units of
    roundoff); integer arrays go through float64."""
    total = 0.0
    buffers: Dict[np.dtype, np.ndarray] = {}
    for x, y in zip(a, b):
        if x.dtype.kind != "f":
            d = x.astype(np.float64) - y
        else:
            buf = buffers.get(x.dtype)
            if buf is None or buf.size < x.size:
                buf = buffers[x.dtype] = np.empty(max(x.size for x in a), dtype=x.dtype)
            d = buf[:x.size].reshape(x.shape)
            np.subtract(x, y, out=d)
        np.square(d, out=d)
        total += float(d.sum())
    return total
