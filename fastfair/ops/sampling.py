"""Reproducible client sampling: m of K distinct ids in O(m), and Bernoulli availability."""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from fastfair import _C
from fastfair._arrays import current_stream, detach, empty, framework, integer, is_cuda, real

Array = Any

_MAX_CLIENTS = 2 ** 62


def _key(seed: Any, round: Any) -> Tuple[int, int]:
    """The (seed, round) key, checked: integers in [0, 2^64) and [0, 2^32)."""
    return integer(seed, "seed", 0, 2 ** 64), integer(round, "round", 0, 2 ** 32)


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
        ``1 <= K < 2^62``, an integer.
    m
        Sample size, an integer ``0 <= m <= K``.
    seed, round
        The key: integers, ``seed`` in [0, 2^64), ``round`` in [0, 2^32).
    like
        Optional array whose framework and device the ids are created in (default NumPy, CPU).
    out
        Optional int64 ``[m]`` array to fill (any framework or device).
    stream
        CUDA stream handle for CUDA outputs.

    Returns
    -------
    int64 ``[m]`` ids in sampling order (not sorted).

    Raises
    ------
    TypeError
        ``num_clients``, ``m``, ``seed`` or ``round`` is not an integer (floats are not
        truncated).
    ValueError
        One of them is out of its range.
    """
    num_clients = integer(num_clients, "num_clients", 1, _MAX_CLIENTS)
    m = integer(m, "m", 0, _MAX_CLIENTS)
    if m > num_clients:
        raise ValueError(f"m must be in [0, num_clients] = [0, {num_clients}] (sampling without "
                         f"replacement); got {m}")
    seed, round = _key(seed, round)
    if out is None:
        out = np.empty(m, dtype=np.int64) if like is None else empty(detach(like), [m], "int64")
    _C.sample_clients(num_clients, m, seed, round, detach(out), current_stream(out, stream))
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
        The key: integers, ``seed`` in [0, 2^64), ``round`` in [0, 2^32).
    num_clients
        ``K`` (an integer, ``0 <= K < 2^62``) when ``prob`` is a number.
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
    seed, round = _key(seed, round)
    if not hasattr(prob, "__dlpack__") and np.ndim(prob) == 0:
        if num_clients is None:
            raise ValueError("num_clients is needed when prob is a single number")
        scalar = real(prob, "prob")
        if not 0.0 <= scalar <= 1.0:
            raise ValueError(f"prob must be in [0, 1]; got {scalar}")
        K, prob_arr = integer(num_clients, "num_clients", 0, _MAX_CLIENTS), None
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
    _C.availability(prob_arr, scalar, seed, round, detach(out), current_stream(out, stream))
    return out
