r"""FedMABA: exponentiated-gradient ascent on a persistent client distribution p, projected onto
a KL ball around uniform, mixed with uniform weights.

One round over the sampled set S (m clients), with state :math:`\ell = \log p \in \mathbb{R}^K`:

.. math::
   a_i = \ell_i + \eta_b F_i, \qquad
   \pi(\tau) = \mathrm{softmax}(\tau a), \qquad
   g(\tau) = \mathrm{KL}(\pi(\tau)\,\Vert\,U_{N_\mathrm{ref}}) - \rho
           = \tau\,\mathbb{E}_\pi[a] - \log\textstyle\sum_i e^{\tau a_i}
             + \log N_\mathrm{ref} - \rho

:math:`\tau^* = 1` when :math:`g(1) \le 0` (constraint inactive), else the root of g in (0, 1)
(g is non-decreasing: :math:`g'(\tau) = \tau \mathrm{Var}_\pi(a)`), or :math:`\tau^* = 0`
(uniform) when even :math:`g(0) = \log(N_\mathrm{ref}/m) - \rho > 0` (infeasible). The KL
multiplier of the paper is :math:`\lambda^* = 1/\tau^* - 1`. The applied coefficients are
:math:`c_i = \alpha \pi_i + (1-\alpha)/m`. State write-back ("sync"): mass-preserving
:math:`\ell_S \leftarrow \mathrm{logsumexp}(\ell_S) + \log\pi` (default) or overwrite
:math:`\ell_S \leftarrow \log\pi` (the literal reading). Only the m sampled entries are read and
written: O(m) per round whatever K. The root finder is safeguarded Newton on τ (bisection when a
Newton step leaves the bracket), a handful of passes over m values.
"""

from __future__ import annotations

import math
from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

from fastfair._arrays import read_only
from fastfair.aggregators._checks import (
    StateSpec,
    check_choice,
    check_scalar,
    check_scaled_losses,
    scaled_loss_problem,
)
from fastfair.aggregators._client_vector import ClientVector, check_state, upgrade
from fastfair.aggregators.base import Aggregator, Commit


class FedMABASolution(NamedTuple):
    """Result of :func:`fedmaba_project`."""

    log_pi: np.ndarray   #: ``[m]`` log of the projected distribution over S
    tau: float           #: temperature τ* in [0, 1]
    status: str          #: "inactive", "active" or "infeasible"
    iterations: int      #: root-finder passes over the m values


def _moments(a: np.ndarray, a2: np.ndarray, tau: float) -> Tuple[float, float, float]:
    e = np.exp(tau * a)
    return float(e.sum()), float(e @ a), float(e @ a2)


def fedmaba_project(a: np.ndarray, rho: float, n_ref: float, tau_min: float = 0.0,
                    max_iter: int = 100) -> FedMABASolution:
    r"""KL projection of ``softmax(a)`` onto :math:`\{\pi : \mathrm{KL}(\pi\Vert U_{N_\mathrm{ref}})
    \le \rho\}` along the tempering path :math:`\pi(\tau) = \mathrm{softmax}(\tau a)`.

    Parameters
    ----------
    a
        ``[m]`` scores :math:`\log p_S + \eta_b F_S` (float64, finite).
    rho
        KL radius ρ >= 0.
    n_ref
        :math:`N_\mathrm{ref}`, the size of the uniform reference (m or K).
    tau_min
        Lower end of the τ bracket, ``1/(1+lambda_max)``; 0 for an unbounded multiplier.

    Returns
    -------
    :class:`FedMABASolution` with :math:`\log\pi = \tau^* a' - \log\sum e^{\tau^* a'}`,
    :math:`a' = a - \max a` (exact in log space; no underflow for tiny π).
    """
    shifted = a - a.max()
    with np.errstate(over="ignore"):  # scores 1e154 apart: g' is then not finite (see below)
        a2 = shifted * shifted
    log_ref = math.log(n_ref)

    def g(tau: float) -> Tuple[float, float]:
        """g(tau) and g'(tau) = tau Var_pi(a) from one fused pass of moments."""
        with np.errstate(invalid="ignore", over="ignore"):  # a g' that is not finite: bisect
            s0, s1, s2 = _moments(shifted, a2, tau)
            mean = s1 / s0
            var = max(s2 / s0 - mean * mean, 0.0)
        return tau * mean - math.log(s0) + log_ref - rho, tau * var

    def solution(tau: float, status: str, iters: int) -> FedMABASolution:
        z = tau * shifted
        return FedMABASolution(z - math.log(float(np.exp(z).sum())), tau, status, iters)

    eps = np.finfo(np.float64).eps
    gt, dt = g(1.0)
    if gt <= 0.0:
        return solution(1.0, "inactive", 1)
    g_lo, _ = g(tau_min)
    if g_lo >= 0.0:
        return solution(tau_min, "infeasible" if g_lo > 0.0 else "active", 2)
    # g(lo) < 0 < g(hi): Newton from tau = 1, bisection whenever a step leaves the bracket.
    # Scores far apart (a poisoned loss of 1e100) put the root many orders of magnitude below 1,
    # where halving would run out of passes: while lo is 0, successive bisections divide hi
    # by 2, 4, 16, 256, ... (the exponent doubles), and while hi > 4 lo they take the
    # geometric mean, so any root down to the smallest float is bracketed in about 20 passes.
    lo, hi, tau, iters, shrink = tau_min, 1.0, 1.0, 2, 2.0
    for _ in range(max_iter):
        cand = tau - gt / dt if dt > 0.0 else math.inf
        newton = lo < cand < hi
        if not newton:
            if lo == 0.0:
                cand, shrink = hi / shrink or 0.5 * hi, min(shrink * shrink, 2.0 ** 512)
            else:
                cand = math.sqrt(lo) * math.sqrt(hi) if hi > 4.0 * lo else 0.5 * (lo + hi)
            if not lo < cand < hi:
                break  # the bracket is two adjacent floats
        moved = abs(cand - tau)
        tau = cand
        gt, dt = g(tau)
        iters += 1
        if gt > 0.0:
            hi = tau
        elif gt < 0.0:
            lo = tau
        else:
            break
        if (newton and moved <= 4.0 * eps * tau) or hi - lo <= 4.0 * eps * hi:
            break
    return solution(tau, "active", iters)


