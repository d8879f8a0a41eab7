"""Reference log-sum-exp, softmax and exponentiated-gradient step (float64 NumPy)."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from fastfair.reference.weighted_average import to_float64


def _shifted(x: Any, scale: float) -> Tuple[np.ndarray, np.ndarray]:
    """``(z - max z, max z)`` for ``z = scale * x``, the shift taken before the scale:
    ``scale * (x - x_top)`` with ``x_top`` the entry of largest ``z``. Forming ``z`` first would
    cost an absolute error of an ulp of ``|z|`` in every exponent (1e3 at ``|z| ~ 1e19``)."""
    x = to_float64(x)
    top = (np.max if scale >= 0 else np.min)(x, axis=-1, keepdims=True)
    return scale * (x - top), scale * top


def logsumexp(x: Any, scale: float = 1.0) -> np.ndarray:
    """``log sum_k exp(scale * x_k)`` over the last axis, in float64 (max-shifted)."""
    d, m = _shifted(x, scale)
    return (m + np.log(np.sum(np.exp(d), axis=-1, keepdims=True)))[..., 0]


def softmax(x: Any, scale: float = 1.0) -> np.ndarray:
    """``exp(scale * x) / sum exp(scale * x)`` over the last axis, in float64."""
    e = np.exp(_shifted(x, scale)[0])
    return e / np.sum(e, axis=-1, keepdims=True)


def eg_step(G: Any, g: Optional[Any] = None, *, eta: float, ids: Optional[Any] = None,
            values: Optional[Any] = None) -> Tuple[np.ndarray, np.ndarray]:
    """``G + g`` (or ``G`` with ``values`` added at ``ids``, per row) and ``softmax(-eta * G)``.

    Returns ``(new_G, p)`` in float64; the input is not modified.
    """
    new = to_float64(G).copy()
    if g is not None:
        new += to_float64(g)
    else:
        rows = new.reshape(-1, new.shape[-1])
        idx = np.asarray(ids).reshape(rows.shape[0], -1)
        val = np.asarray(values, dtype=np.float64).reshape(rows.shape[0], -1)
        for b in range(rows.shape[0]):
            rows[b, idx[b]] += val[b]
    return new, softmax(new, -eta)
