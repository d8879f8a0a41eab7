"""Reference AAggFF-D doubly-robust gradient, dense and lazy (float64 NumPy; docs/algorithms.md
§2.5)."""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np


def dr_gradient(responses: Any, ids: Any, p: Any, *, sample_prob: float,
                variant: str = "paper") -> Tuple[np.ndarray, np.ndarray]:
    """Dense DR estimate ``rhat`` and linearised gradient ``g`` over all K clients.

    ``g = -rhat / (1 + <p, r0>) + r0 p^T (rhat - r0) / (1 + <p, r0>)^2`` with ``r0 = rbar 1``.
    Returns ``(g, rhat)``.
    """
    p = np.asarray(p, dtype=np.float64)
    ids = np.asarray(ids, dtype=np.int64)
    r = np.asarray(responses, dtype=np.float64)
    rbar = r.mean()
    rhat = np.full(p.shape[0], rbar)
    if variant == "paper":
        rhat[ids] = rbar + (r - rbar) / sample_prob
    elif variant == "reference_code":
        rhat[ids] = (r - rbar) / sample_prob
    else:
        raise ValueError(f"variant must be 'paper' or 'reference_code'; got {variant!r}")
    den = 1.0 + rbar * p.sum()
    g = -rhat / den + rbar * (p @ (rhat - rbar)) / den ** 2
    return g, rhat


def dr_lazy_step(state: np.ndarray, ids: Any, responses: Any, *, sample_prob: float, eta: float,
                 variant: str = "paper", prior_mass: float = 1.0) -> np.ndarray:
    """The O(m) lazy round: ``state[ids] += delta`` in place, returns ``q = softmax(-eta D_S)``."""
    ids = np.asarray(ids, dtype=np.int64)
    r = np.asarray(responses, dtype=np.float64)
    rbar = r.mean()
    centred = (r - rbar) / sample_prob
    if variant == "reference_code":
        centred = centred - rbar
    state[ids] -= centred / (1.0 + rbar * prior_mass)
    z = -eta * state[ids]
    e = np.exp(z - z.max())
    return e / e.sum()
