"""Framework plumbing shared by the ops: which library an array comes from, allocating outputs
in that library on the same device, the caller's CUDA stream, and conversion of small inputs.

The compiled core reads every array through ``__dlpack__``; this module only decides what to
hand it, so that results come back in the caller's own framework.
"""

from __future__ import annotations

import math
import operator
import sys
from typing import Any, Optional, Sequence

import numpy as np

_KDL_CUDA = 2
_KDL_CUDA_MANAGED = 13

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


def import_torch(what: str, *, extra: str = "torch") -> Any:
    """The ``torch`` module, for code that truly needs PyTorch (autograd, ``torch.nn``).

    fastfair's core (``fastfair``, ``fastfair.ops``, ``fastfair.aggregators``,
    ``fastfair.reference``) needs NumPy alone; the few places that need torch call this where
    they need it, so a NumPy-only install fails there with a message that says what to install.

    Parameters
    ----------
    what
        What needs torch, as the user called it (e.g. ``"fastfair.methods.fedevg"``).
    extra
        The package extra that installs it (``pip install "fastfair[<extra>]"``).

    Returns
    -------
    module
        The imported ``torch``.

    Raises
    ------
    ModuleNotFoundError
        (an ``ImportError``, ``name='torch'``) when torch is not installed, naming ``what``,
        PyTorch and the extra to install. Errors raised while importing an installed torch
        propagate unchanged.
    """
    try:
        import torch
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ModuleNotFoundError(
            f"{what} needs PyTorch (torch), which is not installed: "
            f'pip install "fastfair[{extra}]" (or pip install torch). The NumPy-only core '
            "(fastfair.ops, fastfair.aggregators, fastfair.reference) works without it.",
            name="torch") from exc
    return torch


def framework(x: Any) -> str:
    """Name of the array library of ``x``: 'numpy', 'torch', 'cupy' or 'dlpack' (any other)."""
    mod = type(x).__module__.split(".")[0]
    if isinstance(x, np.ndarray):
        return "numpy"
    if mod == "torch" and "torch" in sys.modules and isinstance(x, sys.modules["torch"].Tensor):
        return "torch"
    if mod == "cupy":
        return "cupy"
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    raise TypeError(f"expected an array (NumPy, PyTorch, CuPy or any __dlpack__ producer); "
                    f"got {type(x).__name__}")


def is_cuda(x: Any) -> bool:
    """True when ``x`` lives in CUDA device memory."""
    if isinstance(x, np.ndarray):
        return False
    if framework(x) == "torch":  # Tensor.__dlpack_device__ is slow Python; is_cuda is a field
        return bool(x.is_cuda)
    return int(x.__dlpack_device__()[0]) in (_KDL_CUDA, _KDL_CUDA_MANAGED)


def dtype_name(x: Any) -> str:
    """The dtype of ``x`` as a plain name ('float32', 'bfloat16', 'int64', ...)."""
    return str(x.dtype).rsplit(".", 1)[-1]


