"""The checks every rule runs on what it is given: round inputs, hyperparameters and loaded state.
Each raises ``TypeError`` or ``ValueError`` naming the argument and what is allowed (see
:mod:`fastfair.aggregators.base` for where the contract applies them)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from fastfair._arrays import framework_or_none, is_cuda


def host_array(x: Any, name: str) -> np.ndarray:
    """``x`` (list, NumPy, torch, CuPy or any ``__dlpack__`` producer) as a host NumPy array."""
    kind = framework_or_none(x)
    if kind == "torch":
        t = x.detach()
        if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
            t = t.double()
        return t.cpu().numpy()
    if kind == "cupy":
        return x.get()
    if kind == "dlpack":
        if is_cuda(x):
            raise TypeError(f"{name}: cannot read a CUDA array of type {type(x).__name__}; "
                            "pass a torch tensor, a CuPy array or host memory")
        return np.from_dlpack(x)
    try:
        return np.asarray(x)
    except ValueError:  # NumPy's "inhomogeneous shape" of ragged nested sequences
        raise ValueError(f"{name} must be an array or a sequence of numbers (nested sequences "
                         "of equal lengths); got a ragged nested sequence") from None


def check_ids(client_ids: Any, num_clients: int, *, allow_duplicates: bool = False) -> np.ndarray:
    """``client_ids`` as int64 ``[m]``, checked: non-empty, 1-D, integer, in ``[0, K)`` and
    distinct (unless ``allow_duplicates``)."""
    ids = host_array(client_ids, "client_ids")
    if ids.size == 0:
        raise ValueError("client_ids is empty: a round needs at least one participating client")
    if ids.ndim != 1:
        raise ValueError(f"client_ids must be 1-D [m]; got shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise TypeError(f"client_ids must be integers; got dtype {ids.dtype}")
    if ids.dtype.kind == "u" and ids.dtype.itemsize >= 8 and int(ids.max()) > 2**63 - 1:
        bad = int(np.flatnonzero(ids > np.uint64(2**63 - 1))[0])
        raise ValueError(f"client_ids must lie in [0, {num_clients}); got {int(ids[bad])} at "
                         f"position {bad} (ids are int64)")
    ids = ids.astype(np.int64, copy=False)
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= num_clients:
        bad = int(np.flatnonzero((ids < 0) | (ids >= num_clients))[0])
        raise ValueError(f"client_ids must lie in [0, {num_clients}); got {int(ids[bad])} at "
                         f"position {bad}")
    if not allow_duplicates and ids.size > 1:
        s = np.sort(ids)  # an unstable sort is enough to detect; positions are found on failure
        if (s[1:] == s[:-1]).any():
            order = np.argsort(ids, kind="stable")
            same = ids[order[1:]] == ids[order[:-1]]
            k = int(np.flatnonzero(same)[0])
            raise ValueError(f"client_ids must be distinct; client {int(ids[order[k]])} appears "
                             f"at positions {int(order[k])} and {int(order[k + 1])}")
    return ids


def check_vector(values: Any, m: int, name: str, *, nonnegative: bool = False) -> np.ndarray:
    """A per-client round input as float64 ``[m]``: length m, finite (and >= 0 if asked)."""
    v = host_array(values, name)
    if v.ndim != 1:
        raise ValueError(f"{name} must be 1-D with one entry per client; got shape {v.shape}")
    if v.shape[0] != m:
        raise ValueError(f"{name} has {v.shape[0]} entries but client_ids has {m}")
    if v.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers; got dtype {v.dtype}")
    v = np.ascontiguousarray(v, dtype=np.float64)
    check_values(v, name, lo=0.0 if nonnegative else None)
    return v


def check_values(values: np.ndarray, name: str, *, lo: Optional[float] = None) -> None:
    """Raises ValueError naming the first entry of the float64 array ``values`` (any shape) that
    is not finite or lies below ``lo``, with its position."""
    for bad, need in ((~np.isfinite(values), "finite"),
                      (None if lo is None else values < lo,
                       "non-negative" if lo == 0.0 else f">= {lo}")):
        if bad is not None and bad.any():
            pos = np.unravel_index(int(np.flatnonzero(bad)[0]), values.shape)
            where = pos[0] if len(pos) == 1 else pos
            raise ValueError(f"{name} must be {need}; got {values[pos]} at position {where}")


def check_scalar(value: Any, name: str, *, lo: Optional[float] = None,
                 hi: Optional[float] = None, lo_open: bool = False,
                 hi_open: bool = False) -> float:
    """A hyperparameter (or scalar state) as a finite float in the stated interval; the error
    names it. Bools, strings and arrays of any size but 0-d are refused (``TypeError``)."""
    if (isinstance(value, (bool, np.bool_, str, bytes, list, tuple))
            or getattr(value, "ndim", 0) != 0):
        raise TypeError(f"{name} must be a real number; got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number; got {value!r}") from None
    ok = math.isfinite(v)
    if ok and lo is not None:
        ok = v > lo if lo_open else v >= lo
    if ok and hi is not None:
        ok = v < hi if hi_open else v <= hi
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        rng = f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"
        raise ValueError(f"{name} must be finite and in {rng}; got {value!r}")
    return v


def check_count(value: Any, name: str) -> int:
    """A counter (rounds, steps) as a non-negative int; bools, floats and strings are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer; got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {value!r}")
    return int(value)


