r"""FedMGDA(+): the aggregation weights that minimise the norm of the combined (normalised)
update, inside a box around uniform.

.. math::
   \lambda^* = \arg\min_{\lambda} \tfrac12 \lambda^\top P \lambda \quad\text{s.t.}\quad
   \textstyle\sum_i \lambda_i = 1,\quad \max(0, \tfrac1m - \epsilon) \le \lambda_i \le
   \min(1, \tfrac1m + \epsilon),

with :math:`P_{ij} = \langle d_i, d_j\rangle`, :math:`d_i = X_i/s_i`,
:math:`s_i = \max(\lVert X_i\rVert, \rho\max_j\lVert X_j\rVert)` (ρ = ``norm_floor``), or the
raw updates. ε >= 1 gives plain FedMGDA (the whole simplex). The QP is solved exactly by a primal
active-set method started at the uniform point: each iteration solves the KKT system of the free
coordinates (one linear solve of size <= m+1), moves to the first blocking bound or drops the
bound with the most negative multiplier, and stops when the KKT conditions hold. A singular
face (P is only positive semidefinite, e.g. d < m) is handled by moving along a zero-curvature
descent direction to the next bound. The coefficients returned for the raw updates are
:math:`\lambda_i / s_i` so that :math:`\sum_i c_i X_i = \sum_i \lambda_i d_i`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair._arrays import read_only
from fastfair.aggregators._checks import check_scalar, host_array
from fastfair.aggregators._updates import gram_matrix
from fastfair.aggregators.base import Aggregator, Commit


def _face_step(P: np.ndarray, g: np.ndarray, free: np.ndarray) -> Tuple[np.ndarray, float, bool]:
    """Minimiser step p on the face {p_W = 0, sum p_F = 0} of the quadratic with gradient g.

    Returns ``(p_F, nu, bounded)``; when the face is unbounded below (a zero-curvature direction
    of descent), ``p_F`` is that direction and ``bounded`` is False.
    """
    f = free.size
    B = np.empty((f + 1, f + 1))
    B[:f, :f] = P[np.ix_(free, free)]
    B[:f, f] = 1.0
    B[f, :f] = 1.0
    B[f, f] = 0.0
    rhs = np.zeros(f + 1)
    rhs[:f] = -g[free]
    try:
        sol = np.linalg.solve(B, rhs)
        if np.all(np.isfinite(sol)) and np.allclose(B @ sol, rhs, rtol=0.0,
                                                    atol=1e-12 * (1.0 + np.abs(rhs).max())):
            return sol[:f], -sol[f], True
    except np.linalg.LinAlgError:
        pass
    sol, *_ = np.linalg.lstsq(B, rhs, rcond=None)
    resid = rhs - B @ sol
    scale = 1e-9 * (1.0 + np.abs(rhs).max())
    if np.abs(resid[:f]).max() <= scale:
        return sol[:f], -sol[f], True
    # rhs has a component in null(B) = {(z, 0): P_FF z = 0, sum z = 0}: a direction of zero
    # curvature along which the objective decreases linearly.
    return resid[:f], 0.0, False


def _project_capped_simplex(y: np.ndarray, lower: float, upper: float) -> np.ndarray:
    """Euclidean projection onto {sum x = 1, lower <= x <= upper}: clip(y - s) with the shift s
    found by bisection on the monotone sum (to the last bit)."""
    lo, hi = float(y.min()) - upper, float(y.max()) - lower
    if abs(float(np.clip(y, lower, upper).sum()) - 1.0) <= 1e-13:
        lo = hi = 0.0  # already feasible up to rounding (the usual warm start): no shift
    for _ in range(200 if lo < hi else 0):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if np.clip(y - mid, lower, upper).sum() > 1.0:
            lo = mid
        else:
            hi = mid
    x = np.clip(y - hi, lower, upper)
    # Entries within rounding of a bound are put on it, so they join the working set.
    snap = 8 * np.finfo(np.float64).eps * upper
    x[x - lower <= snap] = lower
    x[upper - x <= snap] = upper
    free = np.flatnonzero((x > lower) & (x < upper))
    if free.size:
        x[free] += (1.0 - x.sum()) / free.size
    return x


def _solve(B: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """B x = rhs by LU, or the least-squares solution when B is singular."""
    try:
        sol = np.linalg.solve(B, rhs)
        if np.all(np.isfinite(sol)):
            return sol
    except np.linalg.LinAlgError:
        pass
    return np.linalg.lstsq(B, rhs, rcond=None)[0]


def _primal_dual_guess(P: np.ndarray, lower: float, upper: float,
                       max_iter: int = 50) -> np.ndarray:
    """Primal-dual active-set iterations: guess both bound sets at once from x and the bound
    multipliers z = Px - nu, solve the KKT system on the free set, repeat until the sets settle.
    Converges in a few iterations on well-posed problems; its result is only a warm start."""
    m = P.shape[0]
    x = np.full(m, 1.0 / m)
    g = P @ x
    z = g - g.mean()
    c = max(float(np.abs(P).max()), np.finfo(np.float64).tiny)
    prev = None
    for _ in range(max_iter):
        at_lo = z + c * (lower - x) > 0
        at_hi = (z + c * (upper - x) < 0) & ~at_lo
        key = (at_lo.tobytes(), at_hi.tobytes())
        if key == prev:
            break
        prev = key
        free = np.flatnonzero(~(at_lo | at_hi))
        x = np.where(at_lo, lower, np.where(at_hi, upper, 0.0))
        if free.size:
            f = free.size
            fixed = np.flatnonzero(at_lo | at_hi)
            B = np.empty((f + 1, f + 1))
            B[:f, :f] = P[np.ix_(free, free)]
            B[:f, f] = -1.0
            B[f, :f] = 1.0
            B[f, f] = 0.0
            rhs = np.empty(f + 1)
            rhs[:f] = -P[np.ix_(free, fixed)] @ x[fixed]
            rhs[f] = 1.0 - x[fixed].sum()
            sol = _solve(B, rhs)
            x[free] = sol[:f]
            nu = sol[f]
        else:
            nu = float((P @ x).mean())
        z = P @ x - nu
        z[free] = 0.0
    return x


def min_norm_box_qp(P: np.ndarray, lower: float, upper: float,
                    max_iter: int = 0) -> Tuple[np.ndarray, int]:
    r"""Exact solution of :math:`\min \tfrac12\lambda^\top P\lambda` over
    :math:`\{\sum\lambda = 1,\ l \le \lambda \le u\}` with :math:`l \le 1/m \le u`.

    ``P`` ``[m, m]`` symmetric positive semidefinite. A primal-dual active-set pass guesses the
    bound sets (usually right, in a few linear solves); its projection onto the feasible set
    starts a primal active-set method, which corrects the guess one bound at a time and stops
    only when the KKT conditions hold. Returns ``(lambda, primal iterations)``. Iterations are
    bounded by ``max_iter`` (default ``10 m + 100``); exceeding it raises ``RuntimeError``.
    """
    m = P.shape[0]
    if m == 1:
        return np.ones(1), 0
    if upper - lower <= 0.0:
        return np.full(m, 1.0 / m), 0
    lam = _project_capped_simplex(_primal_dual_guess(P, lower, upper), lower, upper)
    state = np.where(lam <= lower, -1, np.where(lam >= upper, 1, 0)).astype(np.int8)
    limit = max_iter or 10 * m + 100
    scale = max(float(np.abs(P).max()), np.finfo(np.float64).tiny)
    tol = 1e-12 * scale
    for it in range(1, limit + 1):
        g = P @ lam
        free = np.flatnonzero(state == 0)
        if free.size == 0:
            p_free, nu, bounded = np.zeros(0), float(np.mean(g)), True
        else:
            p_free, nu, bounded = _face_step(P, g, free)
        step_size = float(np.abs(p_free).max()) if p_free.size else 0.0
        if bounded and step_size <= 1e-14:
            if free.size == 0:
                # Every coordinate is at a bound: the equality's multiplier nu may be any value
                # with max g(upper) <= nu <= min g(lower); the midpoint is feasible when any is.
                lo_g, hi_g = g[state == -1], g[state == 1]
                if lo_g.size and hi_g.size:
                    nu = 0.5 * (lo_g.min() + hi_g.max())
                else:
                    nu = float(lo_g.min()) if lo_g.size else float(hi_g.max())
            # KKT: g_i - nu >= 0 at a lower bound, g_i - nu <= 0 at an upper bound.
            viol = np.where(state == -1, nu - g, np.where(state == 1, g - nu, 0.0))
            worst = int(np.argmax(viol))
            if viol[worst] <= tol:
                return lam, it
            state[worst] = 0
            continue
        p = np.zeros(m)
        p[free] = p_free
        ratios = np.full(m, np.inf)
        neg, pos = p < 0, p > 0
        ratios[neg] = (lower - lam[neg]) / p[neg]
        ratios[pos] = (upper - lam[pos]) / p[pos]
        block = int(np.argmin(ratios))
        alpha = max(float(ratios[block]), 0.0)
        if bounded and alpha >= 1.0:
            lam = lam + p
        else:
            lam = lam + alpha * p
            lam[block] = lower if p[block] < 0 else upper
            state[block] = -1 if p[block] < 0 else 1
        # Keep the equality exact against drift: spread the rounding over the free coordinates.
        free_now = np.flatnonzero(state == 0)
        if free_now.size:
            lam[free_now] += (1.0 - lam.sum()) / free_now.size
    raise RuntimeError(f"min_norm_box_qp did not converge in {limit} iterations")


def normalizers(gram: np.ndarray, norm_floor: float) -> np.ndarray:
    r"""``1/s_i`` ``[m]`` for the Gram matrix ``[m, m]`` of m updates, with
    :math:`s_i = \max(\lVert X_i\rVert, \rho\max_j\lVert X_j\rVert)` and ρ = ``norm_floor``;
    0 for a zero update, which then contributes nothing whatever its λ."""
    norms = np.sqrt(np.diag(gram))
    scale = np.maximum(norms, norm_floor * float(norms.max(initial=0.0)))
    return np.divide(1.0, scale, out=np.zeros(norms.shape[0]), where=norms > 0)


class FedMGDA(Aggregator):
    r"""FedMGDA(+): minimum-norm combination of the (normalised) client updates in a box.

    Parameters
    ----------
    num_clients
        K.
    epsilon
        Box half-width ε >= 0 around 1/m (FedMGDA+); ε >= 1 is plain FedMGDA; ε = 0 is FairAvg.
        Default 0.1 (FLGo's default; the AAggFF authors' grid is {0.1, 0.5, 1.0}).
    normalize_updates
        Combine :math:`X_i/s_i` (default, as FedMGDA+) or the raw updates.
    norm_floor
        Relative floor ρ in [0, 1] on the normalising norm: :math:`s_i = \max(\lVert X_i\rVert,
        \rho\max_{j\in S}\lVert X_j\rVert)`. An update below ρ of the cohort's largest keeps
        its small size instead of being scaled up to a unit vector (whose direction is then
        mostly noise), so its coefficient is at most :math:`\lambda_i/(\rho\max_j\lVert
        X_j\rVert)`. Default 0.01 (fastfair's choice, docs/algorithms.md §2.6.6); 0 scales
        every non-zero update to unit norm (the AAggFF authors' code; FLGo divides by
        :math:`\lVert X_i\rVert + 10^{-8}`).

    ``weights(client_ids, losses=None, updates=None, gram=None)``: pass the updates ``[m, *S]``
    (or m lists of arrays) or their Gram matrix ``gram`` ``[m, m]``. Returns coefficients for
    the raw updates, :math:`c_i = \lambda_i/s_i` (0 for a zero update), so that
    :math:`\sum_i c_i X_i = \sum_i \lambda_i X_i/s_i`; ``last_lambda`` and ``last_mixture`` hold
    λ* (the mixing weights, on the simplex). Apply with ``aggregate(updates, coef,
    base=params, lr=eta)``.
    Stateless; the cost is the Gram matrix (O(m² d)) plus the QP (a few O(m³) solves at most).
    """

    name = "fedmgda"
    # A state_dict written before norm_floor existed scaled every update to unit norm.
    options_before = {"norm_floor": 0.0}
    needs_losses = False
    round_inputs = ("updates",)

    def __init__(self, num_clients: int, epsilon: float = 0.1, *,
                 normalize_updates: bool = True, norm_floor: float = 1e-2) -> None:
        super().__init__(num_clients)
        self.epsilon = check_scalar(epsilon, "epsilon", lo=0.0)
        self.normalize_updates = bool(normalize_updates)
        self.norm_floor = check_scalar(norm_floor, "norm_floor", lo=0.0, hi=1.0)
        self.last_lambda: np.ndarray | None = None

    def _config(self) -> Dict[str, Any]:
        return {"epsilon": self.epsilon, "normalize_updates": self.normalize_updates,
                "norm_floor": self.norm_floor}

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        updates = round_inputs.pop("updates", None)
        gram = round_inputs.pop("gram", None)
        self._no_round_inputs(round_inputs)
        m = ids.shape[0]
        if (updates is None) == (gram is None):
            raise ValueError("pass exactly one of updates ([m, *S] or m lists of arrays) and "
                             "gram ([m, m])")
        if gram is not None:
            G = np.asarray(host_array(gram, "gram"), dtype=np.float64)
            if G.shape != (m, m):
                raise ValueError(f"gram must be [m, m] = [{m}, {m}]; got {G.shape}")
            if not np.all(np.isfinite(G)):
                raise ValueError("gram must be finite")
            if not np.allclose(G, G.T, rtol=1e-12, atol=0.0) or (np.diag(G) < 0).any():
                raise ValueError("gram must be symmetric with a non-negative diagonal")
        else:
            G = gram_matrix(updates, m)
        if self.normalize_updates:
            inv = normalizers(G, self.norm_floor)
            P = G * inv[:, None] * inv[None, :]
        else:
            inv = np.ones(m)
            P = G
        lower = max(0.0, 1.0 / m - self.epsilon)
        upper = min(1.0, 1.0 / m + self.epsilon)
        lam, _ = min_norm_box_qp(P, lower, upper)
        coef = lam * inv

        def commit() -> None:
            self.last_lambda = read_only(lam)

        return coef, commit

    def _mixture(self, coef: np.ndarray) -> np.ndarray:
        """λ*: the weights of the (normalised) updates in the combined direction."""
        assert self.last_lambda is not None  # commit() sets it before it asks for the mixture
        return self.last_lambda.copy()
