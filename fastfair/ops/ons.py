r"""The Online Newton Step (ONS) of AAggFF-S and its generalized (A-norm) simplex projection.

Every round of ONS solves a quadratic program over the probability simplex,

.. math:: p^\star = \operatorname*{argmin}_{p \ge 0,\ \mathbf 1^\top p = 1}
          \tfrac12 p^\top H p - b^\top p,

whose KKT conditions are :math:`Hp - b - \nu \mathbf 1 - \mu = 0`, :math:`\mu \ge 0`,
:math:`p \ge 0`, :math:`\mu_i p_i = 0`. The solvers here are exact (primal active set on a
Cholesky factor or on a maintained inverse) except the batched FISTA solver, and every one returns
a certificate: the scaled KKT residual of the returned point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from fastfair import _C
from fastfair._arrays import (
    check_finite,
    current_stream,
    detach,
    empty,
    framework,
    from_host,
    integer,
    is_cuda,
    numpy_array,
    read_only,
    real,
)

Array = Any

# Largest K of the batched CUDA solver (vectors in shared memory); larger K are solved on the host.
CUDA_MAX_K = 2048


@dataclass(frozen=True)
class QpCertificate:
    r"""Certificate of a simplex QP solution.

    Attributes
    ----------
    kkt_residual
        With :math:`r = Hp - b`, F the support and :math:`\nu = (\max_F r + \min_F r)/2`:
        :math:`\max(\max_F |r_i - \nu|, \max_{i \notin F} (\nu - r_i)^+, |\mathbf 1^\top p - 1|)`
        divided by :math:`1 + \max(\max_i |H_{ii}|, \|b\|_\infty)` (a bound on the size of
        :math:`Hp` and b over the simplex: a normwise backward error).
    nu
        The multiplier :math:`\nu` of :math:`\mathbf 1^\top p = 1`.
    iterations
        Active-set changes (exact solvers) or gradient steps (FISTA).
    support_size
        :math:`|\{i : p_i > 0\}|`.
    refactorizations
        ONS only: 1 when the maintained inverse failed its certificate and was rebuilt from H.
    converged
        False when the iteration limit stopped the solver first (p is still on the simplex).
    """

    kkt_residual: float
    nu: float
    iterations: int
    support_size: int
    refactorizations: int = 0
    converged: bool = True


def _host_f64(x: Any, name: str, ndim: int) -> np.ndarray:
    """``x`` as a C-contiguous float64 NumPy array with ``ndim`` axes and finite entries."""
    kind = framework(x) if hasattr(x, "__dlpack__") else None
    if kind in ("torch", "cupy", "dlpack"):
        if is_cuda(x):
            raise ValueError(f"{name} is on a CUDA device; this solver runs on the host")
        x = np.from_dlpack(detach(x))
    arr = np.ascontiguousarray(numpy_array(x, name, np.float64))
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes; got shape {arr.shape}")
    check_finite(arr.reshape(-1), name)
    return arr


def ons_project(H: Array, b: Array, *, warm_start: Optional[Array] = None, max_iter: int = 0,
                return_info: bool = False) -> Union[Array, Tuple[Array, QpCertificate]]:
    r"""Exact minimiser of :math:`\tfrac12 p^\top H p - b^\top p` over the probability simplex.

    This is the generalized projection :math:`\Pi^H_\Delta(y) = \operatorname{argmin}_{p \in
    \Delta} (p - y)^\top H (p - y)` with :math:`y = H^{-1} b`. Primal active set on the Cholesky
    factor of the free block :math:`H_{FF}`, updated by one row/column per change
    (:math:`O(|F|^2)`).

    Parameters
    ----------
    H
        ``[K, K]`` symmetric positive definite (float64 in; any real dtype is converted).
    b
        ``[K]``.
    warm_start
        Optional ``[K]`` starting point, typically the previous round's solution; it is moved onto
        the simplex and its zero set starts the active set. Without it, the solver factors all of
        H first (which also proves H positive definite) and starts at the centre.
    max_iter
        Limit on active-set changes (``0``: ``10 K + 100``).
    return_info
        Also return the :class:`QpCertificate`.

    Returns
    -------
    p
        ``[K]`` float64 in the framework of ``H`` (on the host for CPU arrays; a CUDA ``H`` is
        solved by the batched FISTA solver on its device), with ``p >= 0`` and
        ``|sum(p) - 1| <= K * 2**-52``.

    Raises
    ------
    ValueError
        For a non-square, non-finite or non-symmetric ``H``, or an H that is not positive definite.
    """
    if hasattr(H, "__dlpack__") and is_cuda(H):
        p, info = ons_project_batched(H[None], b[None], method="fista", return_info=True)
        cert = QpCertificate(float(info["kkt_residual"][0]), float("nan"),
                             int(info["iterations"][0]), int(info["support_size"][0]))
        return (p[0], cert) if return_info else p[0]
    Hh = _host_f64(H, "H", 2)
    bh = _host_f64(b, "b", 1)
    K = bh.shape[0]
    if Hh.shape != (K, K):
        raise ValueError(f"H must have shape [{K}, {K}] to match b; got {list(Hh.shape)}")
    warm = None if warm_start is None else _host_f64(warm_start, "warm_start", 1)
    p = np.empty(K)
    try:
        info = _C.simplex_qp(Hh, bh, warm, p, integer(max_iter, "max_iter", 0, 2 ** 62))
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    p = from_host(p, H)
    return (p, QpCertificate(**info)) if return_info else p


def ons_project_batched(H: Array, b: Array, *, method: str = "auto", tol: float = 1e-12,
                        max_iter: int = 0, return_info: bool = False,
                        stream: Optional[int] = None
                        ) -> Union[Array, Tuple[Array, Dict[str, Array]]]:
    r"""B independent simplex QPs :math:`\min_{p_k \in \Delta} \tfrac12 p_k^\top H_k p_k -
    b_k^\top p_k`, one per batch entry.

    Methods: ``"active_set"`` (exact, host only, OpenMP over problems) and ``"fista"`` (FISTA
    with gradient restart, step :math:`1/L`, :math:`L = \max_i \sum_j |H_{ij}|`, Euclidean
    simplex projections, stopped when :math:`L \|x_{k+1} - y_k\|_\infty \le` ``tol`` times
    :math:`1 + \max(L, \|b\|_\infty)`, then polished: the equality-constrained problem on the
    detected support is solved exactly and kept when its certificate is better). ``"auto"`` is
    the active set on the host and FISTA on CUDA (one thread block per problem, the caller's
    stream, no synchronisation). CUDA inputs with ``K > 2048`` are solved on the host.

    Parameters
    ----------
    H
        ``[B, K, K]`` float64, symmetric positive definite.
    b
        ``[B, K]`` float64, same device as ``H``.

    Returns
    -------
    p
        ``[B, K]`` float64 in the framework and on the device of ``H``.
    info
        With ``return_info``: ``{"kkt_residual": [B] float64, "iterations": [B] int64,
        "support_size": [B] int64}`` on the same device.
    """
    if method not in ("auto", "active_set", "fista"):
        raise ValueError(f"method must be 'auto', 'active_set' or 'fista'; got {method!r}")
    cuda = hasattr(H, "__dlpack__") and is_cuda(H)
    if cuda:
        if method == "active_set":
            raise ValueError("the active-set method runs on the host; pass CPU arrays or "
                             "method='fista'")
        if H.shape[-1] > CUDA_MAX_K:
            p, info = ons_project_batched(H.cpu() if framework(H) == "torch" else H.get(),
                                          b.cpu() if framework(b) == "torch" else b.get(),
                                          method="active_set", return_info=True)
            p = from_host(np.asarray(p), H)
            info = {k: from_host(np.asarray(v), H) for k, v in info.items()}
            return (p, info) if return_info else p
        H, b = detach(H), detach(b)
        if len(H.shape) != 3 or len(b.shape) != 2:
            raise ValueError("H must be [B, K, K] and b [B, K]")
        B, K = int(H.shape[0]), int(H.shape[1])
        p = empty(H, [B, K], "float64")
        kkt = empty(H, [B], "float64")
        iters = empty(H, [B], "int64")
        support = empty(H, [B], "int64")
        _C.simplex_qp_batched(H, b, p, kkt, iters, support, 1,
                              integer(max_iter, "max_iter", 0, 2 ** 62), real(tol, "tol"),
                              current_stream(H, stream))
    else:
        Hh = _host_f64(H, "H", 3)
        bh = _host_f64(b, "b", 2)
        B, K = bh.shape
        if Hh.shape != (B, K, K):
            raise ValueError(f"H must have shape [{B}, {K}, {K}] to match b; got {list(Hh.shape)}")
        if K < 1:
            raise ValueError("K must be >= 1")
        p = np.empty((B, K))
        kkt = np.empty(B)
        iters = np.empty(B, dtype=np.int64)
        support = np.empty(B, dtype=np.int64)
        try:
            _C.simplex_qp_batched(Hh, bh, p, kkt, iters, support, 1 if method == "fista" else 0,
                                  integer(max_iter, "max_iter", 0, 2 ** 62), real(tol, "tol"), -1)
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
        p, kkt, iters, support = (from_host(a, H) for a in (p, kkt, iters, support))
    if return_info:
        return p, {"kkt_residual": kkt, "iterations": iters, "support_size": support}
    return p


class OnlineNewtonStep:
    r"""Online Newton Step over the simplex in FTRL/FTAL form, with state kept in flat float64
    arrays and one exact generalized projection per round.

    ``variant="paper"`` (AAggFF eq. 3.7):

    .. math:: H_t = \alpha I + \beta \sum_{\tau \le t} g_\tau g_\tau^\top, \quad
              b_t = \sum_{\tau \le t} (\beta \langle g_\tau, p_\tau \rangle - 1) g_\tau, \quad
              p_{t+1} = \operatorname*{argmin}_{p \in \Delta} \tfrac12 p^\top H_t p - b_t^\top p.

    ``variant="reference_code"`` (the authors' code): :math:`H_t = \alpha I + \beta(\alpha I +
    \sum g g^\top)`, :math:`b_t = -\sum g`. Both start at :math:`p_1 = \mathbf 1/K`.

    A round costs two passes over ``[K, K]`` matrices: H gains :math:`\beta g g^\top` and
    :math:`H^{-1}` is kept by Sherman-Morrison, each rank-1 term folded into the stored matrix
    during the next round's pass. The projection works on the zero set Z with the Schur complement
    :math:`(H^{-1})_{ZZ}` (:math:`O(K|Z| + |Z|^3)` per active-set change), warm-started from the
    previous support. The result is certified against H; if the certificate exceeds ``tol`` the
    round is re-solved with the Cholesky factor of :math:`H_{FF}` and the inverse is rebuilt from H
    (O(K^3), counted in ``last_info.refactorizations``).

    A :meth:`step` that raises (a non-finite ``g``, an update that overflows float64, or an
    :math:`H + \beta g g^\top` that is not numerically positive definite) leaves the object
    exactly as it was: :meth:`state_dict` before and after are equal bit for bit, and later steps
    run as if the call had not been made.

    Parameters
    ----------
    num_clients
        K >= 1.
    alpha, beta
        Regulariser and curvature constants, ``alpha > 0``, ``beta >= 0``. AAggFF-S uses
        ``alpha = 4 K L``, ``beta = 1 / (4 L)`` with ``L = C2 / (1 + C1)``.
    variant
        ``"paper"`` or ``"reference_code"``.
    tol
        Certificate threshold of the fast path (scaled KKT residual).
    """

    _VERSION = 1
    # The pending terms are settled before export, so pending_c is always 0 in a state_dict and
    # pending_g (the last gradient, not yet folded into H) is not part of it.
    _ARRAYS = ("H", "Hinv", "pending_u", "pending_c", "b", "p", "cumulative_gradient")

    def __init__(self, num_clients: int, alpha: float, beta: float, variant: str = "paper", *,
                 tol: float = 1e-10) -> None:
        K = integer(num_clients, "num_clients", 1, 2 ** 31)
        alpha, beta = real(alpha, "alpha"), real(beta, "beta")
        if not alpha > 0:
            raise ValueError(f"alpha must be positive and finite (it keeps H positive definite); "
                             f"got {alpha}")
        if not beta >= 0:
            raise ValueError(f"beta must be non-negative and finite; got {beta}")
        if variant not in ("paper", "reference_code"):
            raise ValueError(f"variant must be 'paper' or 'reference_code'; got {variant!r}")
        tol = real(tol, "tol", finite=False)
        if not tol > 0:
            raise ValueError(f"tol must be positive; got {tol}")
        self.num_clients = K
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.variant = variant
        self.tol = float(tol)
        diag = self.alpha if variant == "paper" else self.alpha * (1.0 + self.beta)
        self._H = np.eye(K) * diag
        self._Hinv = np.eye(K) / diag
        self._pending_u = np.zeros(K)
        self._pending_c = np.zeros(1)
        self._pending_g = np.zeros(K)
        self._b = np.zeros(K)
        self._p = np.full(K, 1.0 / K)
        self._cumulative_gradient = np.zeros(K)
        self.round = 0
        self.last_info: Optional[QpCertificate] = None

    @property
    def p(self) -> np.ndarray:
        """Current decision ``[K]`` (a read-only copy)."""
        return read_only(self._p.copy())

    @property
    def H(self) -> np.ndarray:
        """Current ``H_t`` ``[K, K]`` (a read-only copy)."""
        self._settle()
        return read_only(self._H.copy())

    def _settle(self) -> None:
        """Folds the pending rank-1 terms into the stored H and inverse (no change of the state
        itself: the next step computes the same bits either way)."""
        _C.ons_settle(self._H, self._Hinv, self._pending_u, self._pending_c, self._pending_g,
                      self.beta)

    @property
    def b(self) -> np.ndarray:
        """Current linear term ``b_t`` ``[K]`` (a copy)."""
        return self._b.copy()

    @property
    def cumulative_gradient(self) -> np.ndarray:
        r""":math:`\sum_\tau g_\tau` ``[K]`` (a copy)."""
        return self._cumulative_gradient.copy()

    def loss_gradient(self, r: Array) -> np.ndarray:
        r"""Gradient of the decision loss :math:`\ell(p) = -\log(1 + \langle p, r\rangle)` at
        the current p: :math:`g = -r / (1 + \langle p, r \rangle)`, ``r`` ``[K]``."""
        rh = _host_f64(r, "r", 1)
        if rh.shape[0] != self.num_clients:
            raise ValueError(f"r must have shape [{self.num_clients}]; got {list(rh.shape)}")
        return -rh / (1.0 + float(self._p @ rh))

    def step(self, g: Array) -> Array:
        """Applies one round with gradient ``g`` ``[K]`` and returns the new decision ``[K]``
        (in the framework of ``g``); the certificate is in ``last_info``. Raises ValueError,
        leaving the object as it was, for a ``g`` that is not finite or too large for the state
        (see the class notes)."""
        gh = _host_f64(g, "g", 1)
        if gh.shape[0] != self.num_clients:
            raise ValueError(f"g must have shape [{self.num_clients}]; got {list(gh.shape)}")
        info = _C.ons_step(self._H, self._Hinv, self._pending_u, self._pending_c, self._pending_g,
                           self._b, self._p, gh, self.beta, self.variant == "paper", self.tol, 0)
        self._cumulative_gradient += gh
        self.round += 1
        self.last_info = QpCertificate(**info)
        return from_host(self._p.copy(), g)

    def state_dict(self) -> Dict[str, Any]:
        """Everything needed to resume bit for bit: the constants and copies of all arrays."""
        self._settle()
        state: Dict[str, Any] = {"version": self._VERSION, "num_clients": self.num_clients,
                                 "alpha": self.alpha, "beta": self.beta, "variant": self.variant,
                                 "tol": self.tol, "round": self.round}
        for name in self._ARRAYS:
            state[name] = getattr(self, "_" + name).copy()
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`; validates everything before changing anything."""
        if state.get("version") != self._VERSION:
            raise ValueError(f"state version {state.get('version')!r} is not supported "
                             f"(expected {self._VERSION})")
        K = int(state["num_clients"])
        shapes = {"H": (K, K), "Hinv": (K, K), "pending_u": (K,), "pending_c": (1,), "b": (K,),
                  "p": (K,), "cumulative_gradient": (K,)}
        arrays = {}
        for name, shape in shapes.items():
            a = np.array(state[name], dtype=np.float64, copy=True, order="C")
            if a.shape != shape:
                raise ValueError(f"state[{name!r}] must have shape {list(shape)}; "
                                 f"got {list(a.shape)}")
            check_finite(a.reshape(-1), f"state[{name!r}]")
            arrays[name] = a
        if state["variant"] not in ("paper", "reference_code"):
            raise ValueError("state['variant'] must be 'paper' or 'reference_code'")
        self.num_clients = K
        self.alpha = float(state["alpha"])
        self.beta = float(state["beta"])
        self.variant = state["variant"]
        self.tol = float(state["tol"])
        self.round = int(state["round"])
        for name, a in arrays.items():
            setattr(self, "_" + name, a)
        self._pending_g = np.zeros(K)
        self.last_info = None
