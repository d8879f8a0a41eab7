r"""Reference aggregation rules, straight from the papers' formulas in float64 NumPy.

They favour the literal form over speed: FedMABA copies and rewrites its whole K-vector and finds
λ* by bisection on the KL constraint; FedMGDA's QP is solved by enumerating every assignment of
the coordinates to {lower bound, upper bound, free} and keeping the best KKT point (m <= 8);
CVaR is the minimum of the Rockafellar–Uryasev function over its breakpoints; AAggFF-D keeps the
dense K-vector of cumulative gradients (optionally with the K x K Jacobian of the authors' code).
"""

from __future__ import annotations

import itertools
import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from fastfair.reference.ons import simplex_qp_enumerate
from fastfair.reference.simplex import project_simplex

# --------------------------------------------------------------------------- FedAvg, FairAvg

def fedavg_weights(num_samples: Sequence[float]) -> np.ndarray:
    r"""``n_k / sum_j n_j`` over the sampled clients."""
    n = np.asarray(num_samples, dtype=np.float64)
    return n / n.sum()


def fairavg_weights(m: int) -> np.ndarray:
    r"""``1/m`` for each of the m sampled clients."""
    return np.ones(m) / m


# --------------------------------------------------------------------------- FedMABA

def kl_to_uniform(pi: np.ndarray, n_ref: float) -> float:
    r""":math:`\sum_i \pi_i \log(N_\mathrm{ref}\pi_i)` (0 log 0 = 0)."""
    nz = pi > 0
    return float(np.sum(pi[nz] * np.log(n_ref * pi[nz])))


def fedmaba_weights(log_p_s: np.ndarray, losses: np.ndarray, step_size: float, rho: float,
                    n_ref: float, lambda_max: float = np.inf) -> Tuple[np.ndarray, float]:
    r"""π = softmax(a/(1+λ*)), a = log p_S + η_b F, with λ* >= 0 the smallest multiplier for
    which KL(π ‖ U_{N_ref}) <= ρ (λ* = λ_max when none is), found by bisection on
    τ = 1/(1+λ) to 1e-15. Returns (π, τ*)."""
    a = log_p_s + step_size * losses

    def softmax(tau: float) -> np.ndarray:
        z = tau * a
        e = np.exp(z - z.max())
        return e / e.sum()

    def g(tau: float) -> float:
        return kl_to_uniform(softmax(tau), n_ref) - rho

    tau_min = 1.0 / (1.0 + lambda_max)
    if g(1.0) <= 0:
        return softmax(1.0), 1.0
    if g(tau_min) >= 0:
        return softmax(tau_min), tau_min
    lo, hi = tau_min, 1.0
    while hi - lo > 1e-15:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if g(mid) > 0:
            hi = mid
        else:
            lo = mid
    return softmax(lo), lo


def fedmaba_round(log_p: np.ndarray, client_ids: Sequence[int], losses: Sequence[float], *,
                  step_size: float = 0.5, rho: float = 1.0, alpha: float = 0.5,
                  kl_reference: str = "sampled", sync: str = "mass_preserving",
                  lambda_max: float = np.inf) -> Tuple[np.ndarray, np.ndarray]:
    r"""One FedMABA round on the dense state: returns (c, new log p) with
    c = α π + (1-α)/m and p_S rewritten as M_S π (mass-preserving) or π (overwrite)."""
    ids = np.asarray(client_ids)
    m = ids.size
    n_ref = m if kl_reference == "sampled" else log_p.size
    pi, _ = fedmaba_weights(log_p[ids], np.asarray(losses, float), step_size, rho, n_ref,
                            lambda_max)
    p = np.exp(log_p)
    new_p = p.copy()
    new_p[ids] = p[ids].sum() * pi if sync == "mass_preserving" else pi
    with np.errstate(divide="ignore"):
        return alpha * pi + (1 - alpha) / m, np.log(new_p)


# --------------------------------------------------------------------------- Fed-CVaR-Avg

