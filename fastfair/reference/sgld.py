"""Reference SGLD step, FedEvg server step and its step-size schedule (float64 NumPy).

The normal variates follow the stream of ``csrc/include/fastfair/sgld.h`` exactly (same Philox
words, Box-Muller in float64), so the compiled float64 path matches these to rounding and the
float32 path to float32 precision.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import numpy as np

from fastfair.reference.sampling import draw

TAG_GAUSSIAN = 0x47415553
BLOCK, COUNTERS = 64, 16

Scalar = Union[float, np.ndarray]


def gaussian(seed: int, offset: int, n: int) -> np.ndarray:
    r"""The ``n`` standard normals at stream positions ``g = offset, ..., offset + n - 1``.

    Position g lies in block ``b = g // 64`` at ``j = g % 64``; it takes word ``k = j // 16`` of
    Philox4x32-10 at counter ``16 b + j % 16`` (key ``seed``, counter words 2-3 = ``(0, GAUS)``).
    Box-Muller pairs words (0, 1) and (2, 3):
    :math:`z_0 = \sqrt{-2\ln u_0}\cos 2\pi a_1`, :math:`z_1 = \sqrt{-2\ln u_0}\sin 2\pi a_1`, with
    :math:`u = (w \gg 8)\,2^{-24} + 2^{-25}` and :math:`a = (w \gg 8)\,2^{-24}`.
    """
    g = np.uint64(offset) + np.arange(n, dtype=np.uint64)
    b, j = g // np.uint64(BLOCK), g % np.uint64(BLOCK)
    words = draw(seed, 0, TAG_GAUSSIAN, b * np.uint64(COUNTERS) + j % np.uint64(COUNTERS))
    k = (j // np.uint64(COUNTERS)).astype(np.int64)

    def u24(w: np.ndarray) -> np.ndarray:
        return (w >> np.uint64(8)).astype(np.float64) * 2.0 ** -24

    r01 = np.sqrt(-2.0 * np.log(u24(words[0]) + 2.0 ** -25))
    r23 = np.sqrt(-2.0 * np.log(u24(words[2]) + 2.0 ** -25))
    a1, a3 = 2 * np.pi * u24(words[1]), 2 * np.pi * u24(words[3])
    z = np.choose(k, [r01 * np.cos(a1), r01 * np.sin(a1), r23 * np.cos(a3), r23 * np.sin(a3)])
    return z


def _per_sample(v: Scalar, n: int, extra_dims: int) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v.reshape((n,) + (1,) * extra_dims) if v.ndim == 1 else v


def sgld_step(x: np.ndarray, grad: np.ndarray, *, step: Scalar, noise_std: Scalar, seed: int,
              offset: int, grad_clip: Optional[float] = None,
              clamp: Optional[Tuple[float, float]] = None) -> np.ndarray:
    r""":math:`\mathrm{clamp}(x - \gamma_n\,\mathrm{clip}(\nabla) + \sigma_n z)` over ``[N, ...]``
    in float64, ``z`` from :func:`gaussian` at ``offset`` (row-major element order)."""
    x = np.asarray(x, dtype=np.float64)
    g = np.asarray(grad, dtype=np.float64)
    if grad_clip is not None:
        g = np.clip(g, -grad_clip, grad_clip)
    n, extra = x.shape[0], x.ndim - 1
    z = gaussian(seed, offset, x.size).reshape(x.shape)
    out = x - _per_sample(step, n, extra) * g + _per_sample(noise_std, n, extra) * z
    if clamp is not None:
        out = np.clip(out, clamp[0], clamp[1])
    return out


def fedevg_server_step(x: np.ndarray, G: np.ndarray, e: np.ndarray, w: np.ndarray, *,
                       step: Scalar, noise_std: Scalar, seed: int, offset: int,
                       grad_clip: Optional[float] = None,
                       clamp: Optional[Tuple[float, float]] = (0.0, 1.0)) -> np.ndarray:
    r"""FedEvg server update (thesis Alg. 4.1, eq. 4.13-4.14), float64:
    :math:`\hat g_j = \sum_i w_i e_{ij} G_{ij} / \sum_i w_i e_{ij}`, then :func:`sgld_step`."""
    G = np.asarray(G, dtype=np.float64)
    a = np.asarray(w, dtype=np.float64)[:, None] * np.asarray(e, dtype=np.float64)  # [m, M]
    a = a / a.sum(0, keepdims=True)
    g = np.einsum("im,im...->m...", a, G)
    return sgld_step(x, g, step=step, noise_std=noise_std, seed=seed, offset=offset,
                     grad_clip=grad_clip, clamp=clamp)


def cosine_beta_schedule(rounds: int, beta_start: float = 10.0, beta_end: float = 0.01,
                         s: float = 0.008) -> np.ndarray:
    r"""FedEvg's server step sizes :math:`\beta^{(t)}`, ``t = 0..T-1`` (the DDPM cosine schedule,
    rescaled; docs/algorithms.md §3.2):

    .. math:: \bar\alpha(u) = \cos^2\!\Big(\frac{u/T + s}{1 + s}\frac{\pi}{2}\Big) / \bar\alpha(0),
       \quad b_t = 1 - \bar\alpha(t+1)/\bar\alpha(t),
       \quad \beta^{(t)} = \beta_{start} + (\beta_{end} - \beta_{start})\, b_t

    written out with Python floats, one term at a time.
    """
    def abar(u: float) -> float:
        return math.cos(((u / rounds) + s) / (1 + s) * math.pi / 2) ** 2

    out = np.empty(rounds)
    for t in range(rounds):
        b = 1.0 - (abar(t + 1) / abar(0)) / (abar(t) / abar(0))
        out[t] = beta_start + (beta_end - beta_start) * b
    return out
