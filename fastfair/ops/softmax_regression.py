"""Local minibatch SGD of multinomial logistic regression for a whole cohort, in one call."""

from __future__ import annotations

from typing import Any, Optional

from fastfair import _C
from fastfair._arrays import detach, integer, real

Array = Any

MAX_CLASSES = 128


def softmax_regression_sgd(x: Array, y: Array, offsets: Array, keys: Array, clients: Array,
                           steps: Array, params: Array, *, batch_size: int, lr: float,
                           received_loss: Optional[Array] = None) -> Array:
    r"""Trains R copies of a multinomial logistic-regression model, each on its own client's
    rows, through all their local steps; ``params`` is updated in place and returned.

    Row r (``params[r] = [W (F x C, row-major), b (C)]``) trains on batch client
    ``k = clients[r]``, whose :math:`n_k` samples are rows ``offsets[k]:offsets[k + 1]`` of
    ``x``, ``y``, for ``steps[r]`` steps. With :math:`E = \lceil n_k / B \rceil` batches per
    epoch, step t takes the positions :math:`[(t \bmod E) B, \min((t \bmod E + 1) B, n_k))` of
    epoch :math:`e = \lfloor t / E \rfloor`'s order of the client's rows: rows j sorted by

    .. math:: u(e, j) = \mathrm{uniform}\big(\mathrm{sm}(\mathrm{sm}(\kappa_k \oplus e)
       \oplus j)\big)

    (``sm`` splitmix64, ``uniform(h) = ((h >> 11) + 1/2) 2^-53``, :math:`\kappa_k` = ``keys[k]``;
    :func:`fastfair.sim.seeding.shuffle_uniforms`'s order, ties by j). On the v rows of a step

    .. math:: g_i = \mathrm{softmax}(x_i W + b) - e_{y_i}, \qquad
       W \leftarrow W - \frac{\eta}{v} \sum_i x_i^\top g_i, \qquad
       b \leftarrow b - \frac{\eta}{v} \sum_i g_i,

    one SGD step on the mean cross-entropy of the step's rows, in float32 (exponentials by the
    polynomial of ``csrc/include/fastfair/fast_exp.h``, about 1 ulp). With ``received_loss``,
    ``received_loss[r]`` becomes the mean cross-entropy of the starting model on all the
    client's rows (float64 sum). A row is trained by one thread from start to end, so its
    numbers depend neither on the other rows nor on the thread count.

    Parameters
    ----------
    x
        ``[N, F]`` float32, C-contiguous, CPU (NumPy or torch).
    y
        ``[N]`` int64 classes in ``[0, C)``.
    offsets
        ``[K + 1]`` int64, ``0 = offsets[0] <= ... <= offsets[K] = N``.
    keys
        ``[K]`` int64 shuffle keys (uint64 bit patterns) of the batch clients.
    clients, steps
        ``[R]`` int64: each row's batch client in ``[0, K)`` and its number of steps (>= 0).
    params
        ``[R, F C + C]`` float32, C-contiguous, writable: the starting models, trained in place;
        it shares no memory with the other arguments.
    batch_size, lr
        B >= 1 and :math:`\eta > 0`.
    received_loss
        Optional ``[R]`` float64 output.

    Returns ``params``. Raises ValueError for arrays off the CPU, shapes or dtypes other than the
    above, outputs sharing memory with inputs, more than ``MAX_CLASSES`` (128) classes, or a label
    of a trained client outside ``[0, C)``: all checked before any row is trained, so a call that
    raises leaves ``params`` and ``received_loss`` as they were.
    """
    batch_size = integer(batch_size, "batch_size", 1, 2 ** 62)
    lr = real(lr, "lr")
    _C.softmax_regression_sgd(detach(x), detach(y), detach(offsets), detach(keys),
                              detach(clients), detach(steps), detach(params), batch_size, lr,
                              None if received_loss is None else detach(received_loss))
    return params