def cvar_step(theta: np.ndarray, t: float, grad: np.ndarray, loss: float, alpha: float,
              gamma: float, lr: float, lr_threshold: float) -> Tuple[np.ndarray, float]:
    r"""One simultaneous subgradient step on G = (1-γ)t + (1-γ)/α·relu(ℓ - t) + γℓ
    (relu'(0) = 0)."""
    hot = 1.0 if loss > t else 0.0
    d_theta = (gamma + (1 - gamma) / alpha * hot) * grad
    d_t = (1 - gamma) * (1 - hot / alpha)
    return theta - lr * d_theta, t - lr_threshold * d_t


def cvar_fedsgd_round(theta: np.ndarray, t: float, losses: Sequence[float],
                      grads: np.ndarray, alpha: float, gamma: float, lr: float,
                      lr_threshold: float) -> Tuple[np.ndarray, float]:
    r"""One-step form: the mean over the m clients of their step directions at (θ, t)."""
    m = len(losses)
    d_theta = np.zeros_like(theta)
    d_t = 0.0
    for loss, g in zip(losses, grads):
        hot = 1.0 if loss > t else 0.0
        d_theta += (gamma + (1 - gamma) / alpha * hot) * g / m
        d_t += (1 - gamma) * (1 - hot / alpha) / m
    return theta - lr * d_theta, t - lr_threshold * d_t


def cvar(values: Sequence[float], probs: Sequence[float], alpha: float) -> float:
    r""":math:`\min_t\ t + \frac{1}{\alpha}\sum_i \rho_i [f_i - t]_+`, attained at a breakpoint."""
    f = np.asarray(values, float)
    rho = np.asarray(probs, float)
    rho = rho / rho.sum()
    return float(min(t + np.dot(rho, np.maximum(f - t, 0.0)) / alpha for t in f))


# ------------------------------------------------------------------ q-FedAvg, TERM, PropFair

def qfedavg_step(global_params: np.ndarray, local_params: np.ndarray, losses: Sequence[float],
                 q: float, lipschitz: float) -> np.ndarray:
    r"""q-FedAvg server step: Δw_k = L(w - w_k), Δ_k = F_k^q Δw_k,
    h_k = q F_k^{q-1}‖Δw_k‖² + L F_k^q, w' = w - Σ Δ_k / Σ h_k.
    ``local_params`` is [m, d]."""
    w = np.asarray(global_params, float)
    deltas, hs = [], []
    for wk, fk in zip(np.asarray(local_params, float), losses):
        dw = lipschitz * (w - wk)
        deltas.append(fk ** q * dw)
        curv = q * fk ** (q - 1) * float(dw @ dw) if q != 0 and dw.any() else 0.0
        hs.append(curv + lipschitz * fk ** q)
    return w - np.sum(deltas, axis=0) / np.sum(hs)


def term_weights(losses: Sequence[float], tilt: float,
                 num_samples: Optional[Sequence[float]] = None) -> np.ndarray:
    r""":math:`n_k e^{\lambda F_k} / \sum_j n_j e^{\lambda F_j}` (uniform n when not given)."""
    f = np.asarray(losses, float)
    n = np.ones_like(f) if num_samples is None else np.asarray(num_samples, float)
    w = n * np.exp(tilt * f)
    return w / w.sum()


def propfair_weights(losses: Sequence[float], M: float,
                     num_samples: Optional[Sequence[float]] = None) -> np.ndarray:
    r""":math:`\propto n_k / (M - F_k)`: the gradient weights of :math:`-\sum n_k\log(M - F_k)`."""
    f = np.asarray(losses, float)
    n = np.ones_like(f) if num_samples is None else np.asarray(num_samples, float)
    w = n / (M - f)
    return w / w.sum()


def propfair_loss(loss: float, M: float, epsilon: float) -> float:
    r""":math:`-\log(1 - \ell/M)`, or :math:`\ell/M` when :math:`M - \ell < \epsilon`."""
    return loss / M if M - loss < epsilon else -np.log(1 - loss / M)


