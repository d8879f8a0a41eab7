"""Reference keyed normals for ragged segments (NumPy, float64 and float32).

A bit-exact twin of ``csrc/include/fastfair/normal_segments.h``: the same Philox words, and the
same sequence of IEEE operations for ln, cos and sin, in double precision for float64 and in
single precision for float32 (each NumPy ufunc rounds once, as the kernels do with contraction
off), so the compiled op returns exactly these values in either dtype.
"""

from __future__ import annotations

from typing import Tuple, Union

import numpy as np

from fastfair.reference.sampling import draw

TAG_NORMAL = 0x4E4F524D  # "NORM"

_SQRT_HALF = float.fromhex("0x1.6a09e667f3bcdp-1")
_HALF_PI = float.fromhex("0x1.921fb54442d18p+0")
_ROUND_MAGIC = 1.5 * 2.0 ** 52
_LN2_HI, _LN2_LO = float.fromhex("0x1.62e42feep-1"), float.fromhex("0x1.a39ef35793c76p-33")
_LG = [float.fromhex(h) for h in ("0x1.5555555555593p-1", "0x1.999999997fa04p-2",
                                  "0x1.2492494229359p-2", "0x1.c71c51d8e78afp-3",
                                  "0x1.7466496cb03dep-3", "0x1.39a09d078c69fp-3",
                                  "0x1.2f112df3e5244p-3")]
_S = [float.fromhex(h) for h in ("-0x1.5555555555549p-3", "0x1.111111110f8a6p-7",
                                 "-0x1.a01a019c161d5p-13", "0x1.71de357b1fe7dp-19",
                                 "-0x1.ae5e68a2b9cebp-26", "0x1.5d93a5acfd57cp-33")]
_C = [float.fromhex(h) for h in ("0x1.555555555554cp-5", "-0x1.6c16c16c15177p-10",
                                 "0x1.a01a019cb1590p-16", "-0x1.27e4f809c52adp-22",
                                 "0x1.1ee9ebdb4b1c4p-29", "-0x1.8fae9be8838d4p-37")]


def log_uniform(w: np.ndarray) -> np.ndarray:
    r""":math:`\ln u` for :math:`u = (w + 1/2)\,2^{-32}`, ``w`` uint32 words (fdlibm's log,
    branch-free: :math:`u = m 2^k` with :math:`m \in [\sqrt{1/2}, \sqrt 2)`, then a rational
    approximation of :math:`\ln m` in :math:`s = (m - 1) / (m + 1)`)."""
    u = (np.asarray(w, dtype=np.float64) + 0.5) * 2.0 ** -32
    fr, e = np.frexp(u)
    low = fr < _SQRT_HALF
    m = np.where(low, fr + fr, fr)
    k = e.astype(np.float64) - low
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    v = z * z
    lg1, lg2, lg3, lg4, lg5, lg6, lg7 = _LG
    t1 = v * (lg2 + v * (lg4 + v * lg6))
    t2 = z * (lg1 + v * (lg3 + v * (lg5 + v * lg7)))
    R = t2 + t1
    h = (0.5 * f) * f
    return k * _LN2_HI - ((h - (s * (h + R) + k * _LN2_LO)) - f)


