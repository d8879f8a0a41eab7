"""Local minibatch SGD of multinomial logistic regression for a whole cohort, in one call."""

from __future__ import annotations

from typing import Any, Optional

from fastfair import _C
from fastfair._arrays import current_stream, detach, framework, integer, is_cuda, real

Array = Any

MAX_CLASSES = 128


def softmax_regression_sgd(x: Array, y: Array, offsets: Array, keys: Array, clients: Array,
                           steps: Array, params: Array, *, batch_size: int, lr: float,
                           received_loss: Optional[Array] = None, check_labels: bool = True,
                           stream: Optional[int] = None) -> Array:
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

    On a GPU (``x`` a CUDA array) one launch trains every row, one thread block a row, with
    the same minibatches in the same order and the same order of the sums as the CPU kernel;
    the two agree to float32 rounding (exponentials and the softmax sums' order differ; the
    tests hold them to the tolerance table's ``softmax_regression_cuda`` entry). ``offsets``,
    ``clients`` and ``steps`` stay on the host there (the launch is sized from them; one pinned,
    asynchronous copy stages them), the call does not synchronise, and the work runs on
    ``stream``.

    Parameters
    ----------
    x
        ``[N, F]`` float32, C-contiguous, on the CPU or a CUDA device (NumPy, torch, CuPy).
    y
        ``[N]`` int64 classes in ``[0, C)``, on ``x``'s device.
    offsets
        ``[K + 1]`` int64, ``0 = offsets[0] <= ... <= offsets[K] = N``, on the host.
    keys
        ``[K]`` int64 shuffle keys (uint64 bit patterns) of the batch clients, on ``x``'s device.
    clients, steps
        ``[R]`` int64 on the host: each row's batch client in ``[0, K)`` and its number of steps
        (>= 0).
    params
        ``[R, F C + C]`` float32, C-contiguous, writable, on ``x``'s device: the starting models,
        trained in place; it shares no memory with the other arguments.
    batch_size, lr
        B >= 1 and :math:`\eta > 0`.
    received_loss
        Optional ``[R]`` float64 output on ``x``'s device.
    check_labels
        On CUDA, first check every label against ``[0, C)`` (one synchronising reduction) and
        raise as the CPU kernel does. Without it a row whose client has a label outside
        ``[0, C)`` is left untouched and its ``received_loss`` set to NaN, with no error: for
        callers that validated their labels once (the simulator does when it loads data). The
        CPU kernel always checks.
    stream
        CUDA stream handle for CUDA inputs; default the current stream of their framework.

    Returns ``params``. Raises ValueError for arrays off their device, shapes or dtypes other
    than the above, outputs sharing memory with inputs, more than ``MAX_CLASSES`` (128)
    classes, or (on the CPU, and on CUDA with ``check_labels``) a label of a trained client
    outside ``[0, C)``: all checked before any row is trained, so a call that raises leaves
    ``params`` and ``received_loss`` as they were. A CUDA array in a build without CUDA raises
    with the rebuild command.
    """
    batch_size = integer(batch_size, "batch_size", 1, 2 ** 62)
    lr = real(lr, "lr")
    if check_labels and is_cuda(x):
        _check_device_labels(y, params, x)
    _C.softmax_regression_sgd(detach(x), detach(y), detach(offsets), detach(keys),
                              detach(clients), detach(steps), detach(params), batch_size, lr,
                              None if received_loss is None else detach(received_loss),
                              current_stream(x, stream))
    return params


def _check_device_labels(y: Array, params: Array, x: Array) -> None:
    """Raises ValueError naming the first label of ``y`` (on a CUDA device) outside
    ``[0, C)``, C = ``params.shape[1] / (F + 1)``; shapes are left to the kernel's checks."""
    if len(getattr(params, "shape", ())) != 2 or len(getattr(x, "shape", ())) != 2:
        return
    classes = params.shape[1] // (x.shape[1] + 1)
    bad = (y < 0) | (y >= classes)
    if not bool(bad.any()):
        return
    where = bad.nonzero()
    first = int(where[0, 0] if framework(y) == "torch" else where[0][0])
    raise ValueError(f"y[{first}] = {int(y[first])} is a class outside [0, C) = [0, {classes}); "
                     "pass labels in [0, C)")