# --------------------------------------------------------------------------- FedMGDA

def fedmgda_lambda(P: np.ndarray, lower: float, upper: float) -> np.ndarray:
    r"""argmin ½λᵀPλ over {Σλ = 1, l <= λ <= u} by enumerating active sets (m <= 8).

    For each assignment of coordinates to {lower, upper, free}, solve the equality-constrained
    KKT system on the free set and keep the feasible point whose multipliers have the right
    signs with the lowest objective."""
    m = P.shape[0]
    if m > 8:
        raise ValueError("the enumeration reference is for m <= 8")
    best, best_val = None, np.inf
    for assign in itertools.product((-1, 0, 1), repeat=m):
        s = np.array(assign)
        lam = np.where(s == -1, lower, np.where(s == 1, upper, 0.0))
        free = np.flatnonzero(s == 0)
        if free.size == 0:
            if abs(lam.sum() - 1) > 1e-12:
                continue
            g = P @ lam
            lo_g, hi_g = g[s == -1], g[s == 1]
            if lo_g.size and hi_g.size and hi_g.max() > lo_g.min() + 1e-12:
                continue
        else:
            f = free.size
            B = np.zeros((f + 1, f + 1))
            B[:f, :f] = P[np.ix_(free, free)]
            B[:f, f] = -1.0
            B[f, :f] = 1.0
            fixed = np.flatnonzero(s != 0)
            rhs = np.concatenate([-P[np.ix_(free, fixed)] @ lam[fixed], [1 - lam[fixed].sum()]])
            sol, *_ = np.linalg.lstsq(B, rhs, rcond=None)
            if np.abs(B @ sol - rhs).max() > 1e-10:
                continue
            lam[free] = sol[:f]
            nu = sol[f]
            if (lam[free] < lower - 1e-12).any() or (lam[free] > upper + 1e-12).any():
                continue
            g = P @ lam
            if (g[s == -1] - nu < -1e-10).any() or (g[s == 1] - nu > 1e-10).any():
                continue
        val = 0.5 * lam @ P @ lam
        if val < best_val - 1e-15:
            best, best_val = lam.copy(), val
    if best is None:
        raise ValueError(f"no λ with sum 1 lies within [{lower}, {upper}]^{m}")
    return best


# --------------------------------------------------------------------------- server optimisers

def server_step(kind: str, params: np.ndarray, pseudo_grad: np.ndarray, m: np.ndarray,
                v: np.ndarray, *, lr: float, beta1: float = 0.9, beta2: float = 0.99,
                tau: float = 1e-3, momentum: float = 0.9) -> Tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    r"""One step of FedAvgM / FedAdam / FedYogi / FedAdagrad with Δ = -pseudo_grad.
    Returns (params, m, v) as new arrays."""
    d = -np.asarray(pseudo_grad, float)
    if kind == "avgm":
        m = momentum * m + d
        return params + lr * m, m, v
    m = beta1 * m + (1 - beta1) * d
    if kind == "adam":
        v = beta2 * v + (1 - beta2) * d * d
    elif kind == "yogi":
        v = v - (1 - beta2) * d * d * np.sign(v - d * d)
    elif kind == "adagrad":
        v = v + d * d
    else:
        raise ValueError(kind)
    return params + lr * m / (np.sqrt(v) + tau), m, v


# --------------------------------------------------------------------------- AAggFF

