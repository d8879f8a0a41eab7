r"""Fed-CVaR-Avg: federated training of :math:`(1-\gamma)\,\mathrm{CVaR}_\alpha[f_I] +
\gamma\,\mathbb{E}[f_I]` over users relayed by an unknown random-access model, through the
Rockafellar–Uryasev form: every client minimises, jointly in :math:`(\theta, t)`,

.. math::
   G(\theta, t) = (1-\gamma)\,t + \frac{1-\gamma}{\alpha}\,[\ell(\theta) - t]_+
                 + \gamma\,\ell(\theta)

with ℓ the mean loss of a batch. One local step (simultaneous, strict ``ℓ > t``):

.. math::
   h = 1[\ell > t],\quad c = \gamma + \frac{(1-\gamma)h}{\alpha},\quad
   \theta \leftarrow \theta - \eta_\theta c\,\nabla\ell,\quad
   t \leftarrow t - \eta_t (1-\gamma)(1 - h/\alpha).

The server keeps only (θ, t): no per-client state. With m relayed clients in a round it takes the
uniform mean of their (θ', t') (duplicates count twice when allowed); with m = 1 that is a copy.
The one-step ("FedSGD") form weights the reported gradients by :math:`c_i/m` (not normalised) and
moves t by :math:`-\eta_t(1-\gamma)(1 - \frac{1}{m\alpha}\sum_i 1[\ell_i > t])`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import (
    StateSpec,
    check_choice,
    check_scalar,
    check_vector,
    host_array,
)
from fastfair.aggregators.base import Aggregator, Commit
from fastfair.aggregators.objectives import CVaRObjective, cvar_objective


def cvar_coefficients(losses: Any, t: float, alpha: float, gamma: float) -> Tuple[Any, Any]:
    r"""Per-batch multipliers of the local step: :math:`c = \gamma + (1-\gamma)h/\alpha` on the
    θ-gradient and :math:`\partial_t G = (1-\gamma)(1 - h/\alpha)`, with :math:`h = 1[\ell > t]`
    (strict, so a tie is cold). ``losses`` is a scalar or ``[m]``; returns float64 of its shape.
    """
    loss = np.asarray(losses, dtype=np.float64)
    hot = (loss > t).astype(np.float64)
    c = gamma + (1.0 - gamma) / alpha * hot
    dt = (1.0 - gamma) * (1.0 - hot / alpha)
    return (float(c), float(dt)) if c.ndim == 0 else (c, dt)


def cvar_discrete(values: Any, probs: Any, alpha: float) -> Tuple[float, float, float]:
    r"""CVaR and the VaR interval of :math:`Z = f_I`, :math:`I \sim \rho` (probs normalised).

    .. math:: \mathrm{CVaR}_\alpha = \frac{1}{\alpha}\sum_i f_{(i)}\,
              \mathrm{clip}\Big(\alpha - \sum_{j<i}\rho_{(j)},\, 0,\, \rho_{(i)}\Big)

    over f sorted in descending order. Returns ``(cvar, var_lo, var_hi)`` where ``[var_lo,
    var_hi]`` is the argmin set of :math:`t + \frac{1}{\alpha}\mathbb{E}[Z-t]_+`
    (``var_lo = -inf`` at α = 1). Masses are compared with a 1e-12 tolerance. O(K log K).
    """
    f, rho = _values_probs(values, probs)
    alpha = check_scalar(alpha, "alpha", lo=0.0, hi=1.0, lo_open=True)
    order = np.argsort(-f, kind="stable")
    before = np.cumsum(rho[order]) - rho[order]
    take = np.clip(alpha - before, 0.0, rho[order])
    cvar = float(take @ f[order] / alpha)
    tol = 1e-12
    levels = np.unique(f)
    above = np.array([rho[f > v].sum() for v in levels])
    at_or_above = np.array([rho[f >= v].sum() for v in levels])
    lo = -np.inf if alpha >= 1.0 - tol else float(levels[above <= alpha + tol].min())
    hi = float(levels[at_or_above >= alpha - tol].max())
    return cvar, lo, hi


def cvar_dual_weights(values: Any, probs: Any, alpha: float,
                      gamma: float) -> Tuple[np.ndarray, np.ndarray]:
    r"""Per-client weights the objective puts on each loss: :math:`q^*` maximises
    :math:`\sum q_i f_i` over :math:`0 \le q_i \le \rho_i/\alpha,\ \sum q_i = 1` (the largest f
    filled to their caps; tied boundary mass split in proportion to ρ), and
    :math:`w = (1-\gamma) q^* + \gamma\rho`. Returns ``(q, w)``, each ``[K]``.
    """
    f, rho = _values_probs(values, probs)
    alpha = check_scalar(alpha, "alpha", lo=0.0, hi=1.0, lo_open=True)
    gamma = check_scalar(gamma, "gamma", lo=0.0, hi=1.0)
    levels, group = np.unique(-f, return_inverse=True)  # levels ascending in -f: largest f first
    mass = np.bincount(group, weights=rho, minlength=levels.size)
    before = np.cumsum(mass) - mass
    take = np.clip(alpha - before, 0.0, mass)
    share = np.divide(take, mass, out=np.zeros_like(take), where=mass > 0)
    q = rho * share[group] / alpha
    return q, (1.0 - gamma) * q + gamma * rho


def relay_clients(probs: Any, u: Any) -> np.ndarray:
    r"""Clients relayed by an i.i.d. random-access model with probabilities ρ (any non-negative
    scale) for uniforms ``u`` ``[n]`` in [0, 1):
    ``searchsorted(cumsum(rho), u * sum(rho), side="right")``, the CDF built once in float64."""
    rho = host_array(probs, "probs").astype(np.float64).reshape(-1)
    if rho.size == 0 or not np.all(np.isfinite(rho)) or (rho < 0).any() or rho.sum() <= 0:
        raise ValueError("probs must be finite, non-negative and not all zero")
    cdf = np.cumsum(rho)
    return np.searchsorted(cdf, host_array(u, "u").astype(np.float64) * cdf[-1], side="right")


def _values_probs(values: Any, probs: Any) -> Tuple[np.ndarray, np.ndarray]:
    f = check_vector(values, np.size(host_array(values, "values")), "values")
    rho = check_vector(probs, f.shape[0], "probs", nonnegative=True)
    if rho.sum() <= 0:
        raise ValueError("probs must not be all zero")
    return f, rho / rho.sum()


class FedCVaRAvg(Aggregator):
    r"""Fed-CVaR-Avg: FedAvg on the augmented variable (θ, t) with the CVaR client step.

    Parameters
    ----------
    num_clients
        K.
    alpha
        CVaR level α in (0, 1]; small is risk-averse, 1 is the mean. Default 0.1 (the paper's
        Table 1 cell it quotes, α = γ = 0.1; a hot batch then steps with
        :math:`\gamma + (1-\gamma)/\alpha = 9.1` times the client learning rate).
    gamma
        Weight γ in [0, 1] of the mean term (1 is risk-neutral FedAvg). Default 0.1 (as α).
    threshold
        Initial threshold :math:`t_0` (default 0, as the authors' code).
    form
        ``"relay"`` (default, the paper's algorithm): clients train locally with
        :meth:`client_step` / :meth:`client_loss` and report (θ', t');
        ``weights(client_ids, thresholds=[m])`` returns ``1/m`` and sets t to the mean of the
        reported thresholds. ``"fedsgd"``: clients report a loss and a gradient at the current
        (θ, t); ``weights(client_ids, losses)`` returns :math:`c_i/m` (sum in
        :math:`[\gamma, \gamma + (1-\gamma)/\alpha]`) to apply with ``aggregate(grads, coef,
        base=theta, lr=lr)``, and moves t with ``lr_threshold``.
    lr_threshold
        :math:`\eta_t`, t's step size: required (> 0) for t to move in the one-step form; in
        the relay form 0 (default) means ``lr_threshold_ratio`` times the client learning rate.
    lr_threshold_ratio
        :math:`\eta_t/\eta_\theta` of the relay form when ``lr_threshold`` is 0. Default 0.05,
        the paper's FashionMNIST runs (η_θ = 1e-2, η_t = 5e-4; MNIST 0.1, synthetic 1).
    normalize
        One-step form only: divide the coefficients by their sum (changes the method; default
        False).
    allow_duplicates
        Accept a client listed twice in a round (relays drawn with replacement count twice).

    State: the threshold ``t`` (float64) and the round counter; nothing per client.
    In the relay form :meth:`client_objective` is the CVaR objective from the current t, and
    the round input ``thresholds`` is what it reports.
    """

    name = "fedcvar"
    # A state_dict written before lr_threshold_ratio existed stepped t with the client lr.
    options_before = {"lr_threshold_ratio": 1.0}

    def __init__(self, num_clients: int, alpha: float = 0.1, gamma: float = 0.1, *,
                 threshold: float = 0.0, form: str = "relay", lr_threshold: float = 0.0,
                 lr_threshold_ratio: float = 0.05, normalize: bool = False,
                 allow_duplicates: bool = False) -> None:
        super().__init__(num_clients)
        self.alpha = check_scalar(alpha, "alpha", lo=0.0, hi=1.0, lo_open=True)
        self.gamma = check_scalar(gamma, "gamma", lo=0.0, hi=1.0)
        self.form = check_choice(form, "form", ("relay", "fedsgd"))
        self.lr_threshold = check_scalar(lr_threshold, "lr_threshold", lo=0.0)
        self.lr_threshold_ratio = check_scalar(lr_threshold_ratio, "lr_threshold_ratio", lo=0.0)
        self.normalize = bool(normalize)
        self.allow_duplicates = bool(allow_duplicates)
        self.needs_losses = self.expects_gradients = self.form == "fedsgd"
        self.initial_threshold = check_scalar(threshold, "threshold")
        self.t = self.initial_threshold

    def _config(self) -> Dict[str, Any]:
        return {"alpha": self.alpha, "gamma": self.gamma, "threshold": self.initial_threshold,
                "form": self.form, "lr_threshold": self.lr_threshold,
                "lr_threshold_ratio": self.lr_threshold_ratio, "normalize": self.normalize,
                "allow_duplicates": self.allow_duplicates}

    def _state(self) -> Dict[str, Any]:
        return {"t": self.t}

    def _state_specs(self) -> Dict[str, StateSpec]:
        return {"t": StateSpec()}  # finite, as the constructor's threshold

    def _set_state(self, state: Dict[str, Any]) -> None:
        self.t = state["t"]

    # ------------------------------------------------------------------ server
    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        m = ids.shape[0]
        thresholds = round_inputs.pop("thresholds", None)
        self._no_round_inputs(round_inputs)
        if self.form == "relay":
            if thresholds is None:
                raise ValueError("thresholds is required in the relay form: pass the t' each "
                                 "relayed client reports, [m]")
            reported = check_vector(thresholds, m, "thresholds")
            new_t = float(np.mean(reported))
            coef = np.full(m, 1.0 / m)
        else:
            if thresholds is not None:
                raise ValueError("thresholds is only used in the relay form; the one-step form "
                                 "updates t from the losses")
            assert losses is not None  # needs_losses: propose() refuses a round without
            c, _ = cvar_coefficients(losses, self.t, self.alpha, self.gamma)
            hot_share = float(np.count_nonzero(losses > self.t)) / (m * self.alpha)
            new_t = self.t - self.lr_threshold * (1.0 - self.gamma) * (1.0 - hot_share)
            coef = c / c.sum() if self.normalize else c / m

        def commit() -> None:
            self.t = new_t

        return coef, commit

    @property
    def threshold(self) -> float:
        """The current global threshold t, broadcast with θ."""
        return self.t

    @property
    def round_inputs(self) -> Tuple[str, ...]:
        return ("thresholds",) if self.form == "relay" else ()

    def client_objective(self) -> Optional[CVaRObjective]:
        """The relay form's objective, trained jointly in t from the current threshold (t's step
        size ``lr_threshold``, or ``lr_threshold_ratio`` times the client learning rate when it
        is 0); None for the one-step form, whose clients report plain losses and gradients."""
        if self.form != "relay":
            return None
        return CVaRObjective(self.alpha, self.gamma, self.t, self.lr_threshold or None,
                             self.lr_threshold_ratio)

    # ------------------------------------------------------------------ client
    def client_loss(self, batch_loss: Any, t: Any) -> Any:
        r"""The client's training objective on one batch,
        :math:`G = (1-\gamma)t + \frac{1-\gamma}{\alpha}[\ell - t]_+ + \gamma\ell`, with ℓ the
        **mean** batch loss (a scalar). Works on floats, NumPy and torch (autograd through ℓ and
        a tensor t; the subgradient at ℓ = t is the cold one, as relu'(0) = 0)."""
        return cvar_objective(batch_loss, t, self.alpha, self.gamma)

    def client_step(self, theta: Any, t: float, grad: Any, loss: float, lr: float,
                    lr_threshold: float) -> Tuple[Any, float]:
        r"""One simultaneous local step from the mean batch loss ``loss`` and its gradient:
        :math:`\theta' = \theta - \eta_\theta c\,\nabla\ell`,
        :math:`t' = t - \eta_t (1-\gamma)(1 - h/\alpha)`. ``theta``/``grad`` are arrays of any
        framework (a new array is returned); ``loss`` must be finite."""
        loss = float(loss)
        if not np.isfinite(loss):
            raise ValueError(f"loss must be finite; got {loss}")
        c, dt = cvar_coefficients(loss, float(t), self.alpha, self.gamma)
        return theta - (lr * c) * grad, float(t) - lr_threshold * dt