def check_choice(value: Any, name: str, choices: Tuple[str, ...]) -> str:
    """A string option among ``choices``; the error lists them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return str(value)


class StateSpec(NamedTuple):
    """What one state value must be: a real scalar (``shape=()``) or a float64 array of
    ``shape`` (-1: any length along that axis), finite and at least ``lo`` (None: unbounded);
    with ``integer``, an int64 array (client ids)."""

    shape: Tuple[int, ...] = ()
    lo: Optional[float] = None
    integer: bool = False

    def check(self, value: Any, name: str) -> Any:
        """``value`` checked (``TypeError``/``ValueError`` naming ``name``): a float for a
        scalar, else a new C-contiguous float64 (int64 with ``integer``) array that shares no
        memory with ``value``."""
        if not self.shape:
            return check_scalar(value, name, lo=self.lo)
        arr = host_array(value, name)
        if arr.dtype.kind not in ("iu" if self.integer else "iuf"):
            raise TypeError(f"{name} must hold {'integers' if self.integer else 'real numbers'}"
                            f"; got dtype {arr.dtype}")
        if arr.ndim != len(self.shape) or any(s not in (-1, n) for s, n in zip(self.shape,
                                                                                arr.shape)):
            want = tuple("any" if s == -1 else s for s in self.shape)
            raise ValueError(f"{name} must have shape {want}; got {arr.shape}")
        if self.integer:
            if arr.dtype.kind == "u" and arr.size and int(arr.max()) > 2**63 - 1:
                raise ValueError(f"{name} must hold int64 values; got {int(arr.max())}")
            return np.array(arr, dtype=np.int64, order="C", copy=True)
        arr = np.array(arr, dtype=np.float64, order="C", copy=True)
        check_values(arr, name, lo=self.lo)
        return arr


#: The largest magnitude of one client's loss times a rule's factor (TERM's ``tilt * F``, AFL's
#: and FedMABA's ``step_size * F``, q-FedAvg's ``L F^q``): sums and differences of up to 2**23
#: such values stay within float64, so the rule's arithmetic cannot overflow.
SCALED_LOSS_LIMIT = 2.0 ** 1000


def scaled_loss_problem(value: float, what: str) -> Optional[str]:
    """Why one client's ``what`` = ``value`` (its loss times the rule's factor) is more than the
    rule's float64 arithmetic takes, for :meth:`Aggregator.invalid_loss`; None when
    ``|value| <= SCALED_LOSS_LIMIT``."""
    if abs(value) <= SCALED_LOSS_LIMIT:
        return None
    return (f"is too large: {what} = {value:.3g} is beyond +-2**1000 = {SCALED_LOSS_LIMIT:.3g}, "
            "where the weights overflow float64")


def check_scaled_losses(values: np.ndarray, what: str) -> None:
    """Raises ``ValueError`` (``"losses must ..."``, naming the position) at the first entry of
    ``values`` ``[m]`` (the losses times the rule's factor) beyond ``SCALED_LOSS_LIMIT``."""
    bad = ~(np.abs(values) <= SCALED_LOSS_LIMIT)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(f"losses must keep {what} within +-2**1000 = {SCALED_LOSS_LIMIT:.3g} "
                         f"(beyond it the weights overflow float64); got {values[pos]:.3g} at "
                         f"position {pos}")
