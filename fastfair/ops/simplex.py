"""Euclidean projection onto the probability simplex."""

from __future__ import annotations

from typing import Any, Optional

from fastfair import _C
from fastfair._arrays import current_stream, detach, dtype_name, empty, framework

Array = Any


def project_simplex(v: Array, *, out: Optional[Array] = None,
                    stream: Optional[int] = None) -> Array:
    r"""Euclidean projection of a vector (or of each row of a matrix) onto the simplex.

    .. math:: \Pi(v) = \arg\min_{p \ge 0,\ \mathbf 1^\top p = 1} \|p - v\|_2 = \max(v - \tau, 0),
       \qquad \textstyle\sum_i \max(v_i - \tau, 0) = 1

    CPU: Condat's sort-free algorithm (expected O(K)) per row, rows in parallel, then ``tau``
    recomputed in float64 from the support found. CUDA: one thread block per row (Michelot's
    monotone fixed point).

    Parameters
    ----------
    v
        ``[K]`` or ``[B, K]`` (rows projected independently), float32 or float64, finite, rows
        contiguous.
    out
        Optional result of ``v``'s shape and dtype, contiguous.
    stream
        CUDA stream handle for CUDA inputs.

    Returns
    -------
    The projection, shape and dtype of ``v``, in its framework and device.

    Raises
    ------
    ValueError
        (CPU) NaN or infinite entries, naming the position. CUDA rows with them come out NaN.
    """
    v = detach(v)
    framework(v)
    if out is None:
        out = empty(v, list(v.shape), dtype_name(v))
    _C.project_simplex(v, detach(out), current_stream(v, stream))
    return out