def aaggff_cdf(name: str, x: np.ndarray, normal_cdf: str = "paper") -> np.ndarray:
    r"""The six response CDFs of AAggFF written as in docs/algorithms.md §2.2 (every scale 1):
    Weibull :math:`1-e^{-x^2}`, Fréchet :math:`e^{-1/x}`, Gumbel :math:`e^{-e^{-(x-1)}}`,
    exponential :math:`1-e^{-x}`, logistic :math:`1/(1+e^{-(x-1)})`, normal
    :math:`\tfrac12(1+\mathrm{erf}((x-1)/\sqrt2))`; the authors' "normal" is
    :math:`\tfrac12(\mathrm{erfc}((x-1)/\sqrt2)+1)` (``normal_cdf="reference_code"``)."""
    x = np.asarray(x, float)
    if name == "normal":
        z = (x - 1) / np.sqrt(2)
        if normal_cdf == "reference_code":
            return np.array([0.5 * (math.erfc(v) + 1) for v in z])
        return np.array([0.5 * (1 + math.erf(v)) for v in z])
    with np.errstate(divide="ignore"):
        return {"weibull": lambda: 1 - np.exp(-x ** 2), "frechet": lambda: np.exp(-1 / x),
                "gumbel": lambda: np.exp(-np.exp(-(x - 1))), "exponential": lambda: 1 - np.exp(-x),
                "logistic": lambda: 1 / (1 + np.exp(-(x - 1)))}[name]()


def aaggff_responses(losses: Sequence[float], cdf: str, c1: float, c2: float,
                     normal_cdf: str = "paper") -> np.ndarray:
    r""":math:`r_i = C_1 + (C_2 - C_1)\,\mathrm{CDF}(F_i/\bar F)` (x = 1 when all losses are 0)."""
    f = np.asarray(losses, float)
    x = f / f.mean() if f.mean() > 0 else np.ones_like(f)
    return c1 + (c2 - c1) * aaggff_cdf(cdf, x, normal_cdf)


