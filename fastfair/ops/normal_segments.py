"""Keyed standard normals for ragged segments: a whole cohort's per-client streams in one call."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from fastfair import _C
from fastfair._arrays import current_stream, detach, empty, framework, framework_or_none

Array = Any


def _dtype_name(dtype: Any) -> str:
    """'float32' or 'float64' from a name, a NumPy dtype/type or a torch dtype."""
    if type(dtype).__module__.split(".")[0] == "torch":
        name = str(dtype).rsplit(".", 1)[-1]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64; got {dtype}")
    return name


def normal_segments(keys: Array, offsets: Array, out: Optional[Array] = None, *,
                    total: Optional[int] = None, dtype: Any = "float32",
                    stream: Optional[int] = None) -> Array:
    r"""Standard normals for ragged segments, each a pure function of its own 64-bit key.

    .. math:: \mathrm{out}[o_i + j] = z(k_i, j), \qquad 0 \le j < o_{i+1} - o_i

    Segment ``i`` (e.g. client ``i`` of a cohort) is ``out[offsets[i]:offsets[i + 1]]`` and holds
    the first ``offsets[i + 1] - offsets[i]`` normals of the Philox4x32-10 stream keyed by
    ``keys[i]``: with ``c = j // 4`` and :math:`(w_0, w_1, w_2, w_3)` the Philox words at counter
    ``(c_lo, c_hi, 0, NORM)`` under key ``(key_lo, key_hi)``, Box-Muller gives

    .. math:: z_{4c} = \rho(w_0)\cos\theta(w_1), \; z_{4c+1} = \rho(w_0)\sin\theta(w_1), \;
       z_{4c+2} = \rho(w_2)\cos\theta(w_3), \; z_{4c+3} = \rho(w_2)\sin\theta(w_3),

    .. math:: \rho(w) = \sqrt{-2\ln\big((w + \tfrac12)\,2^{-32}\big)}, \qquad
       \theta(w) = 2\pi\, w\, 2^{-32},

    so :math:`|z| \le \sqrt{66\ln 2} = 6.76`. The values are computed in the output's precision
    by the fixed sequence of IEEE operations written out in
    ``csrc/include/fastfair/normal_segments.h``: float64 within 1e-15 of the exact Box-Muller
    values, float32 within 4 ulp of them (single-precision ln, cos and sin, faster than float64
    with AVX-512, and not the float64 values rounded, as NumPy's float32 generators give other
    numbers than its float64 ones; docs/benchmarks.md, design measurements). The results are
    bit-identical whatever the thread count, the CPU's instruction set, CPU or CUDA, and however
    the segments are split into calls, and equal :func:`fastfair.reference.normal_segments` in
    the same dtype: a segment's numbers depend only on its key and length (a longer segment
    extends a shorter one with the same key).

    Parameters
    ----------
    keys
        ``[m]`` uint64 (or int64, reinterpreted as uint64) Philox keys, one per segment (any
        ``__dlpack__`` array on the CPU or a CUDA device; a sequence of ints becomes NumPy).
    offsets
        ``[m + 1]`` int64 on the device of ``keys``: ``0 = offsets[0] <= ... <= offsets[m] = N``.
        Checked for CPU arrays; CUDA offsets are not inspected (a segment outside ``[0, N)`` is
        skipped).
    out
        ``[N]`` float32 or float64, C-contiguous, writable, on the device of ``keys``.
    total
        ``N``, used only when ``out`` is None; default ``offsets[-1]`` (for CUDA offsets that
        reads one number back from the GPU, a synchronisation: pass ``total`` to avoid it).
    dtype
        ``float32`` (default) or ``float64`` (a string, NumPy or torch dtype), when ``out`` is
        None.
    stream
        CUDA stream handle for CUDA arrays; default the current stream of their framework.

    Returns
    -------
    ``out``: ``[N]`` normals; allocated when None in the framework and on the device of ``keys``
    (NumPy in, NumPy out; torch in, torch out).
    """
    if framework_or_none(keys) is None:
        keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    if framework_or_none(offsets) is None:
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
    keys, offsets = detach(keys), detach(offsets)
    framework(offsets)
    if out is None:
        if len(offsets.shape) != 1 or offsets.shape[0] < 1:
            raise ValueError(f"offsets must have shape [m + 1]; got {tuple(offsets.shape)}")
        if total is None:
            last = offsets[-1]
            total = int(last.item() if hasattr(last, "item") else last)
        total = int(total)
        if total < 0:
            raise ValueError(f"total must be >= 0; got {total}")
        out = empty(keys, [total], _dtype_name(dtype))
    else:
        out = detach(out)
    _C.normal_segments(keys, offsets, out, current_stream(keys, stream))
    return out
