"""Reference simplex-constrained QPs and the Online Newton Step: the oracles of
``fastfair.ops.ons_project`` and ``fastfair.ops.OnlineNewtonStep``.

Problem: ``p* = argmin_{p >= 0, 1'p = 1} 1/2 p'Hp - b'p`` with H symmetric positive definite.
KKT: ``Hp - b - nu 1 - mu = 0``, ``mu >= 0``, ``p >= 0``, ``mu_i p_i = 0``, ``1'p = 1``.
"""

from __future__ import annotations

import itertools
from typing import Iterable, List, Optional

import numpy as np


def simplex_qp_enumerate(H: np.ndarray, b: np.ndarray) -> np.ndarray:
    r"""Exact minimiser by enumerating every support F (smallest first; K <= 12).

    For a support F, ``p_F`` and ``nu`` solve ``[[H_FF, -1], [1', 0]] [p_F; nu] = [b_F; 1]``
    (solved as one system: the shortcut ``p_F = u + nu v`` with ``u = H_FF^{-1} b_F``,
    ``v = H_FF^{-1} 1`` cancels badly when H is ill-conditioned); F is optimal when
    ``p_F >= 0`` and ``(Hp - b)_Z - nu >= 0`` off F.

    Parameters
    ----------
    H : [K, K] symmetric positive definite.
    b : [K].

    Returns
    -------
    p : [K] float64 on the simplex.
    """
    H = np.asarray(H, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    K = b.shape[0]
    if K > 12:
        raise ValueError(f"support enumeration visits 2^K - 1 supports; K = {K} > 12 is too big")
    scale = 1.0 + np.abs(H).max() + np.abs(b).max()
    best, best_violation = None, np.inf
    for k in range(1, K + 1):
        for support in itertools.combinations(range(K), k):
            S = list(support)
            kkt = np.zeros((k + 1, k + 1))
            kkt[:k, :k] = H[np.ix_(S, S)]
            kkt[:k, k] = -1.0
            kkt[k, :k] = 1.0
            solution = np.linalg.solve(kkt, np.r_[b[S], 1.0])
            pS, nu = solution[:k], solution[k]
            p = np.zeros(K)
            p[S] = np.maximum(pS, 0.0)
            mu = H @ p - b - nu
            off = np.setdiff1d(np.arange(K), S)
            violation = max(-pS.min(), -mu[off].min() if off.size else 0.0, 0.0) / scale
            if violation <= 1e-13:
                return p / p.sum()
            if violation < best_violation:  # ties and near-degenerate supports
                best, best_violation = p / p.sum(), violation
    if best_violation > 1e-9:
        raise RuntimeError("no support satisfies the KKT conditions; is H positive definite?")
    assert best is not None
    return best


def simplex_qp_cvxpy(H: np.ndarray, b: np.ndarray, solver: Optional[str] = None) -> np.ndarray:
    """The same problem through cvxpy (its default solver unless ``solver`` is named), as the
    authors of AAggFF solve it. Accuracy is the solver's (about 1e-6 to 1e-8). Needs cvxpy."""
    import cvxpy as cp

    H = np.asarray(H, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    K = b.shape[0]
    p = cp.Variable(K)
    objective = cp.Minimize(0.5 * cp.quad_form(p, cp.psd_wrap(0.5 * (H + H.T))) - b @ p)
    problem = cp.Problem(objective, [p >= 0, cp.sum(p) == 1])
    problem.solve(solver=solver)
    return np.asarray(p.value, dtype=np.float64)


def kkt_residual(H: np.ndarray, b: np.ndarray, p: np.ndarray) -> float:
    r"""The certificate of ``fastfair.ops.ons_project``: with ``r = Hp - b``, F the support and
    ``nu = (max_F r + min_F r) / 2``, the largest of ``|r_i - nu|`` on F, ``(nu - r_i)^+`` off F,
    ``(-p_i)^+`` and ``|1'p - 1|``, divided by ``1 + max(max_i |H_ii|, |b|_inf)``."""
    H = np.asarray(H, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    Hp = H @ p
    r = Hp - b
    F = p > 0
    nu = 0.5 * (r[F].max() + r[F].min())
    worst = max(0.5 * (r[F].max() - r[F].min()), (nu - r[~F]).max(initial=0.0),
                (-p).max(initial=0.0), abs(p.sum() - 1.0))
    return float(worst / (1.0 + max(np.abs(np.diag(H)).max(), np.abs(b).max())))


def online_newton_step(gradients: Iterable[np.ndarray], alpha: float, beta: float,
                       variant: str = "paper") -> List[np.ndarray]:
    r"""Decisions ``p^(2), p^(3), ...`` of the Online Newton Step (FTAL form) for a fixed
    sequence of gradients, rebuilt densely each round and solved by support enumeration.

    ``variant="paper"``: ``H_t = alpha I + beta sum g g'``,
    ``b_t = sum (beta <g, p^(tau)> - 1) g``.
    ``variant="reference_code"``: ``H_t = alpha I + beta (alpha I + sum g g')``, ``b_t = -sum g``.
    ``p^(1) = 1/K``. Each gradient is ``[K]``; returns one ``[K]`` array per round.
    """
    out = []
    p = None
    A = bsum = None
    for g in gradients:
        g = np.asarray(g, dtype=np.float64)
        K = g.shape[0]
        if p is None:
            p = np.full(K, 1.0 / K)
            A = np.zeros((K, K))
            bsum = np.zeros(K)
        A = A + np.outer(g, g)
        if variant == "paper":
            bsum = bsum + (beta * (g @ p) - 1.0) * g
            H = alpha * np.eye(K) + beta * A
        else:
            bsum = bsum - g
            H = alpha * np.eye(K) + beta * (alpha * np.eye(K) + A)
        p = simplex_qp_enumerate(H, bsum)
        out.append(p.copy())
    return out
