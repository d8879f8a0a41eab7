"""Log-sum-exp, softmax and the exponentiated-gradient (EG / FTRL) step over client weights."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import numpy as np

from fastfair import _C
from fastfair._arrays import (
    current_stream,
    detach,
    dtype_name,
    empty,
    float64_like,
    framework,
    int64_like,
    is_cuda,
    real,
)

Array = Any
Scale = Union[float, Sequence[float]]


def _rows(x: Array, name: str) -> int:
    framework(x)  # TypeError naming the type for non-arrays
    if len(x.shape) not in (1, 2):
        raise ValueError(f"{name} must have shape [K] or [B, K]; got shape {tuple(x.shape)}")
    return 1 if len(x.shape) == 1 else int(x.shape[0])


def _scale_list(scale: Scale, rows: int, name: str) -> list:
    """One finite number, or one per row: a list of floats (the binding checks the count)."""
    if not hasattr(scale, "__dlpack__") and np.ndim(scale) == 0:
        return [real(scale, name)]
    # Not 0-d, so a sequence (mypy cannot narrow the Union by np.ndim).
    return [real(s, f"{name}[{b}]") for b, s in enumerate(scale)]  # type: ignore[arg-type]


def _workspace(x: Array, rows: int) -> Optional[Array]:
    if not is_cuda(x):
        return None
    return empty(x, [_C.softmax_workspace_len(rows, int(x.shape[-1]))], "float64")


def logsumexp(x: Array, *, scale: Scale = 1.0, stream: Optional[int] = None) -> Array:
    r"""Log-sum-exp of a vector, or of each row of a matrix, in one read of ``x``.

    .. math:: \mathrm{lse}(x) = \log \sum_{k=1}^{K} \exp(s\,x_k)

    Parameters
    ----------
    x
        ``[K]`` or ``[B, K]``, float32 or float64, rows contiguous; K up to 10^8 on a CPU and
        10^9 on a GPU. ``-inf`` entries are allowed (they add nothing).
    scale
        ``s``: one number, or one per row (``[B]``). Default 1.
    stream
        CUDA stream handle for CUDA inputs; default the current stream of their framework.

    Returns
    -------
    float64: a 0-d result for ``[K]`` (a NumPy scalar or a 0-d tensor), ``[B]`` for ``[B, K]``,
    in the framework and on the device of ``x``. The sum is accumulated in float64 with an online
    (max, sum) per block, and every exponent is :math:`s (x_k - x_{top})` with the shift taken
    before the scale (:math:`x_{top}` the entry of largest :math:`s x`), so it neither overflows
    nor underflows for any finite ``x`` and ``s``, even where :math:`s x` leaves the range of
    ``x``'s dtype.

    Raises
    ------
    ValueError
        (CPU) ``s * x`` contains NaN or +inf, or a row is -inf everywhere. CUDA inputs are not
        inspected (that would synchronise): such rows give NaN.
    """
    x = detach(x)
    rows = _rows(x, "x")
    lse = empty(x, [rows], "float64")
    _C.softmax_rows(x, _scale_list(scale, rows, "scale"), None, lse, _workspace(x, rows),
                    current_stream(x, stream))
    return lse[0] if len(x.shape) == 1 else lse


def softmax(x: Array, *, out: Optional[Array] = None, scale: Scale = 1.0,
            stream: Optional[int] = None) -> Array:
    r"""Softmax of a vector, or of each row of a matrix, reading ``x`` twice and writing once.

    .. math:: p_k = \frac{\exp(s\,x_k)}{\sum_{j=1}^{K} \exp(s\,x_j)}

    Parameters
    ----------
    x
        ``[K]`` or ``[B, K]``, float32 or float64, rows contiguous. ``-inf`` entries get 0.
    out
        Optional result ``[K]`` / ``[B, K]``, contiguous, float32 or float64 (default: ``x``'s
        dtype). With ``scale=-eta`` on a float64 state ``x = D``, ``softmax(D, scale=-eta)`` is the
        full decision of the lazy AAggFF-D scheme on demand.
    scale
        ``s``: one number or one per row. Default 1.
    stream
        CUDA stream handle for CUDA inputs.

    Returns
    -------
    ``p`` with the shape of ``x``, in its framework and device; exponentials
    :math:`\exp(s (x_k - x_{top}))` in the precision of ``x`` (about 1 ulp of the exponent
    :math:`s (x_k - x_{top})`, whatever the magnitude of ``x``), normaliser accumulated in float64.

    Raises
    ------
    ValueError
        (CPU) NaN or +inf in ``s * x``, or a row -inf everywhere. CUDA rows like that give NaN.
    """
    x = detach(x)
    rows = _rows(x, "x")
    if out is None:
        out = empty(x, list(x.shape), dtype_name(x))
    _C.softmax_rows(x, _scale_list(scale, rows, "scale"), detach(out), empty(x, [rows], "float64"),
                    _workspace(x, rows), current_stream(x, stream))
    return out


def eg_step(G: Array, g: Optional[Array] = None, *, eta: Scale, ids: Optional[Any] = None,
            values: Optional[Any] = None, out: Optional[Array] = None,
            stream: Optional[int] = None) -> Array:
    r"""Exponentiated-gradient / FTRL step with the entropic regulariser, fused with the state
    update: the cumulative gradient ``G`` is updated in place and the new decision returned.

    .. math:: G \leftarrow G + g, \qquad p = \mathrm{softmax}(-\eta\, G)

    Dense form (``g`` given): pass 1 reads ``G`` and ``g`` (online max/sum); pass 2 reads them
    again and writes ``G + g`` and ``p``: each client's state is read twice and written once.
    Sparse form (``ids``, ``values``): ``G[ids] += values`` in O(m), then the two-pass softmax.

    Parameters
    ----------
    G
        State ``[K]`` or ``[B, K]`` (B independent problems), float32 or float64 (float64 for the
        sparse form), writable, rows contiguous.
    g
        Dense gradient, same shape and dtype as ``G``.
    eta
        Learning rate ``eta`` (finite): one number or one per row.
    ids, values
        Sparse gradient: ``[m]`` (or ``[B, m]``) distinct client ids and float64 values.
    out
        Optional ``p`` (float32 or float64, contiguous, ``G``'s shape); default ``G``'s dtype.
    stream
        CUDA stream handle for CUDA inputs.

    Returns
    -------
    ``p``, the softmax of ``-eta * G`` after the update, shape of ``G``.

    Raises
    ------
    ValueError
        (CPU) out-of-range or repeated ids, non-finite values, or an undefined softmax of the
        updated state (NaN, +inf, all -inf). ``G`` is then left exactly as it was. CUDA inputs
        are not inspected: out-of-range ids are skipped, repeated ids race, bad rows give NaN.
    """
    G = detach(G)
    rows = _rows(G, "G")
    scale = [-e for e in _scale_list(eta, rows, "eta")]
    if (g is None) == (ids is None):
        raise ValueError("pass either a dense gradient g or a sparse one (ids= and values=)")
    if ids is not None and values is None:
        raise ValueError("a sparse gradient needs values= along with ids=")
    if out is None:
        out = empty(G, list(G.shape), dtype_name(G))
    sparse_ids = sparse_values = None
    if ids is not None:
        sparse_ids = int64_like(ids, G, "ids")
        sparse_values = float64_like(values, G, "values")
        n_ids = math.prod(sparse_ids.shape)  # numpy .size is a number, torch .size a method
        if sparse_values.shape[0] != n_ids:
            raise ValueError(f"values has {sparse_values.shape[0]} entries but ids has "
                             f"{n_ids}; pass one value per id")
        sparse_values = sparse_values.reshape(tuple(sparse_ids.shape))
    _C.eg_step(G, None if g is None else detach(g), sparse_ids, sparse_values, scale, detach(out),
               empty(G, [rows], "float64"), _workspace(G, rows), current_stream(G, stream))
    return out