class FedMABA(Aggregator):
    r"""FedMABA: bandit (exponentiated-gradient) weights in a KL ball, mixed with uniform.

    Parameters
    ----------
    num_clients
        K.
    step_size
        :math:`\eta_b` >= 0, the exponent on the loss (paper default 0.5).
    rho
        KL radius ρ >= 0 (paper default 1.0).
    alpha
        Mix :math:`c = \alpha\pi + (1-\alpha)/m`, in [0, 1] (default 0.5, the paper's Table II,
        which also reports 0.8; α = 0 is FairAvg).
    kl_reference
        ``"sampled"`` (default): KL to uniform over the m sampled clients (log m);
        ``"total"``: the paper's literal eq. 10 with log K, infeasible whenever
        ``log(K/m) > rho`` (then π is uniform, or ``softmax(a/(1+lambda_max))``).
    sync
        ``"mass_preserving"`` (default, keeps p on the simplex) or ``"overwrite"`` (literal
        :math:`p_S \leftarrow \pi`). The round's coefficients are the same; later rounds differ.
    lambda_max
        Upper bracket of the KL multiplier λ (default ∞); a finite value mimics a bounded
        bisection.

    State: ``log_p`` over the K clients, ``-log K`` for every client not yet sampled, kept as a
    :class:`~fastfair.aggregators._client_vector.ClientVector` (16 bytes per client sampled so
    far, at most 8 bytes per client); :attr:`log_p` materialises it ``[K]`` in O(K).
    ``weights(client_ids, losses)`` returns ``c`` ``[m]``; ``last_solution`` holds π, τ*, the
    status and the iteration count of the last round. O(m) per round.
    """

    name = "fedmaba"

    def __init__(self, num_clients: int, step_size: float = 0.5, rho: float = 1.0,
                 alpha: float = 0.5, *, kl_reference: str = "sampled",
                 sync: str = "mass_preserving", lambda_max: float = math.inf) -> None:
        super().__init__(num_clients)
        self.step_size = check_scalar(step_size, "step_size", lo=0.0)
        self.rho = check_scalar(rho, "rho", lo=0.0)
        self.alpha = check_scalar(alpha, "alpha", lo=0.0, hi=1.0)
        self.kl_reference = check_choice(kl_reference, "kl_reference", ("sampled", "total"))
        self.sync = check_choice(sync, "sync", ("mass_preserving", "overwrite"))
        lam = float(lambda_max)
        if not lam >= 0.0:
            raise ValueError(f"lambda_max must be >= 0 (inf for no bound); got {lambda_max!r}")
        self.lambda_max = lam
        self._log_p = ClientVector(self.num_clients, -math.log(self.num_clients))
        self.last_solution: FedMABASolution | None = None

    def _config(self) -> Dict[str, Any]:
        return {"step_size": self.step_size, "rho": self.rho, "alpha": self.alpha,
                "kl_reference": self.kl_reference, "sync": self.sync,
                "lambda_max": self.lambda_max}

    def _state(self) -> Dict[str, Any]:
        return self._log_p.state("log_p")

    def _state_specs(self) -> Dict[str, StateSpec]:
        return ClientVector.specs("log_p")

    def _check_state(self, state: Dict[str, Any]) -> None:
        check_state(state, "log_p", self.num_clients)

    def _upgrade_state(self, given: Dict[str, Any]) -> Dict[str, Any]:
        return upgrade(given, "log_p", self.num_clients, -math.log(self.num_clients))

    def _set_state(self, state: Dict[str, Any]) -> None:
        self._log_p = ClientVector.from_state(state, "log_p", self.num_clients)

    @property
    def log_p(self) -> np.ndarray:
        """The state ``log_p`` ``[K]`` float64 (a new read-only array; O(K), on demand)."""
        return read_only(self._log_p.dense())

    @property
    def p(self) -> np.ndarray:
        """The full distribution ``exp(log_p)`` ``[K]`` (O(K); materialised on demand,
        read-only)."""
        return read_only(np.exp(self._log_p.dense()))

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Losses whose ``step_size * loss`` is beyond ``+-2**1000`` (the scores overflow)."""
        return scaled_loss_problem(self.step_size * loss, "step_size * loss")

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        assert losses is not None  # needs_losses: propose() refuses a round without
        with np.errstate(over="ignore"):
            check_scaled_losses(self.step_size * losses, "step_size * losses")
        m = ids.shape[0]
        log_p_s = self._log_p.gather(ids)
        a = log_p_s + self.step_size * losses
        n_ref = m if self.kl_reference == "sampled" else self.num_clients
        tau_min = 1.0 / (1.0 + self.lambda_max)
        sol = fedmaba_project(a, self.rho, n_ref, tau_min)
        pi = np.exp(sol.log_pi)
        coef = self.alpha * pi + (1.0 - self.alpha) / m
        if self.sync == "mass_preserving":
            top = log_p_s.max()
            new = top + math.log(float(np.exp(log_p_s - top).sum())) + sol.log_pi
        else:
            new = sol.log_pi

        def commit() -> None:
            self._log_p.scatter(ids, new)
            self.last_solution = sol

        return coef, commit
