"""Checkpoints that cannot run code: tensors, arrays and plain values only, written atomically.

A checkpoint is a ``torch.save`` file of dicts, lists, tuples, strings, numbers, None and tensors;
NumPy arrays travel as tensors tagged so that they come back as NumPy arrays. It is read with
``torch.load(weights_only=True)``, which refuses anything else, so opening a run folder from an
untrusted source cannot execute code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

_NDARRAY = "__fastfair_ndarray__"


def to_plain(value: Any) -> Any:
    """``value`` with NumPy arrays as tagged tensors and NumPy scalars as Python numbers."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_plain(value: Any) -> Any:
    """The inverse of :func:`to_plain`."""
    if isinstance(value, dict):
        if set(value) == {_NDARRAY}:
            return value[_NDARRAY].numpy()
        return {k: from_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(from_plain(v) for v in value)
    return value


def save(path: Path, payload: Any) -> None:
    """Writes ``payload`` to ``path`` atomically (a kill mid-write never leaves a torn file)."""
    tmp = Path(str(path) + ".tmp")
    torch.save(to_plain(payload), tmp)
    os.replace(tmp, path)


def load(path: Path) -> Any:
    """Reads a checkpoint written by :func:`save`; a missing, truncated, corrupted or foreign
    file raises ValueError saying which and what to do."""
    if not path.is_file():
        raise ValueError(f"{path} does not exist: the run saved no checkpoint (it ran with "
                         "checkpoint_every 0, or stopped before its first); start a new run")
    try:
        payload = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many types for a bad file; all mean the same here
        raise ValueError(f"{path} is not a readable fastfair checkpoint ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); it may be "
                         "truncated or corrupted: start a new run") from None
    return from_plain(payload)
