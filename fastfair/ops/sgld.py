"""Batched stochastic-gradient Langevin dynamics: the fused SGLD step, the FedEvg server step
(self-normalised client mixture of energy gradients + Langevin step) and its step schedule."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from fastfair import _C
from fastfair._arrays import current_stream, detach, float64_like, framework, integer, real

Array = Any
PerSample = Union[float, Sequence[float], Array]


def _u64(value: int, name: str) -> int:
    return integer(value, name, 0, 2 ** 64)


def _scalar_or_vector(v: PerSample, like: Array, name: str) -> Tuple[float, Optional[Array]]:
    """(scalar, None) for a number, (0, float64 [N] array on like's device) for a vector."""
    if not hasattr(v, "__dlpack__") and np.ndim(v) == 0:
        return real(v, name, finite=False), None
    return 0.0, float64_like(v, like, name, vector=True)


def _clip(grad_clip: Optional[float]) -> float:
    return math.inf if grad_clip is None else real(grad_clip, "grad_clip", finite=False)


def _clamp(clamp: Optional[Tuple[float, float]]) -> Tuple[float, float]:
    if clamp is None:
        return -math.inf, math.inf
    lo, hi = clamp
    return real(lo, "clamp[0]", finite=False), real(hi, "clamp[1]", finite=False)


def sgld_step(x: Array, grad: Array, *, step: PerSample, noise_std: PerSample, seed: int,
              offset: int, grad_clip: Optional[float] = None,
              clamp: Optional[Tuple[float, float]] = None, out: Optional[Array] = None,
              stream: Optional[int] = None) -> Array:
    r"""One stochastic-gradient Langevin step over a batch, in one pass over memory.

    .. math:: x'_{n} = \mathrm{clamp}_{[lo, hi]}\big(x_{n} - \gamma_n\,
       \mathrm{clip}_{[-c, c]}(\nabla_{n}) + \sigma_n\, z_{n}\big), \qquad z_{n} \sim N(0, I)

    The normals come from Philox4x32-10 keyed by ``seed``: element ``i`` of ``x`` (row-major)
    takes position ``g = offset + i`` of a fixed stream (see ``csrc/include/fastfair/sgld.h``), so
    results do not depend on the thread count, and a call on rows ``[a, b)`` with
    ``offset + a * D`` reproduces those rows of a call on the whole batch. Advance ``offset`` by
    ``x.size`` (or change ``seed``) between calls that need fresh noise.

    Parameters
    ----------
    x
        ``[N, ...]`` float32 or float64, C-contiguous (NumPy, torch, CuPy; CPU or CUDA). Read-only
        inputs are fine when ``out`` is given.
    grad
        The gradient of the energy at ``x``, same shape, dtype and device.
    step, noise_std
        :math:`\gamma` and :math:`\sigma \ge 0`: one number, or one per sample (``[N]``).
    seed, offset
        The random stream: ``seed`` in [0, 2^64), ``offset`` in [0, 2^64).
    grad_clip
        ``c > 0``: the gradient is clipped elementwise to ``[-c, c]``; None for no clip.
    clamp
        ``(lo, hi)``: the result is clamped to ``[lo, hi]``; None for no clamp.
    out
        Result array (same shape, dtype, device). Default: ``x`` itself, updated in place; any
        other ``out`` shares no memory with ``x``, ``grad`` or the per-sample vectors.
    stream
        CUDA stream handle for CUDA inputs; default the current stream of their framework.

    Returns
    -------
    ``out`` (``x`` when updating in place). float32 arrays draw their normals in float32
    (polynomial log/sin/cos, a few ulp), float64 arrays in float64; |z| <= 5.9.
    """
    x, grad = detach(x), detach(grad)
    framework(x)
    if len(x.shape) < 1:
        raise ValueError("x must have shape [N, ...]; got a 0-d array")
    out = x if out is None else detach(out)
    step_s, step_v = _scalar_or_vector(step, x, "step")
    noise_s, noise_v = _scalar_or_vector(noise_std, x, "noise_std")
    lo, hi = _clamp(clamp)
    _C.sgld_step(x, grad, out, step_s, step_v, noise_s, noise_v, _clip(grad_clip), lo, hi,
                 _u64(seed, "seed"), _u64(offset, "offset"), current_stream(x, stream),
                 "x" if out is x else "out")
    return out


def fedevg_server_step(x: Array, G: Array, e: Any, w: Any, *, step: PerSample,
                       noise_std: PerSample, seed: int, offset: int,
                       grad_clip: Optional[float] = None,
                       clamp: Optional[Tuple[float, float]] = (0.0, 1.0),
                       out: Optional[Array] = None, stream: Optional[int] = None) -> Array:
    r"""FedEvg's server update of the synthetic set (thesis Alg. 4.1, eq. 4.13-4.14), fused: the
    client mixture of energy gradients and the Langevin step in one pass over ``G``.

    .. math:: \hat g_j = \frac{\sum_{i=1}^{m} w_i e_{ij} G_{ij}}{\sum_{i=1}^{m} w_i e_{ij}},
       \qquad \hat x_j' = \mathrm{clamp}_{[0,1]}\big(\hat x_j - \beta\,\hat g_j + \delta z_j\big)

    ``e_ij = exp(sgn f(x_j; theta_i)[y_j])`` in {1/e, 1, e} is client i's energy weight of sample
    j and ``G_ij`` its energy gradient at ``x_j``; the mixture is a softmax over clients with
    logits ``log w_i - E_ij`` (eq. 4.13). Normals as in :func:`sgld_step`.

    Parameters
    ----------
    x
        The synthetic set ``[M, ...]`` (e.g. ``[M, C, H, W]``), float32/float64, C-contiguous.
    G
        ``[m, *x.shape]``: the sampled clients' energy gradients, x's dtype and device.
    e
        ``[m, M]`` energy weights, > 0 (any array or sequence; converted to float64).
    w
        ``[m]`` client weights >= 0 with a positive sum (e.g. sample counts; the scale cancels).
    step, noise_std
        :math:`\beta` (this round's value of :func:`cosine_beta_schedule`) and :math:`\delta`:
        numbers or per-sample ``[M]``.
    seed, offset
        The random stream, as in :func:`sgld_step`.
    grad_clip
        Optional clip of :math:`\hat g` to ``[-c, c]``.
    clamp
        ``(lo, hi)``, default ``(0, 1)`` (the reference code's pixel range); None for none.
    out
        Result (default: ``x`` in place).
    stream
        CUDA stream handle for CUDA inputs.

    Returns
    -------
    ``out``. The mixture accumulates in the dtype of ``x``; the weights in float64.

    Raises
    ------
    ValueError
        (CPU) ``e`` not finite and > 0, or ``w`` negative, non-finite or all zero. CUDA inputs are
        not inspected.
    """
    x, G = detach(x), detach(G)
    framework(x)
    out = x if out is None else detach(out)
    m = int(G.shape[0]) if len(G.shape) else 0
    M = int(x.shape[0]) if len(x.shape) else 0
    e64 = float64_like(e, x, "e")
    if e64.shape[0] != m * M:
        raise ValueError(f"e must have shape [m, M] = [{m}, {M}]; got {e64.shape[0]} entries")
    e64 = e64.reshape(m, M)
    w64 = float64_like(w, x, "w", vector=True)
    step_s, step_v = _scalar_or_vector(step, x, "step")
    noise_s, noise_v = _scalar_or_vector(noise_std, x, "noise_std")
    lo, hi = _clamp(clamp)
    _C.fedevg_server_step(x, G, e64, w64, out, step_s, step_v, noise_s, noise_v, _clip(grad_clip),
                          lo, hi, _u64(seed, "seed"), _u64(offset, "offset"),
                          current_stream(x, stream), "x" if out is x else "out")
    return out


def cosine_beta_schedule(rounds: int, beta_start: float = 10.0, beta_end: float = 0.01,
                         s: float = 0.008) -> np.ndarray:
    r"""FedEvg's server step sizes :math:`\beta^{(t)}` for rounds ``t = 0..T-1`` (docs/algorithms.md
    §3.2): the DDPM cosine schedule of Nichol & Dhariwal, rescaled.

    .. math:: \bar\alpha(u) = \cos^2\!\Big(\frac{u/T + s}{1 + s}\,\frac{\pi}{2}\Big), \quad
       b_t = 1 - \frac{\bar\alpha(t+1)}{\bar\alpha(t)}, \quad
       \beta^{(t)} = \beta_{start} + (\beta_{end} - \beta_{start})\, b_t

    ``b_t`` rises from about 1e-4 to exactly 1, so :math:`\beta` stays near ``beta_start`` for most
    of training and reaches ``beta_end`` only in the last rounds (it is not cosine annealing).
    The thesis uses ``beta_start = 10``, ``beta_end = 0.01``; the reference code's scripts
    ``beta_end = 1``.

    Returns
    -------
    float64 ``[T]``.
    """
    rounds = integer(rounds, "rounds", 1, 2 ** 62)
    u = np.arange(rounds + 1, dtype=np.float64)
    abar = np.cos(((u / rounds) + s) / (1 + s) * np.pi / 2) ** 2
    b = 1.0 - abar[1:] / abar[:-1]
    return beta_start + (beta_end - beta_start) * b


__all__ = ["cosine_beta_schedule", "fedevg_server_step", "sgld_step"]
