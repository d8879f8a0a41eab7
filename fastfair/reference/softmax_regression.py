"""Local minibatch SGD of multinomial logistic regression, client by client, in float64."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def epoch_order(key: int, epoch: int, n: int) -> np.ndarray:
    """``[n]`` the client's rows in the order of ``epoch``: j sorted by
    ``splitmix64(splitmix64(key ^ epoch) ^ j) >> 11`` (the 53 bits of its uniform), ties by j."""
    h = _splitmix64((key & _MASK) ^ epoch)
    return np.array(sorted(range(n), key=lambda j: (_splitmix64(h ^ j) >> 11, j)), dtype=np.int64)


def softmax_regression_sgd(x: np.ndarray, y: np.ndarray, offsets: np.ndarray, keys: np.ndarray,
                           clients: np.ndarray, steps: np.ndarray, params: np.ndarray, *,
                           batch_size: int, lr: float) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`fastfair.ops.softmax_regression_sgd` in float64: returns the trained models
    ``[R, F C + C]`` and the received models' mean losses ``[R]``."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)
    features = x.shape[1]
    params = np.array(params, dtype=np.float64)
    classes = params.shape[1] // (features + 1)
    losses = np.empty(len(params))
    for r, k in enumerate(np.asarray(clients, dtype=np.int64)):
        xk, yk = x[offsets[k]:offsets[k + 1]], y[offsets[k]:offsets[k + 1]]
        n = len(yk)
        W = params[r, :features * classes].reshape(features, classes)
        b = params[r, features * classes:]
        losses[r] = _mean_loss(xk @ W + b, yk)
        per_epoch = -(-n // batch_size)
        order: Optional[np.ndarray] = None
        for t in range(int(steps[r])):
            within = t % per_epoch
            if within == 0:
                order = epoch_order(int(np.int64(keys[k]).view(np.uint64)), t // per_epoch, n)
            assert order is not None  # drawn at the first step of every epoch
            rows = order[within * batch_size:(within + 1) * batch_size]
            z = xk[rows] @ W + b
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(rows)), yk[rows]] -= 1.0
            g = p / len(rows)
            W -= lr * xk[rows].T @ g  # views of params[r]: updated in place
            b -= lr * g.sum(0)
    return params, losses


def _mean_loss(z: np.ndarray, y: np.ndarray) -> float:
    top = z.max(1)
    lse = top + np.log(np.exp(z - top[:, None]).sum(1))
    return float(np.mean(lse - z[np.arange(len(y)), y]))
