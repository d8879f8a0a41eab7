"""Checkpoints that cannot run code: tensors, arrays and plain values only, written atomically.

A checkpoint is a ``torch.save`` file of dicts, lists, tuples, strings, numbers, None and tensors;
NumPy arrays travel as tensors tagged so that they come back as NumPy arrays. It is read with
``torch.load(weights_only=True)``, which refuses anything else, so opening a run folder from an
untrusted source cannot execute code. Files are read and written through the guards of
:mod:`fastfair._files` (regular files only; a failed write names its file).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Optional, Tuple, cast

import numpy as np
import torch

from fastfair._files import atomic, open_regular
from fastfair.sim.reporting.stats import diverged_round

_NDARRAY = "__fastfair_ndarray__"
#: The keys under which a checkpoint holds models (every floating value below must be finite).
MODEL_KEYS = ("params", "local", "synthetic", "models")

# -------------------------------------------------------------------------- checkpoints
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
    """Writes ``payload`` to ``path`` atomically (:func:`fastfair._files.atomic`): a kill
    mid-write never leaves a torn file, and a write that fails (a full disk:
    :class:`~fastfair._files.FileWriteError` "no space left on device while writing PATH")
    leaves the earlier checkpoint as it was."""
    plain = to_plain(payload)
    with atomic(path) as f:
        torch.save(plain, cast(IO[bytes], f))  # a file object: the errors of its writes kept


def _first_bad(value: torch.Tensor) -> Optional[Tuple[str, Any]]:
    """``("NaN" or "inf", index)`` of the first non-finite element of a floating tensor."""
    if not (value.is_floating_point() or value.is_complex()) or value.numel() == 0:
        return None
    finite = torch.isfinite(value)
    if bool(finite.all()):
        return None
    flat = int(torch.nonzero(~finite.reshape(-1))[0, 0])
    index: Any = flat if value.dim() == 1 else tuple(
        int(i) for i in np.unravel_index(flat, tuple(value.shape)))
    return ("NaN" if bool(torch.isnan(value.reshape(-1)[flat])) else "inf"), index


def _check_models(value: Any, where: str, field: str = "", model: bool = False) -> None:
    """Raises ValueError naming the field when a floating tensor under a key of
    :data:`MODEL_KEYS` holds NaN or inf; a run's state whose history ends in divergence
    (:data:`~fastfair.sim.reporting.stats.DIVERGED`) keeps its non-finite model on purpose."""
    if isinstance(value, dict) and isinstance(value.get("history"), list) \
            and diverged_round(value["history"]) is not None:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            name = f"{field}.{k}" if field else str(k)
            _check_models(v, where, name, model or k in MODEL_KEYS)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_models(v, where, f"{field}[{i}]", model)
    elif model and isinstance(value, torch.Tensor):
        bad = _first_bad(value)
        if bad is not None:
            raise ValueError(f"{where}: {field} has {bad[0]} at index {bad[1]}; the run that "
                             "wrote it diverged or the file was changed: start a new run")


def load(path: Path) -> Any:
    """Reads a checkpoint written by :func:`save`; a missing, non-regular (a named pipe),
    truncated, corrupted or foreign file, or one whose models hold NaN or inf, raises
    ValueError saying which and what to do."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise ValueError(f"{path} does not exist: the run saved no checkpoint (it ran with "
                         "checkpoint_every 0, or stopped before its first); start a new run")
    with open_regular(path) as f:
        try:
            payload = torch.load(f, weights_only=True, map_location="cpu")
        except Exception as exc:  # torch raises many types for a bad file; all mean the same
            raise ValueError(f"{path} is not a readable fastfair checkpoint "
                             f"({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); it may "
                             "be truncated or corrupted: start a new run") from None
    try:
        _check_models(payload, str(path))
        return from_plain(payload)
    except RecursionError:
        raise ValueError(f"{path} is not a fastfair checkpoint: it is nested too deeply") \
            from None
