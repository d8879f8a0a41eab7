"""AAggFF-D's doubly-robust (DR) gradient: the dense O(K) form and the exact O(m) lazy round."""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

from fastfair import _C
from fastfair._arrays import (
    current_stream,
    detach,
    empty,
    float64_like,
    framework,
    int64_like,
    is_cuda,
    real,
)

Array = Any


def _sample(ids: Any, responses: Any, like: Array) -> Tuple[Array, Array]:
    """The round's ids and responses as int64 / float64 ``[m]`` on ``like``'s device."""
    ids_a = int64_like(ids, like, "ids")
    if len(ids_a.shape) != 1:
        raise ValueError(f"ids must have shape [m]; got shape {tuple(ids_a.shape)}")
    return ids_a, float64_like(responses, like, "responses", vector=True)


def dr_gradient(responses: Any, ids: Any, p: Array, *, sample_prob: float,
                variant: str = "paper", out: Optional[Array] = None,
                with_estimate: bool = False,
                stream: Optional[int] = None) -> Union[Array, Tuple[Array, Array]]:
    r"""AAggFF-D's doubly-robust estimate and linearised gradient for all K clients, O(K).

    With the sampled ids ``S`` (m of them), their responses ``r_S``, ``C = sample_prob`` and the
    previous decision ``p``:

    .. math::
       \bar r = \tfrac{1}{m}\textstyle\sum_{j\in S} r_j,\quad
       \hat r_i = \begin{cases} \bar r & i\notin S \\ \bar r + (r_i-\bar r)/C & i\in S\
       \text{(paper)} \\ (r_i-\bar r)/C & i\in S\ \text{(reference\_code)} \end{cases}

       d = 1 + \bar r \textstyle\sum_j p_j,\quad
       s = \textstyle\sum_{j\in S} p_j(\hat r_j - \bar r),\quad
       \hat g_i = -\hat r_i / d + \bar r\, s / d^2

    (docs/algorithms.md §2.5.2, §2.5.3 and §2.5.7). Feed ``g`` to :func:`fastfair.ops.eg_step` with
    ``eta`` to get the next decision: together they are the dense AAggFF-D round.

    The gradient is defined for :math:`d > 0` (``d`` is the argument of the log in AAggFF's loss
    :math:`-\log(1 + \langle p, r\rangle)`; AAggFF's responses lie in ``[C1, C2]`` with
    ``C1 >= 0``, where :math:`d \ge 1`). It stays bounded as the responses grow (numerator and
    ``d`` grow together), so it is computed on :math:`r / \sigma`, :math:`\sigma` a power of two
    with :math:`\max|r| < 2\sigma` (exact: identical results wherever the plain formula is
    finite), and is finite for any finite responses unless the true value leaves the float64
    range.

    Parameters
    ----------
    responses
        ``[m]`` transformed losses ``r_S`` (finite).
    ids
        ``[m]`` distinct client ids in ``[0, K)``, int64 (any integer array or sequence).
    p
        ``[K]`` float64 previous decision ``p^(t)`` (the authors' code starts from ``C * 1``).
    sample_prob
        ``C`` in (0, 1], the probability that a client is sampled.
    variant
        ``"paper"`` (default) or ``"reference_code"`` (the authors' estimate, docs/algorithms.md
        §2.5.7).
    out
        Optional ``[K]`` float64 result for ``g``.
    with_estimate
        Also return ``rhat`` ``[K]``.
    stream
        CUDA stream handle for CUDA inputs.

    Returns
    -------
    ``g`` ``[K]`` float64, or ``(g, rhat)``, in the framework and device of ``p``.

    Raises
    ------
    ValueError
        (CPU, before anything is written) out-of-range or repeated ids, non-finite responses or
        ``p``, bad ``sample_prob``, :math:`d \le 0`, or a ``g`` (or ``rhat``) beyond the float64
        range. CUDA inputs are not inspected: out-of-range ids are skipped, the rest gives NaN/inf.
    """
    p = detach(p)
    framework(p)
    ids_a, r = _sample(ids, responses, p)
    K = int(p.shape[0]) if len(p.shape) == 1 else -1
    if K < 0:
        raise ValueError(f"p must have shape [K]; got shape {tuple(p.shape)}")
    if out is None:
        out = empty(p, [K], "float64")
    estimate = empty(p, [K], "float64") if with_estimate else None
    workspace = empty(p, [_C.dr_dense_workspace_len(K)], "float64") if is_cuda(p) else None
    _C.dr_gradient(r, ids_a, p, real(sample_prob, "sample_prob", finite=False), variant,
                   detach(out), estimate, workspace,
                   current_stream(p, stream))
    return (out, estimate) if with_estimate else out