def aaggffd_round(G: np.ndarray, p: np.ndarray, client_ids: Sequence[int],
                  losses: Sequence[float], t: int, *, cdf: str = "weibull",
                  response_range: Optional[Tuple[float, float]] = None,
                  sample_prob: Optional[float] = None, variant: str = "paper",
                  normal_cdf: str = "paper", jacobian: bool = False
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""One dense AAggFF-D round t (1-based) over all K clients: the DR estimate, the linearised
    gradient, FTRL with the entropic regulariser. Returns new arrays ``(G, p, q)``.

    .. math::
       \hat r_i = \bar r + \mathbb 1[i\in S](r_i - \bar r)/C \ \text{(paper; reference code drops
       } \bar r \text{ on S)},\quad
       \hat g = h(r_0) + J_h(r_0)(\hat r - r_0),\quad r_0 = \bar r\mathbf 1,\\
       h(r) = -\frac{r}{1+\langle p,r\rangle},\quad
       J_h(r) = -\frac{I}{1+\langle p,r\rangle} + \frac{r p^\top}{(1+\langle p,r\rangle)^2},\quad
       G \mathrel{+}= \hat g,\quad p = \mathrm{softmax}(-\eta G),\quad
       \eta = \frac{\sqrt{\log K}}{\tilde L_\infty\sqrt{t+1}},\quad q = p_S/\textstyle\sum_S p

    ``p`` is the previous decision (``1/K`` at the start, or the authors' ``C 1``).
    ``jacobian=True`` builds :math:`J_h` as the K x K matrix, as the authors' code does (small K);
    otherwise the same product is formed per coordinate in O(K).
    """
    ids = np.asarray(client_ids, dtype=np.int64)
    K, m = G.shape[0], ids.shape[0]
    C = m / K if sample_prob is None else sample_prob
    c1, c2 = (0.0, C) if response_range is None else response_range
    r = aaggff_responses(losses, cdf, c1, c2, normal_cdf)
    rbar = r.mean()
    rhat = np.full(K, rbar)
    rhat[ids] = (rbar if variant == "paper" else 0.0) + (r - rbar) / C
    r0 = np.full(K, rbar)
    d = 1 + p @ r0
    h0 = -r0 / d
    if jacobian:
        J = -np.eye(K) / d + np.outer(r0, p) / d ** 2
        g = h0 + J @ (rhat - r0)
    else:
        g = h0 - (rhat - r0) / d + r0 * (p @ (rhat - r0)) / d ** 2
    G = G + g
    L = c2 / (1 + c1) + 2 * (c2 - c1) / (C * (1 + c1))
    eta = math.sqrt(math.log(K)) / (L * math.sqrt(t + 1))
    z = -eta * G
    e = np.exp(z - z.max())
    p_new = e / e.sum()
    return G, p_new, p_new[ids] / p_new[ids].sum()


def aaggffs_run(losses_seq: Sequence[Sequence[float]], *, cdf: str = "weibull",
                response_range: Optional[Tuple[float, float]] = None, variant: str = "paper",
                initial_p: str = "uniform", normal_cdf: str = "paper") -> List[np.ndarray]:
    r"""AAggFF-S decisions :math:`p^{(2)}, p^{(3)}, \dots` for rounds of full-participation
    losses ``[K]`` (client order), rebuilding the QP densely every round and solving it by
    support enumeration (K <= 12):

    .. math::
       g = -\frac{r}{1 + \langle p, r\rangle},\quad
       H = \alpha I + \beta\textstyle\sum g g^\top,\quad
       b = \textstyle\sum(\beta\langle g, p^{(\tau)}\rangle - 1) g \ \text{(paper)};\quad
       H = \alpha I + \beta(\alpha I + \textstyle\sum g g^\top),\ b = -\textstyle\sum g
       \ \text{(reference code)}

    with :math:`\alpha = 4KL`, :math:`\beta = 1/(4L)`, :math:`L = C_2/(1+C_1)`, range
    ``(0, 1/K)`` by default; ``initial_p="reference_code"`` puts :math:`p = \mathbf 1` in the
    first gradient's denominator."""
    losses_arr = np.asarray(losses_seq, float)
    K = losses_arr.shape[1]
    c1, c2 = (0.0, 1.0 / K) if response_range is None else response_range
    L = c2 / (1 + c1)
    alpha, beta = 4 * K * L, 1 / (4 * L)
    p = np.full(K, 1.0 / K)
    A, bsum, gsum, out = np.zeros((K, K)), np.zeros(K), np.zeros(K), []
    for t, F in enumerate(losses_arr):
        r = aaggff_responses(F, cdf, c1, c2, normal_cdf)
        p_grad = np.ones(K) if (initial_p == "reference_code" and t == 0) else p
        g = -r / (1 + p_grad @ r)
        A += np.outer(g, g)
        gsum += g
        bsum += (beta * (g @ p) - 1) * g
        if variant == "paper":
            H, b = alpha * np.eye(K) + beta * A, bsum
        else:
            H, b = alpha * np.eye(K) + beta * (alpha * np.eye(K) + A), -gsum
        p = simplex_qp_enumerate(H, b)
        out.append(p.copy())
    return out


# --------------------------------------------------------------------------- AFL

def afl_round(lam: np.ndarray, client_ids: Sequence[int], losses: Sequence[float],
              step_size: float, coefficients: str = "updated") -> Tuple[np.ndarray, np.ndarray]:
    r"""AFL: projected gradient ascent on the client weights λ of :math:`\min_\theta\max_{\lambda
    \in\Delta}\sum_i\lambda_i F_i(\theta)`, the sampled entries replaced:
    :math:`\lambda_S \leftarrow \Pi_\Delta(\lambda_S + \gamma F_S)` (sort-based projection).
    Returns ``(new lambda, coefficients)``: the new :math:`\lambda_S` (``"updated"``) or the
    previous :math:`\lambda_S / \sum_S \lambda` (``"previous"``; ``1/m`` when those are 0)."""
    ids = np.asarray(client_ids, dtype=np.int64)
    new = lam.copy()
    new[ids] = project_simplex(lam[ids] + step_size * np.asarray(losses, float))
    if coefficients == "updated":
        return new, new[ids]
    old = lam[ids]
    return new, old / old.sum() if old.sum() > 0 else np.full(ids.size, 1.0 / ids.size)