def is_floating(x: Any) -> bool:
    """Whether ``x`` holds floating-point numbers, by its dtype's kind rather than its name
    (NumPy's big-endian ``>f4`` is a float; torch dtypes say ``is_floating_point``; the
    ``ml_dtypes`` bfloat16 of NumPy has no float kind and is recognised by name)."""
    dtype = x.dtype
    if framework_or_none(x) == "torch":
        return bool(dtype.is_floating_point)
    return dtype.kind == "f" or dtype_name(x) == "bfloat16"


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` with writes refused (``ValueError: assignment destination is read-only``): how a
    rule exposes a fresh array computed from its state, so that a write into it cannot seem to
    change the state."""
    a.setflags(write=False)
    return a


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only copy of ``a`` that no one can make writable again (its memory is an
    immutable ``bytes``, so ``setflags(write=True)`` raises): how a rule keeps an array it was
    built from and shows it as a public attribute."""
    return np.frombuffer(np.ascontiguousarray(a).tobytes(), dtype=a.dtype).reshape(a.shape)


def detach(x: Any) -> Any:
    """Drops autograd history from torch tensors (DLPack cannot export them); others unchanged."""
    if framework(x) == "torch" and x.requires_grad:
        return x.detach()
    return x


def empty(like: Any, shape: Sequence[int], dtype: str) -> Any:
    """An uninitialised array of ``shape``/``dtype`` in ``like``'s framework and device."""
    kind = framework(like)
    if kind == "torch":
        import torch

        return torch.empty(tuple(shape), dtype=getattr(torch, dtype), device=like.device)
    if kind == "cupy":
        import cupy

        with like.device:
            return cupy.empty(tuple(shape), dtype=dtype)
    if is_cuda(like):
        raise TypeError(f"cannot allocate a CUDA output like a {type(like).__name__}; pass out=")
    return np.empty(tuple(shape), dtype=_numpy_dtype(dtype))


def zeros(like: Any, shape: Sequence[int], dtype: str) -> Any:
    """Like :func:`empty`, filled with zeros."""
    out = empty(like, shape, dtype)
    out[...] = 0
    return out


def _numpy_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        try:
            import ml_dtypes

            return ml_dtypes.bfloat16
        except ImportError as exc:  # NumPy itself has no bfloat16
            raise TypeError("bfloat16 NumPy arrays need the ml_dtypes package; "
                            "or pass torch tensors") from exc
    return np.dtype(dtype)


def _host(values: Any, name: str) -> Any:
    """Array-library ``values`` as a NumPy view for a CPU computation (lists pass through);
    ValueError when they live on a GPU."""
    if framework_or_none(values) in ("torch", "cupy", "dlpack"):
        if is_cuda(values):
            raise ValueError(f"{name} is on a CUDA device but the arrays are on the CPU; "
                             "move them to one device")
        return np.from_dlpack(detach(values))
    return values


def float64_like(values: Any, like: Any, name: str, *, vector: bool = False) -> Any:
    """``values`` (any sequence or array) as a contiguous float64 1-D array on ``like``'s device.

    CPU results are NumPy arrays; CUDA results stay in ``like``'s framework (no host round trip).
    Any shape is flattened, except that ``vector=True`` asks for at most one axis (ValueError
    naming ``name`` otherwise).
    """
    if is_cuda(like):
        kind = framework(like)
        if kind == "torch":
            import torch

            v: Any = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
            v = v.detach().to(device=like.device, dtype=torch.float64).contiguous()
        elif kind == "cupy":
            import cupy

            with like.device:
                v = cupy.ascontiguousarray(cupy.asarray(values, dtype=cupy.float64))
        else:
            raise TypeError(f"{name}: cannot convert for a CUDA array of type "
                            f"{type(like).__name__}")
    else:
        v = np.ascontiguousarray(numpy_array(values, name, np.float64))
    if vector and len(v.shape) > 1:
        raise ValueError(f"{name} must have shape [m] (one axis); got shape {tuple(v.shape)}")
    return v.reshape(-1)


def _bound(value: int) -> str:
    """A range bound as text: 2^k for powers of two from 2^16 on."""
    if value >= 2 ** 16 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return str(value)


def integer(value: Any, name: str, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high)``: TypeError naming ``name`` for anything that is not an
    integer (floats are refused, not truncated; so are bools), ValueError naming the range. Python,
    NumPy and 0-d integer tensors pass (anything with ``__index__``)."""
    if isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__} {value!r}")
    v = operator.index(value)
    if not low <= v < high:
        raise ValueError(f"{name} must be in [{_bound(low)}, {_bound(high)}); got {v}")
    return v


def real(value: Any, name: str, *, finite: bool = True) -> float:
    """``value`` (a Python, NumPy or 0-d array number) as a float: TypeError naming ``name`` for
    strings, None, sequences and complex numbers; ValueError for NaN/inf when ``finite``."""
    if (isinstance(value, (str, bytes, complex, np.complexfloating))
            or not hasattr(value, "__float__")):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):  # arrays of more than one element
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} with shape "
                        f"{tuple(getattr(value, 'shape', ()))}") from None
    if finite and not math.isfinite(v):
        raise ValueError(f"{name} must be finite; got {v}")
    return v


def numpy_array(values: Any, name: str, dtype: Any = None) -> np.ndarray:
    """``np.asarray(values, dtype)`` with errors that name ``name``: ragged nested sequences and
    entries that are not numbers."""
    try:
        return np.asarray(_host(values, name), dtype=dtype)
    except ValueError as exc:
        if "inhomogeneous" in str(exc) or "sequence" in str(exc):
            raise ValueError(f"{name} must be a rectangular array or a flat sequence of numbers; "
                             "got nested sequences of different lengths") from None
        raise TypeError(f"{name} must hold numbers; {exc}") from None
    except TypeError as exc:
        raise TypeError(f"{name} must hold numbers; {exc}") from None


def framework_or_none(x: Any) -> Optional[str]:
    """Like :func:`framework`, but None for non-arrays (lists, scalars)."""
    try:
        return framework(x)
    except TypeError:
        return None


def check_finite(values: np.ndarray, name: str) -> None:
    """Raises ValueError naming the first non-finite entry of a CPU float array."""
    bad = ~np.isfinite(values)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite; got {values[pos]} at position {pos}")


def current_stream(x: Any, stream: Optional[int]) -> int:
    """The CUDA stream handle a kernel on ``x`` runs on: ``stream`` if given, else the current
    stream of ``x``'s framework. -1 for CPU arrays (no stream)."""
    if not is_cuda(x):
        return -1
    kind = framework(x)
    if kind == "torch":
        import torch

        current = torch.cuda.current_stream(x.device)
        if stream is None:
            handle = current.cuda_stream
        else:
            # The kernel reads torch tensors without Tensor.__dlpack__, so order the given stream
            # after torch's current one here, as the DLPack exchange would (once per call).
            handle = int(stream)
            if handle not in (current.cuda_stream, 1 if current.cuda_stream == 0 else None):
                ready = torch.cuda.Event()
                ready.record(current)
                torch.cuda.ExternalStream(handle, device=x.device).wait_event(ready)
    elif stream is not None:
        handle = int(stream)
    elif kind == "cupy":
        import cupy

        with x.device:
            handle = cupy.cuda.get_current_stream().ptr
    else:
        handle = 0
    # DLPack reserves 0; the legacy default stream is spelled 1 there.
    return handle if handle != 0 else 1


def int64_like(values: Any, like: Any, name: str) -> Any:
    """``values`` (ids: any integer sequence or array) as a contiguous int64 array on ``like``'s
    device, keeping its shape. CPU results are NumPy arrays; CUDA results stay in ``like``'s
    framework. Raises TypeError for non-integer input rather than truncating floats."""
    if is_cuda(like):
        kind = framework(like)
        if kind == "torch":
            import torch

            v = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
            if v.is_floating_point():
                raise TypeError(f"{name} must hold integer ids; got {v.dtype}")
            return v.detach().to(device=like.device, dtype=torch.int64).contiguous()
        if kind == "cupy":
            import cupy

            with like.device:
                v = cupy.asarray(values)
                if v.dtype.kind not in "iu":
                    raise TypeError(f"{name} must hold integer ids; got {v.dtype}")
                return cupy.ascontiguousarray(v.astype(cupy.int64))
        raise TypeError(f"{name}: cannot convert for a CUDA array of type {type(like).__name__}")
    arr = numpy_array(values, name)
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer ids; got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def from_host(values: np.ndarray, like: Any) -> Any:
    """Host NumPy ``values`` in the framework and on the device of ``like`` (NumPy when ``like``
    is not a torch tensor or CuPy array)."""
    kind = framework_or_none(like)
    if kind == "torch":
        import torch

        return torch.from_numpy(values).to(like.device)
    if kind == "cupy":
        import cupy

        with like.device:
            return cupy.asarray(values)
    return values
