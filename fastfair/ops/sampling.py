"""Reproducible client sampling: m of K distinct ids in O(m), and Bernoulli availability."""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from fastfair import _C
from fastfair._arrays import current_stream, detach, empty, framework, is_cuda

Array = Any

_MAX_SEED = 2 ** 64


def _check_seed(seed: int) -> int:
    seed = int(seed)
    if not 0 <= seed < _MAX_SEED:
        raise ValueError(f"seed must be in [0, 2^64); got {seed}")
    return seed


def sample_clients(num_clients: int, m: int, *, seed: int, round: int,
                   like: Optional[Array] = None, out: Optional[Array] = None,
                   stream: Optional[int] = None) -> Array:
    r"""``m`` distinct client ids out of ``num_clients``, in O(m) time and memory.

    ``ids[j] = P(j)`` for ``j < m``, where ``P`` is a pseudo-random permutation of ``[0, K)``
    keyed by ``(seed, round)``: an 8-round Feistel network whose round keys come from
    Philox4x32-10, restricted to ``[0, K)`` by cycle walking. The ids are distinct by
    construction, every client is equally likely, and CPU and CUDA give the same ids.

    Parameters
    ----------
    num_clients
        ``K >= 1`` (up to 2^62).
    m
        Sample size, ``0 <= m <= K``.
    seed, round
        The key: ``seed`` in [0, 2^64), ``round`` in [0, 2^32).
    like
        Optional array whose framework and device the ids are created in (default NumPy, CPU).
    out
        Optional int64 ``[m]`` array to fill (any framework or device).
    stream
        CUDA stream handle for CUDA outputs.

    Returns
    -------
    int64 ``[m]`` ids in sampling order (not sorted).
    """
    num_clients, m = int(num_clients), int(m)
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1; got {num_clients}")
    if not 0 <= m <= num_clients:
        raise ValueError(f"m must be in [0, num_clients] = [0, {num_clients}] (sampling without "
                         f"replacement); got {m}")
    if out is None:
        out = np.empty(m, dtype=np.int64) if like is None else empty(detach(like), [m], "int64")
    _C.sample_clients(num_clients, m, _check_seed(seed), int(round), detach(out),
                      current_stream(out, stream))
    return out


def sample_available(prob: Union[float, Array], *, seed: int, round: int,
                     num_clients: Optional[int] = None, like: Optional[Array] = None,
                     out: Optional[Array] = None, stream: Optional[int] = None) -> Array:
    r"""Bernoulli availability: client ``i`` is available this round with probability ``prob_i``.

    .. math:: \mathrm{mask}_i = [\,u_i < \mathrm{prob}_i\,], \qquad
       u_i = w_{i} \cdot 2^{-32}

    where ``w_i`` is word ``i mod 4`` of Philox4x32-10 at offset ``i // 4`` of the
    ``(seed, round)`` availability stream: draws are independent across clients, a pure function
    of ``(seed, round)``, identical on CPU and CUDA. O(K) (one coin per client).

    Parameters
    ----------
    prob
        ``[K]`` float32/float64 per-client probabilities in [0, 1], or one number for all (then
        ``num_clients`` is needed).
    seed, round
        The key: ``seed`` in [0, 2^64), ``round`` in [0, 2^32).
    num_clients
        ``K`` when ``prob`` is a number.
    like
        Where to create the mask when ``prob`` is a number (default NumPy, CPU).
    out
        Optional bool or uint8 ``[K]`` mask to fill.
    stream
        CUDA stream handle for CUDA arrays.

    Returns
    -------
    bool ``[K]`` mask (the available ids are ``mask.nonzero()``), in the framework and device of
    ``prob`` (or ``like``/``out``).
    """
    seed = _check_seed(seed)
    if isinstance(prob, (int, float)):
        if num_clients is None:
            raise ValueError("num_clients is needed when prob is a single number")
        K, prob_arr, scalar = int(num_clients), None, float(prob)
        host = like
    else:
        prob_arr = detach(prob)
        framework(prob_arr)
        if len(prob_arr.shape) != 1:
            raise ValueError(f"prob must have shape [K]; got {tuple(prob_arr.shape)}")
        K, scalar, host = int(prob_arr.shape[0]), 0.0, prob_arr
        if not is_cuda(prob_arr):
            p = np.from_dlpack(prob_arr)
            bad = ~((p >= 0) & (p <= 1))
            if bad.any():
                pos = int(np.flatnonzero(bad)[0])
                raise ValueError(f"prob must be in [0, 1]; got {p[pos]} at position {pos}")
    if out is None:
        out = np.empty(K, dtype=bool) if host is None else empty(detach(host), [K], "bool")
    _C.availability(prob_arr, scalar, seed, int(round), detach(out), current_stream(out, stream))
    return out