def dr_lazy_step(state: Array, ids: Any, responses: Any, *, sample_prob: float, eta: float,
                 variant: str = "paper", prior_mass: float = 1.0, out: Optional[Array] = None,
                 stream: Optional[int] = None) -> Array:
    r"""One AAggFF-D round in O(m), touching only the sampled clients' state.

    The DR gradient is a common constant plus a sparse part, and the constant cancels in the softmax
    (docs/algorithms.md §2.5.6). The state ``D`` (float64, zero at the start) is the cumulative
    sparse part:

    .. math::
       \delta_i = -(\hat r_i - \bar r)/(1 + \bar r\,\mu), \qquad D_S \leftarrow D_S + \delta_S,
       \qquad q_i = \frac{e^{-\eta D_i}}{\sum_{j\in S} e^{-\eta D_j}}\ (i\in S)

    with ``rhat`` as in :func:`dr_gradient` and ``mu = prior_mass`` (``sum_j p_j^(t)``). ``q``
    equals ``p^(t+1)_S / sum_S p^(t+1)`` of the dense form exactly; the full decision, when
    needed, is ``fastfair.ops.softmax(D, scale=-eta)``. As in :func:`dr_gradient`, the step is
    defined for :math:`1 + \bar r\,\mu > 0` and computed on scaled responses, so ``delta`` is
    finite for any finite responses unless its true value leaves the float64 range (AAggFF's
    bounded responses give :math:`|\delta| \le (C_2 - C_1) / (C (1 + C_1))`).

    Parameters
    ----------
    state
        ``[K]`` float64 ``D``, updated in place on ``ids`` only.
    ids
        ``[m]`` distinct client ids in ``[0, K)``.
    responses
        ``[m]`` transformed losses ``r_S`` (finite).
    sample_prob
        ``C`` in (0, 1].
    eta
        The decision's learning rate this round, e.g. ``sqrt(log K) / (L * sqrt(t + 1))``.
    variant
        ``"paper"`` (default) or ``"reference_code"``.
    prior_mass
        ``sum_j p_j^(t)``: 1 on the simplex; ``C * K`` in round 1 of the authors' code.
    out
        Optional ``[m]`` float64 result.
    stream
        CUDA stream handle for CUDA inputs.

    Returns
    -------
    ``q`` ``[m]`` float64, the aggregation weights over ``ids`` (sum 1; empty for m = 0).

    Raises
    ------
    ValueError
        (CPU) out-of-range or repeated ids, non-finite responses or ``state[ids]``, bad
        ``sample_prob``, :math:`1 + \bar r\,\mu \le 0`, or a new ``D`` beyond the float64 range;
        ``state`` is left exactly as it was. CUDA inputs are not inspected: out-of-range ids are
        skipped (weight 0).
    """
    state = detach(state)
    framework(state)
    ids_a, r = _sample(ids, responses, state)
    if out is None:
        out = empty(state, [int(ids_a.shape[0])], "float64")
    _C.dr_lazy_step(state, ids_a, r, real(sample_prob, "sample_prob", finite=False),
                    real(eta, "eta", finite=False), real(prior_mass, "prior_mass", finite=False),
                    variant, detach(out), current_stream(state, stream))
    return out
