"""Reference Euclidean projection onto the simplex: the sort-based rule (float64 NumPy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastfair.reference.weighted_average import to_float64


def project_simplex(v: Any) -> np.ndarray:
    """Projects each row (last axis) onto the simplex by sorting (Held et al.; Duchi et al. 2008).

    ``u = sort(v, descending)``, ``rho = max{j : u_j - (sum_{k<=j} u_k - 1) / j > 0}``,
    ``tau = (sum_{k<=rho} u_k - 1) / rho``, result ``max(v - tau, 0)``. Rows are shifted by their
    maximum first (the projection is shift invariant): otherwise ``u_1 - (u_1 - 1)`` rounds to 0
    once ``|v|`` exceeds 2^53.
    """
    x = to_float64(v)
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty_like(rows)
    for b, row in enumerate(rows):
        row = row - row.max()
        u = np.sort(row)[::-1]
        css = np.cumsum(u) - 1.0
        j = np.arange(1, u.size + 1)
        rho = int(np.nonzero(u - css / j > 0)[0][-1]) + 1
        tau = css[rho - 1] / rho
        out[b] = np.maximum(row - tau, 0.0)
    return out.reshape(x.shape)