def cos_sin_turn(w: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    r""":math:`(\cos\theta, \sin\theta)` for :math:`\theta = 2\pi w\,2^{-32}`: the nearest quarter
    turn ``q`` (exact), then FreeBSD's kernels on :math:`x = (4 w 2^{-32} - q)\,\pi/2 \in
    [-\pi/4, \pi/4]`."""
    t = np.asarray(w, dtype=np.float64) * 2.0 ** -30
    q = (t + _ROUND_MAGIC) - _ROUND_MAGIC
    x = (t - q) * _HALF_PI
    z = x * x
    v = z * z
    s1, s2, s3, s4, s5, s6 = _S
    c1, c2, c3, c4, c5, c6 = _C
    r = (s2 + z * (s3 + z * s4)) + (z * v) * (s5 + z * s6)
    S = x + (z * x) * (s1 + z * r)
    P = z * (c1 + z * (c2 + z * c3)) + (v * v) * (c4 + z * (c5 + z * c6))
    h = 0.5 * z
    g = 1.0 - h
    C = g + (((1.0 - g) - h) + z * P)
    odd = (q == 1.0) | (q == 3.0)
    c, s = np.where(odd, S, C), np.where(odd, C, S)
    return np.where((q > 0.5) & (q < 2.5), -c, c), np.where((q > 1.5) & (q < 3.5), -s, s)


_F = np.float32
_SQRT_HALF32 = _F(float.fromhex("0x1.6a09e6p-1"))
_TURN_QUARTER32 = _F(float.fromhex("0x1.921fb6p-30"))
_LN2_HI32, _LN2_LO32 = _F(float.fromhex("0x1.62e3p-1")), _F(float.fromhex("0x1.2fefa2p-17"))
_LG32 = [_F(float.fromhex(h)) for h in ("0x1.555554p-1", "0x1.999c26p-2", "0x1.23d3dcp-2",
                                        "0x1.f13c4cp-3")]
_S32 = [_F(float.fromhex(h)) for h in ("-0x1.555546p-3", "0x1.11073cp-7", "-0x1.9943f2p-13")]
_C32 = [_F(float.fromhex(h)) for h in ("0x1.55554ap-5", "-0x1.6c0c34p-10", "0x1.99eb9cp-16")]


def log_uniform32(w: np.ndarray) -> np.ndarray:
    r""":math:`\ln u` for :math:`u = (w + 1/2)\,2^{-32}` in float32 arithmetic: ``u = A + B`` split
    exactly (``A`` the high 16 bits of ``w``), ``s = A + B`` rounded with its exact error ``t``
    (Fast2Sum), FreeBSD's logf of ``s``, plus ``t / s``."""
    w = np.asarray(w).astype(np.uint32)
    A = (w >> np.uint32(16)).astype(_F) * _F(2.0 ** -16)
    B = ((w & np.uint32(0xFFFF)).astype(_F) + _F(0.5)) * _F(2.0 ** -32)
    s = A + B
    t = B - (s - A)
    b = s.view(np.uint32)
    e = ((b >> np.uint32(23)) | np.uint32(0x4B000000)).view(_F) - _F(2.0 ** 23 + 126)
    fr = ((b & np.uint32(0x7FFFFF)) | np.uint32(0x3F000000)).view(_F)
    low = fr < _SQRT_HALF32
    m = np.where(low, fr + fr, fr)
    k = np.where(low, e - _F(1), e)
    f = m - _F(1)
    r = f / (_F(2) + f)
    z = r * r
    v = z * z
    lg1, lg2, lg3, lg4 = _LG32
    R = z * (lg1 + v * lg3) + v * (lg2 + v * lg4)
    h = (_F(0.5) * f) * f
    return (k * _LN2_HI32 - ((h - (r * (h + R) + k * _LN2_LO32)) - f)) + t / s


def cos_sin_turn32(w: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    r""":math:`(\cos\theta, \sin\theta)` for :math:`\theta = 2\pi w\,2^{-32}` in float32
    arithmetic: the nearest quarter turn ``q`` and the rest ``r`` as integers (exact), then
    Cephes' sinf and cosf on :math:`x = r\,\pi / 2^{31} \in [-\pi/4, \pi/4]`."""
    w = np.asarray(w).astype(np.uint32)
    q = (w + np.uint32(1 << 29)) >> np.uint32(30)
    x = (w - (q << np.uint32(30))).view(np.int32).astype(_F) * _TURN_QUARTER32
    z = x * x
    s1, s2, s3 = _S32
    c1, c2, c3 = _C32
    S = x + (x * z) * (s1 + z * (s2 + z * s3))
    C = ((z * z) * (c1 + z * (c2 + z * c3)) - _F(0.5) * z) + _F(1)
    odd = (q & np.uint32(1)) != 0
    c, s = np.where(odd, S, C), np.where(odd, C, S)
    return np.where((q == 1) | (q == 2), -c, c), np.where(q >= 2, -s, s)


def segment_normals(key: int, n: int, dtype: Union[str, type] = "float64") -> np.ndarray:
    r"""The first ``n`` normals :math:`z(\mathrm{key}, j)` of one segment's stream, in ``dtype``
    (``float64`` or ``float32``, each computed in its own precision).

    Counter ``c = j // 4`` gives Philox words :math:`(w_0, w_1, w_2, w_3)` (key ``key``, counter
    words 2-3 = ``(0, NORM)``); :math:`z_{4c} = \rho(w_0)\cos\theta(w_1)`,
    :math:`z_{4c+1} = \rho(w_0)\sin\theta(w_1)`, :math:`z_{4c+2} = \rho(w_2)\cos\theta(w_3)`,
    :math:`z_{4c+3} = \rho(w_2)\sin\theta(w_3)`, with :math:`\rho(w) = \sqrt{-2\ln u}`.
    """
    words = draw(int(key), 0, TAG_NORMAL, np.arange((n + 3) // 4, dtype=np.uint64))
    if np.dtype(dtype) == np.float32:
        r0 = np.sqrt(_F(-2) * log_uniform32(words[0]))
        r2 = np.sqrt(_F(-2) * log_uniform32(words[2]))
        c1, s1 = cos_sin_turn32(words[1])
        c3, s3 = cos_sin_turn32(words[3])
    elif np.dtype(dtype) == np.float64:
        r0, r2 = np.sqrt(-2.0 * log_uniform(words[0])), np.sqrt(-2.0 * log_uniform(words[2]))
        c1, s1 = cos_sin_turn(words[1])
        c3, s3 = cos_sin_turn(words[3])
    else:
        raise ValueError(f"dtype must be float32 or float64; got {np.dtype(dtype)}")
    return np.stack([r0 * c1, r0 * s1, r2 * c3, r2 * s3], axis=1).reshape(-1)[:n]


def normal_segments(keys: np.ndarray, offsets: np.ndarray,
                    dtype: Union[str, type] = "float64") -> np.ndarray:
    r"""``out[offsets[i] + j] = z(keys[i], j)`` over ragged segments, ``[offsets[-1]]`` in
    ``dtype`` (float64 or float32).

    ``keys``: ``[m]`` uint64 (or int64, reinterpreted); ``offsets``: ``[m + 1]`` int64,
    non-decreasing, starting at 0. Each segment is :func:`segment_normals` of its key.
    """
    keys = np.asarray(keys).astype(np.uint64)
    offsets = np.asarray(offsets, dtype=np.int64)
    out = np.empty(int(offsets[-1]), dtype=dtype)
    for i, key in enumerate(keys):
        out[offsets[i]:offsets[i + 1]] = segment_normals(int(key), int(offsets[i + 1] - offsets[i]),
                                                         dtype)
    return out
