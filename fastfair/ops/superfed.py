"""SuPerFed client passes (thesis Ch. II, docs/algorithms.md §4): a cohort's federated and local
models as flat ``[m, P]`` rows cut into layers, updated by two fused passes per minibatch.

Pass 1, :func:`superfed_reduce`, reads ``f``, ``l`` and the global model once and returns the
per-layer sums the regularisers need. :func:`orthogonality_coefficients` and
:func:`prox_coefficients` turn them into a few numbers per client. Pass 2, :func:`superfed_step`,
reads every state once and writes it once: the lambda-split of the loss gradient, the proximity
and orthogonality gradients, weight decay, SGD with momentum for both models, and the mixed model
of the next minibatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from fastfair import _C
from fastfair._arrays import (
    check_finite,
    current_stream,
    detach,
    empty,
    float64_like,
    framework,
    is_cuda,
    real,
)

Array = Any


@dataclass(frozen=True)
class SegmentLayout:
    """How a flat parameter row of length ``P`` splits into layers (segments).

    ``offsets``: int64 ``[S + 1]``, from 0 to ``P``, non-decreasing; ``twinned``: bool ``[S]``,
    True for layers with a local twin (the reference code twins weights, not biases).
    """

    offsets: np.ndarray
    twinned: np.ndarray

    @classmethod
    def from_shapes(cls, shapes: Sequence[Sequence[int]],
                    twinned: Optional[Sequence[bool]] = None) -> "SegmentLayout":
        """One segment per parameter shape; by default tensors of two or more axes (weights) are
        twinned and vectors (biases) are shared."""
        sizes = [int(np.prod(s)) for s in shapes]
        flags = [len(s) >= 2 for s in shapes] if twinned is None else [bool(t) for t in twinned]
        if len(flags) != len(sizes):
            raise ValueError(f"twinned has {len(flags)} entries for {len(sizes)} shapes")
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return cls(offsets, np.asarray(flags, dtype=bool))

    def __post_init__(self) -> None:
        off = np.asarray(self.offsets, dtype=np.int64)
        if off.ndim != 1 or off.size < 1 or off[0] != 0 or (np.diff(off) < 0).any():
            raise ValueError("offsets must be int64 [S + 1], starting at 0, non-decreasing")
        if np.asarray(self.twinned).shape != (off.size - 1,):
            raise ValueError(f"twinned must have shape [S] = [{off.size - 1}]")
        object.__setattr__(self, "offsets", off)
        object.__setattr__(self, "twinned", np.asarray(self.twinned, dtype=bool))
        object.__setattr__(self, "_device", {})

    @property
    def num_segments(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def num_params(self) -> int:
        return int(self.offsets[-1])

    def arrays(self, like: Array) -> Tuple[Any, Any]:
        """(offsets, twinned) on the device of ``like`` (cached per device)."""
        if not is_cuda(like):
            return self.offsets, self.twinned.view(np.uint8)
        cache: Dict[Any, Any] = self._device  # type: ignore[attr-defined]  # __post_init__
        key = str(getattr(like, "device", "cuda"))
        if key not in cache:
            if framework(like) != "torch":
                raise TypeError("CUDA SuPerFed ops take torch tensors")
            import torch

            cache[key] = (torch.as_tensor(self.offsets, device=like.device),
                          torch.as_tensor(self.twinned.view(np.uint8), device=like.device))
        return cache[key]


def _f64(values: Any, like: Array, shape: Sequence[int], name: str) -> Array:
    """float64 ``shape`` on ``like``'s device; CPU values must be finite (checked before any
    state is written: O(m S), against the O(m P) pass)."""
    arr = float64_like(values, like, name)
    if arr.shape[0] != int(np.prod(shape)):
        raise ValueError(f"{name} must have shape {list(shape)}; got {arr.shape[0]} entries")
    if not is_cuda(arr):
        check_finite(arr, name)
    return arr.reshape(tuple(shape))


def superfed_reduce(f: Array, l: Array, g: Array, layout: SegmentLayout, *,
                    out: Optional[Array] = None, stream: Optional[int] = None) -> Array:
    r"""Per client ``r`` and layer ``s``, in one read of ``f``, ``l`` and ``g``:

    .. math:: \mathrm{out}_{rs} = \big(\langle f_{rs}, l_{rs}\rangle,\ \|f_{rs}\|^2,\
       \|l_{rs}\|^2,\ \|f_{rs} - g_s\|^2\big)

    (the first three are 0 for layers without a local twin). Float64 sums over fixed tiles, added
    in tile order: independent of the thread count.

    Parameters
    ----------
    f, l
        ``[m, P]`` float32 federated and local models (C-contiguous, one device).
    g
        ``[P]`` float32 global model.
    layout
        The :class:`SegmentLayout` of a row.
    out
        Optional ``[m, S, 4]`` float64 result.

    Returns
    -------
    ``[m, S, 4]`` float64 on the device of ``f``.
    """
    f, l, g = detach(f), detach(l), detach(g)
    m = int(f.shape[0])
    if out is None:
        out = empty(f, [m, layout.num_segments, 4], "float64")
    offsets, twinned = layout.arrays(f)
    _C.superfed_reduce(f, l, g, offsets, twinned, out, current_stream(f, stream))
    return out


def orthogonality_coefficients(reduced: Any, layout: SegmentLayout, nu: float) -> np.ndarray:
    r"""Coefficients of the orthogonality gradient (eq. 2.5), from :func:`superfed_reduce`:
    with :math:`c = \langle f, l\rangle / (\|f\|\|l\|)` over the twinned layers and
    :math:`R = \nu c^2`,

    .. math:: \nabla_f R = a_f\, l + b_f\, f, \quad \nabla_l R = a_l\, f + b_l\, l, \qquad
       a_f = a_l = \frac{2\nu c}{\|f\|\|l\|},\ b_f = -\frac{2\nu c^2}{\|f\|^2},\
       b_l = -\frac{2\nu c^2}{\|l\|^2}

    Returns ``[m, 4]`` float64 ``(a_f, b_f, a_l, b_l)`` (zeros where a norm is 0 or nu = 0).
    """
    r = np.asarray(_host(reduced), dtype=np.float64)
    tw = layout.twinned
    fl, ff, ll = (r[:, tw, k].sum(1) for k in range(3))
    out = np.zeros((r.shape[0], 4))
    ok = (ff > 0) & (ll > 0) & (nu != 0)
    nf, nl = np.sqrt(ff[ok]), np.sqrt(ll[ok])
    c = fl[ok] / (nf * nl)
    out[ok, 0] = out[ok, 2] = 2 * nu * c / (nf * nl)
    out[ok, 1] = -2 * nu * c * c / ff[ok]
    out[ok, 3] = -2 * nu * c * c / ll[ok]
    return out


def prox_coefficients(reduced: Any, layout: SegmentLayout, mu: float,
                      variant: str = "paper") -> np.ndarray:
    r"""Coefficients ``[m, S]`` of the proximity gradient ``coef * (f - g)`` per layer.

    ``'paper'`` (eq. 2.4): :math:`R = \frac{\mu}{2}\|f - g\|^2`, coefficient :math:`\mu` on every
    layer. ``'reference_code'`` (the reference code): :math:`R = \mu \sum_s \|f_s - g_s\|` over the
    twinned layers, coefficient :math:`\mu / \|f_s - g_s\|` (0 where the distance is 0).
    """
    r = np.asarray(_host(reduced), dtype=np.float64)
    m, S = r.shape[0], r.shape[1]
    if variant == "paper":
        return np.full((m, S), float(mu))
    if variant == "reference_code":
        dist = np.sqrt(r[:, :, 3])
        coef = np.where(dist > 0, mu / np.where(dist > 0, dist, 1.0), 0.0)
        return coef * layout.twinned[None, :]
    raise ValueError(f"prox variant must be 'paper' or 'reference_code'; got {variant!r}")


def _host(a: Any) -> np.ndarray:
    if framework(a) == "torch":
        return a.detach().cpu().numpy()
    return np.asarray(a)


def superfed_mix(f: Array, l: Array, lam: Any, layout: SegmentLayout, *,
                 out: Optional[Array] = None, stream: Optional[int] = None) -> Array:
    r"""The mixed models :math:`\theta(\lambda) = (1 - \lambda_{rs}) f + \lambda_{rs} l` per client
    ``r`` and twinned layer ``s`` (``f`` on shared layers), one pass.

    ``lam``: ``[m, S]`` (per layer, SuPerFed-LM) or ``[m]`` (one per client, SuPerFed-MM).
    Returns ``out`` (``[m, P]`` float32, allocated when None).
    """
    f, l = detach(f), detach(l)
    m, S = int(f.shape[0]), layout.num_segments
    lam64 = _lambda(lam, f, m, S, "lam")
    if out is None:
        out = empty(f, list(f.shape), "float32")
    offsets, twinned = layout.arrays(f)
    _C.superfed_step(f, l, None, None, None, None, lam64, None, detach(out), None, None, None,
                     offsets, twinned, 0.0, 0.0, 0.0, False, current_stream(f, stream), "out")
    return out


def _lambda(lam: Any, like: Array, m: int, S: int, name: str) -> Array:
    arr = float64_like(lam, like, name)
    if arr.shape[0] == m:
        arr = arr.reshape(m, 1).repeat(S, 1) if not is_cuda(like) else arr.reshape(m, 1).expand(
            m, S).contiguous()
    arr = _f64(arr, like, [m, S], name)
    if not is_cuda(arr) and ((arr < 0) | (arr > 1)).any():
        bad = np.argwhere((arr < 0) | (arr > 1))[0]
        raise ValueError(f"{name} must be in [0, 1]; got {arr[tuple(bad)]} at {list(bad)}")
    return arr


def superfed_step(f: Array, l: Array, g: Array, grad: Array, *, layout: SegmentLayout,
                  lam: Any, mixed: Array, buf_f: Array, buf_l: Array, prox: Any, orth: Any,
                  lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                  train_local: bool = True, lam_next: Any = None, active: Any = None,
                  stream: Optional[int] = None) -> Array:
    r"""One fused SuPerFed client step for a cohort (eq. 2.3 with the regularisers of
    docs/algorithms.md §4.2 and SGD with momentum and weight decay), in place.

    Per element of layer ``s`` of client ``r``, with :math:`\lambda = \lambda_{rs}` (0 on shared
    layers) and :math:`\nabla = \partial \ell / \partial \theta(\lambda)` (``grad``):

    .. math::
       g_f &= (1-\lambda)\nabla + p_{rs}(f - g) + w f + a_f l + b_f f, \qquad
       g_l = \lambda\nabla + w l + a_l f + b_l l \\
       B_f &\leftarrow \mu B_f + g_f,\ f \leftarrow f - \eta B_f, \qquad
       B_l \leftarrow \mu B_l + g_l,\ l \leftarrow l - \eta B_l \\
       \mathrm{mixed} &= (1 - \lambda'_{rs}) f + \lambda'_{rs} l

    where :math:`\lambda'` is ``lam_next`` (the next minibatch's weights; default ``lam``).

    Parameters
    ----------
    f, l, buf_f, buf_l
        ``[m, P]`` float32 states, updated in place (``l`` and ``buf_l`` only when
        ``train_local``; shared layers keep ``l``).
    g
        ``[P]`` float32 global model (the proximity anchor).
    grad
        ``[m, P]`` float32 gradient of the data loss at the mixed model.
    layout
        :class:`SegmentLayout`.
    lam, lam_next
        ``[m, S]`` or ``[m]`` mixing weights in [0, 1].
    mixed
        ``[m, P]`` float32 output: the mixed model for the next forward pass.
    prox
        ``[m, S]`` coefficients (:func:`prox_coefficients`).
    orth
        ``[m, 4]`` coefficients (:func:`orthogonality_coefficients`).
    lr, momentum, weight_decay
        :math:`\eta, \mu, w \ge 0` (PyTorch SGD semantics, no dampening).
    active
        Optional ``[m]`` bool: clients that took a real minibatch this step (others keep state).

    Returns
    -------
    ``mixed``.

    Raises
    ------
    ValueError
        Shapes, dtypes or devices that do not match, and (CPU) ``lam``/``lam_next`` outside
        [0, 1] or non-finite ``prox``/``orth``: checked before any state is written.
    """
    f, l, g, grad = detach(f), detach(l), detach(g), detach(grad)
    m, S = int(f.shape[0]), layout.num_segments
    lam64 = _lambda(lam, f, m, S, "lam")
    next64 = None if lam_next is None else _lambda(lam_next, f, m, S, "lam_next")
    prox64 = _f64(prox, f, [m, S], "prox")
    orth64 = _f64(orth, f, [m, 4], "orth")
    if active is None:
        active = np.ones(m, dtype=bool)
    if is_cuda(f):
        import torch

        act: Any = torch.as_tensor(active, device=f.device).to(torch.bool).contiguous()
    else:
        act = np.ascontiguousarray(_host(active), dtype=bool)
    offsets, twinned = layout.arrays(f)
    _C.superfed_step(f, l, g, grad, detach(buf_f), detach(buf_l), lam64, next64, detach(mixed),
                     prox64, orth64, act, offsets, twinned, real(lr, "lr"),
                     real(momentum, "momentum"), real(weight_decay, "weight_decay"),
                     bool(train_local), current_stream(f, stream), "mixed")
    return mixed
