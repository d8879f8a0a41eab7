"""Reference Philox4x32-10, Feistel client sampling and Bernoulli availability (NumPy uint64).

Bit-exact twins of ``csrc/include/fastfair/philox.h`` and ``sampling.h``: the compiled ops must
return exactly these ids and masks.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

TAG_SAMPLE_CLIENTS = 0x53414D50
TAG_AVAILABILITY = 0x41564149
FEISTEL_ROUNDS = 8
_M32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter: Tuple[np.ndarray, ...], key: Tuple[int, int]) -> Tuple[np.ndarray, ...]:
    """Philox4x32-10 on counters given as four uint64 arrays of 32-bit words."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _M32 for c in counter)
    k0, k1 = np.uint64(key[0] & 0xFFFFFFFF), np.uint64(key[1] & 0xFFFFFFFF)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _M32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _M32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + np.uint64(0x9E3779B9)) & _M32
        k1 = (k1 + np.uint64(0xBB67AE85)) & _M32
    return c0, c1, c2, c3


def draw(seed: int, round: int, tag: int, offset: np.ndarray) -> Tuple[np.ndarray, ...]:
    """The four words at ``offset`` of the ``(seed, round, tag)`` stream."""
    off = np.asarray(offset, dtype=np.uint64)
    zeros = np.zeros_like(off)
    return philox4x32_10((off & _M32, off >> np.uint64(32), zeros + np.uint64(round),
                          zeros + np.uint64(tag)), (seed & 0xFFFFFFFF, seed >> 32))


def _mix64(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sample_clients(num_clients: int, m: int, *, seed: int, round: int) -> np.ndarray:
    """``ids[j] = P(j)``, ``P`` the cycle-walked 8-round Feistel permutation of ``[0, K)``."""
    bits = 2
    while bits < 64 and (1 << bits) < num_clients:
        bits += 1
    left, right = bits // 2, bits - bits // 2
    words = [int(w[0]) for w in draw(seed, round, TAG_SAMPLE_CLIENTS, np.array([0]))]
    words += [int(w[0]) for w in draw(seed, round, TAG_SAMPLE_CLIENTS, np.array([1]))]

    def encrypt(x: np.ndarray) -> np.ndarray:
        abits, bbits = left, right
        a, b = x >> np.uint64(bbits), x & np.uint64((1 << bbits) - 1)
        for r in range(FEISTEL_ROUNDS):
            f = _mix64(b ^ np.uint64(words[r] << 32) ^ np.uint64(r))
            a, b = b, (a + f) & np.uint64((1 << abits) - 1)
            abits, bbits = bbits, abits
        return (a << np.uint64(bbits)) | b

    y = encrypt(np.arange(m, dtype=np.uint64))
    out_of_range = y >= np.uint64(num_clients)
    while out_of_range.any():
        y[out_of_range] = encrypt(y[out_of_range])
        out_of_range = y >= np.uint64(num_clients)
    return y.astype(np.int64)


def sample_available(prob: np.ndarray, *, seed: int, round: int) -> np.ndarray:
    """``mask[i] = u_i < prob[i]`` with ``u_i`` word ``i % 4`` at offset ``i // 4``, times 2^-32."""
    prob = np.asarray(prob, dtype=np.float64)
    K = prob.shape[0]
    words = draw(seed, round, TAG_AVAILABILITY, np.arange((K + 3) // 4))
    u = np.stack(words, axis=1).reshape(-1)[:K].astype(np.float64) * 2.0 ** -32
    return u < prob
