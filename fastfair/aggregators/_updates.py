"""Inner products of client updates, in float64: the Gram matrix FedMGDA solves over and the
squared norms q-FedAvg scales by."""

from __future__ import annotations

from typing import Any, List

import numpy as np

from fastfair._arrays import framework_or_none


def _rows(updates: Any) -> List[Any]:
    """The updates as a list of per-layer 2-D blocks ``[m, D_l]`` (framework kept)."""
    if isinstance(updates, (list, tuple)):
        if not updates or not updates[0]:
            raise ValueError("updates is empty: pass one update per client")
        layers = len(updates[0])
        if any(len(u) != layers for u in updates):
            raise ValueError("updates: every client must give the same number of arrays")
        blocks: List[Any] = []
        for l in range(layers):
            arrs = [u[l] for u in updates]
            if framework_or_none(arrs[0]) == "torch":
                import torch

                blocks.append(torch.stack([a.detach().reshape(-1) for a in arrs]))
            else:
                blocks.append(np.stack([np.asarray(a).reshape(-1) for a in arrs]))
        return blocks
    if framework_or_none(updates) == "torch":
        return [updates.detach().reshape(updates.shape[0], -1)]
    arr = np.asarray(updates)
    if arr.ndim < 1:
        raise ValueError("updates must have a client axis: shape [m, *S]")
    return [arr.reshape(arr.shape[0], -1)]


def gram_matrix(updates: Any, m: int) -> np.ndarray:
    r"""``G[i, j] = <X_i, X_j>`` ``[m, m]`` in float64 over all arrays of the updates
    (``[m, *S]`` or m lists of L arrays; NumPy or torch, CPU or CUDA)."""
    total = np.zeros((m, m))
    for block in _rows(updates):
        if block.shape[0] != m:
            raise ValueError(f"updates has {block.shape[0]} clients but client_ids has {m}")
        if framework_or_none(block) == "torch":
            b = block.double()
            total += (b @ b.T).cpu().numpy()
        else:
            b = block.astype(np.float64, copy=False)
            total += b @ b.T
    _check_finite(np.diag(total))
    if not np.all(np.isfinite(total)):
        raise ValueError("updates are too large: their inner products overflow float64")
    return total


def squared_norms(updates: Any, m: int) -> np.ndarray:
    r"""``||X_i||^2`` ``[m]`` in float64 over all arrays of the updates."""
    total = np.zeros(m)
    for block in _rows(updates):
        if block.shape[0] != m:
            raise ValueError(f"updates has {block.shape[0]} clients but client_ids has {m}")
        if framework_or_none(block) == "torch":
            b = block.double()
            total += (b * b).sum(1).cpu().numpy()
        else:
            b = block.astype(np.float64, copy=False)
            total += np.einsum("ij,ij->i", b, b)
    _check_finite(total)
    return total


def _check_finite(sq_norms: np.ndarray) -> None:
    # A NaN or infinite entry makes its client's squared norm non-finite.
    if not np.all(np.isfinite(sq_norms)):
        bad = int(np.flatnonzero(~np.isfinite(sq_norms))[0])
        raise ValueError(f"updates must be finite; the update at position {bad} has a "
                         "non-finite entry (or overflows float64)")
