r"""AAggFF: adaptive aggregation for fair FL as an online decision problem over the simplex.

Every round the server turns the participating clients' losses of the received global model into
responses in :math:`[C_1, C_2]` through a CDF (docs/algorithms.md §2.2),

.. math::
   x_i = F_i \Big/ \tfrac{1}{m}\textstyle\sum_{j \in S} F_j, \qquad
   r_i = C_1 + (C_2 - C_1)\,\mathrm{CDF}(x_i),

and suffers the decision loss :math:`\ell(p) = -\log(1 + \langle p, r\rangle)` of its mixing
coefficients p. Two online learners choose p:

* :class:`AAggFFS` (cross-silo, every client every round): the Online Newton Step in its
  FTRL/FTAL form (Alg. 3.1, eq. 3.7) on :math:`g = -r/(1 + \langle p, r\rangle)`, one exact
  generalized simplex projection per round through :class:`fastfair.ops.OnlineNewtonStep`.
* :class:`AAggFFD` (cross-device): FTRL with the entropic regulariser (exponentiated gradient) on
  the doubly-robust (DR) linearised gradient. Its common part cancels in the softmax, so a round is
  Hedge on a sparse pseudo-loss and costs O(m) whatever K (docs/algorithms.md §2.5.6), through
  :func:`fastfair.ops.dr_lazy_step`.

The six CDFs (every scale 1, thesis Table 3.3; in :mod:`fastfair.aggregators.aaggff_responses`):
Weibull :math:`1 - e^{-x^2}`, Fréchet :math:`e^{-1/x}`, Gumbel :math:`e^{-e^{-(x-1)}}`,
exponential :math:`1 - e^{-x}`, logistic :math:`1/(1 + e^{-(x-1)})`, normal :math:`\Phi(x - 1)`.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair import ops
from fastfair._arrays import read_only
from fastfair.aggregators._checks import StateSpec, check_choice, check_scalar
from fastfair.aggregators._client_vector import ClientVector, check_state, upgrade
from fastfair.aggregators.aaggff_responses import (
    CDFS,
    VARIANTS,
    _check_losses,
    _check_normal,
    _check_range,
    cdf_responses,
)
from fastfair.aggregators.aaggff_responses import cdf_transform as cdf_transform  # re-exported
from fastfair.aggregators.base import Aggregator, Commit


def dr_lipschitz(c1: float, c2: float, sample_prob: float) -> float:
    r"""Bound on :math:`\lVert\hat g\rVert_\infty` of the DR gradient (Lemma 3.5):
    :math:`\tilde L_\infty = C_2/(1 + C_1) + 2(C_2 - C_1)/(C(1 + C_1))` (``C + 2`` for the default
    range ``(0, C)``)."""
    return c2 / (1.0 + c1) + 2.0 * (c2 - c1) / (sample_prob * (1.0 + c1))




class AAggFFD(Aggregator):
    r"""AAggFF-D (cross-device): exponentiated gradient on the doubly-robust linearised gradient,
    in O(m) per round.

    With sampling probability C, responses ``r_S`` in :math:`[C_1, C_2]` (default
    :math:`[0, C]`), :math:`\bar r = \mathrm{mean}(r_S)` and the state
    :math:`D \in \mathbb R^K` (zero at the start), one round t is (docs/algorithms.md §2.5.6)

    .. math::
       D_i \leftarrow D_i - \frac{\hat r_i - \bar r}{1 + \bar r \mu_t}\ (i \in S),\quad
       \eta_{t+1} = \frac{\sqrt{\log K}}{\tilde L_\infty \sqrt{t+1}},\quad
       c_i = \frac{e^{-\eta_{t+1} D_i}}{\sum_{j\in S} e^{-\eta_{t+1} D_j}}\ (i \in S)

    with :math:`\hat r_i - \bar r = (r_i - \bar r)/C` (paper) and :math:`\mu_t = \sum_j p^{(t)}_j`
    (1 on the simplex). The coefficients equal :math:`p^{(t+1)}_S / \sum_S p^{(t+1)}` of the dense
    FTRL-EG decision :math:`p^{(t+1)} = \mathrm{softmax}(-\eta_{t+1}\sum_\tau \hat g^{(\tau)})`
    exactly: the DR gradient's common part is the same for all K clients and cancels.

    Parameters
    ----------
    num_clients
        K.
    cdf
        Response transform: ``"weibull"`` (default), ``"frechet"``, ``"gumbel"``,
        ``"exponential"``, ``"logistic"`` or ``"normal"``.
    response_range
        ``(C1, C2)`` with ``0 <= C1 < C2``; default ``(0, C)``, the range for which
        :math:`\tilde L_\infty = C + 2` does not blow up with 1/C (docs/algorithms.md §2.3).
    sample_prob
        C. Default None: :math:`\pi = m/K` of each round (uniform sampling of m of K). A number in
        (0, 1] is the nominal C of the authors' code (e.g. 0.00054 for CelebA where 5/9343 =
        0.000535).
    variant
        ``"paper"`` (default): :math:`\hat r_S = \bar r + (r_S - \bar r)/C`;
        ``"reference_code"``: :math:`\hat r_S = (r_S - \bar r)/C` (docs/algorithms.md §2.5.7).
    initial_p
        ``"uniform"`` (default): :math:`p^{(1)} = 1/K`; ``"reference_code"``:
        :math:`p^{(1)} = C\mathbf 1` (only the round-1 denominator changes:
        :math:`\mu_1 = CK`).
    normal_cdf
        ``"paper"`` (default) or ``"reference_code"``: the authors' decreasing "normal" (only
        with ``cdf="normal"``).
    step_scale
        s >= 0, a multiple of the decision step: :math:`\eta_{t+1} = s\sqrt{\log K}/(\tilde
        L_\infty\sqrt{t+1})`. Default 1, the thesis' step (Remark 3.3, eq. 3.12) and the
        authors' code's ``sqrt(log K) / sqrt(round + 1) / (2 + C)``; 0 never moves off uniform
        weights. Over a few groups (:class:`~fastfair.aggregators.OverGroups`) the default
        moves the weights slowly (docs/algorithms.md §8.4).

    State: ``D`` over the K clients, zero for every client not yet sampled, kept as a
    :class:`~fastfair.aggregators._client_vector.ClientVector` (16 bytes per client sampled so
    far, at most 8 bytes per client: a run's memory follows the clients it touches, not K), and
    the last step size ``eta``. Losses are the clients' (non-negative) losses of the global model
    they received, before local training. ``weights(client_ids, losses)`` returns ``c`` ``[m]``;
    :attr:`D` and :attr:`p` materialise ``D`` and the full decision :math:`p^{(t+1)}` in O(K).
    """

    name = "aaggff-d"

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Negative losses: AAggFF divides the losses by their mean."""
        return "must be non-negative (AAggFF divides the losses by their mean)" if loss < 0 \
            else None

    def __init__(self, num_clients: int, cdf: str = "weibull", *, response_range: Any = None,
                 sample_prob: Optional[float] = None, variant: str = "paper",
                 initial_p: str = "uniform", normal_cdf: str = "paper",
                 step_scale: float = 1.0) -> None:
        super().__init__(num_clients)
        self.cdf = check_choice(cdf, "cdf", CDFS)
        self.response_range = _check_range(response_range)
        self.step_scale = check_scalar(step_scale, "step_scale", lo=0.0)
        self.sample_prob = (None if sample_prob is None else
                            check_scalar(sample_prob, "sample_prob", lo=0.0, hi=1.0, lo_open=True))
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.initial_p = check_choice(initial_p, "initial_p", ("uniform", "reference_code"))
        self.normal_cdf = _check_normal(normal_cdf, self.cdf)
        self._D = ClientVector(self.num_clients, 0.0)
        self.eta = 0.0

    def _config(self) -> Dict[str, Any]:
        return {"cdf": self.cdf, "response_range": self.response_range,
                "sample_prob": self.sample_prob, "variant": self.variant,
                "initial_p": self.initial_p, "normal_cdf": self.normal_cdf,
                "step_scale": self.step_scale}

    def _state(self) -> Dict[str, Any]:
        return {**self._D.state("D"), "eta": self.eta}

    def _state_specs(self) -> Dict[str, StateSpec]:
        return {**ClientVector.specs("D"), "eta": StateSpec(lo=0.0)}

    def _check_state(self, state: Dict[str, Any]) -> None:
        check_state(state, "D", self.num_clients)

    def _upgrade_state(self, given: Dict[str, Any]) -> Dict[str, Any]:
        return upgrade(given, "D", self.num_clients, 0.0)

    def _set_state(self, state: Dict[str, Any]) -> None:
        self._D = ClientVector.from_state(state, "D", self.num_clients)
        self.eta = state["eta"]

    @property
    def D(self) -> np.ndarray:
        """The state ``D`` ``[K]`` float64 (a new read-only array; O(K), on demand)."""
        return read_only(self._D.dense())

    @property
    def p(self) -> np.ndarray:
        r"""The full decision :math:`p^{(t+1)} = \mathrm{softmax}(-\eta D)` ``[K]`` (O(K), on
        demand, read-only; uniform before the first round)."""
        return read_only(ops.softmax(self._D.dense(), scale=-self.eta))

    def round_constants(self, m: int) -> Tuple[float, float, float]:
        """``(C, C1, C2)`` of a round with m participants: the sampling probability (nominal, or
        m/K) and the response range (given, or ``(0, C)``)."""
        c = self.sample_prob if self.sample_prob is not None else m / self.num_clients
        c1, c2 = self.response_range if self.response_range is not None else (0.0, c)
        return c, c1, c2

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        assert losses is not None  # needs_losses: propose() refuses a round without
        _check_losses(losses)
        m, K = ids.shape[0], self.num_clients
        c, c1, c2 = self.round_constants(m)
        r = cdf_responses(losses, self.cdf, c1, c2, normal_cdf=self.normal_cdf)
        t = self.round + 1
        eta = self.step_scale * math.sqrt(math.log(K)) / (dr_lipschitz(c1, c2, c)
                                                          * math.sqrt(t + 1))
        prior_mass = c * K if (self.initial_p == "reference_code" and t == 1) else 1.0
        # The lazy step runs on a gathered copy of D_S so that nothing changes before commit.
        d_s = self._D.gather(ids)
        q = ops.dr_lazy_step(d_s, np.arange(m), r, sample_prob=c, eta=eta,
                             variant=self.variant, prior_mass=prior_mass)

        def commit() -> None:
            self._D.scatter(ids, d_s)
            self.eta = eta

        return q, commit


def ons_constants(num_clients: int, c1: float, c2: float) -> Tuple[float, float]:
    r"""The regulariser and curvature constants of Theorem 3.1:
    :math:`\alpha = 4 K L_\infty`, :math:`\beta = 1/(4 L_\infty)`,
    :math:`L_\infty = C_2/(1 + C_1)` (4 and K/4 for the range ``(0, 1/K)``). :class:`AAggFFS`
    multiplies α by its ``alpha_scale``."""
    lipschitz = c2 / (1.0 + c1)
    return 4.0 * num_clients * lipschitz, 1.0 / (4.0 * lipschitz)


class AAggFFS(Aggregator):
    r"""AAggFF-S (cross-silo): Online Newton Step over the simplex on the decision loss
    :math:`\ell(p) = -\log(1 + \langle p, r\rangle)`.

    Every round all K clients report their losses; with responses ``r`` ``[K]`` and the current
    decision :math:`p^{(t)}` (Alg. 3.1, eq. 3.7):

    .. math::
       g^{(t)} = -\frac{r^{(t)}}{1 + \langle p^{(t)}, r^{(t)}\rangle},\qquad
       p^{(t+1)} = \operatorname*{argmin}_{p\in\Delta}\ \sum_{\tau\le t}\langle p, g^{(\tau)}
       \rangle + \frac\alpha2\lVert p\rVert^2 + \frac\beta2\sum_{\tau\le t}
       \langle g^{(\tau)}, p - p^{(\tau)}\rangle^2

    a QP :math:`\tfrac12 p^\top H_t p - b_t^\top p` with :math:`H_t = \alpha I + \beta\sum
    g g^\top`, solved exactly by :class:`fastfair.ops.OnlineNewtonStep` (maintained inverse,
    warm-started active set, certified). ``weights`` returns :math:`p^{(t+1)}` at ``client_ids``:
    the new decision mixes the same round's updates.

    Parameters
    ----------
    num_clients
        K.
    cdf
        Response transform, as :class:`AAggFFD` (default ``"weibull"``).
    response_range
        ``(C1, C2)``, ``0 <= C1 < C2``; default ``(0, 1/K)``, the authors' code (the thesis' text
        reads C2 = 3; docs/algorithms.md §2.3). Sets :math:`\alpha = 4sKL_\infty` (s below),
        :math:`\beta = 1/(4L_\infty)`, :math:`L_\infty = C_2/(1+C_1)`.
    alpha_scale
        s, the multiple of Theorem 3.1's regulariser :math:`4KL_\infty` that α is. Default 64
        (fastfair's choice): with s = 1 (the thesis' and the authors' constant) the decision
        follows the cumulative responses onto a vertex within a few hundred rounds and loses
        mean accuracy to FedAvg; its drift from uniform grows like T/s
        (docs/algorithms.md §2.4.4).
    variant
        ``"paper"`` (default, eq. 3.7) or ``"reference_code"``: the authors' objective
        :math:`\langle\sum g, p\rangle + \frac\alpha2\lVert p\rVert^2 + \frac\beta2
        p^\top(\alpha I + \sum g g^\top)p` (docs/algorithms.md §2.4.2).
    initial_p
        ``"uniform"`` (default): :math:`p^{(1)} = 1/K`; ``"reference_code"``: the round-1
        gradient uses the authors' :math:`p^{(1)} = C\mathbf 1 = \mathbf 1` in its denominator.
    normal_cdf
        ``"paper"`` or ``"reference_code"`` (only with ``cdf="normal"``), as :class:`AAggFFD`.

    State: the ONS arrays (``H`` and its inverse ``[K, K]``, ``b``, ``p`` and the cumulative
    gradient ``[K]``, float64): O(K^2) memory and per round, plus the projection (usually 0-2
    active-set changes). ``weights(client_ids, losses)`` needs ``client_ids`` to hold all K
    clients (in any order); :attr:`last_certificate` is the projection's KKT certificate.
    """

    name = "aaggff-s"
    #: Every round must include all K clients (Alg. 3.1 is full participation).
    full_participation = True
    # A state_dict written before alpha_scale existed ran with Theorem 3.1's alpha.
    options_before = {"alpha_scale": 1.0}

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Negative losses: AAggFF divides the losses by their mean."""
        return "must be non-negative (AAggFF divides the losses by their mean)" if loss < 0 \
            else None

    def __init__(self, num_clients: int, cdf: str = "weibull", *, response_range: Any = None,
                 alpha_scale: float = 64.0, variant: str = "paper", initial_p: str = "uniform",
                 normal_cdf: str = "paper") -> None:
        super().__init__(num_clients)
        self.cdf = check_choice(cdf, "cdf", CDFS)
        self.response_range = _check_range(response_range)
        self.alpha_scale = check_scalar(alpha_scale, "alpha_scale", lo=0.0, lo_open=True)
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.initial_p = check_choice(initial_p, "initial_p", ("uniform", "reference_code"))
        self.normal_cdf = _check_normal(normal_cdf, self.cdf)
        self.c1, self.c2 = (self.response_range if self.response_range is not None
                            else (0.0, 1.0 / self.num_clients))
        alpha, self.beta = ons_constants(self.num_clients, self.c1, self.c2)
        self.alpha = self.alpha_scale * alpha
        self._ons = ops.OnlineNewtonStep(self.num_clients, self.alpha, self.beta,
                                         "paper" if self.variant == "paper" else "reference_code")

    def _config(self) -> Dict[str, Any]:
        return {"cdf": self.cdf, "response_range": self.response_range,
                "alpha_scale": self.alpha_scale, "variant": self.variant,
                "initial_p": self.initial_p, "normal_cdf": self.normal_cdf}

    _ONS_ARRAYS = ("H", "Hinv", "pending_u", "pending_c", "b", "p", "cumulative_gradient")

    def _state(self) -> Dict[str, Any]:
        sd = self._ons.state_dict()
        return {f"ons_{name}": sd[name] for name in self._ONS_ARRAYS}

    def _state_specs(self) -> Dict[str, StateSpec]:
        K = self.num_clients
        return {"ons_H": StateSpec((K, K)), "ons_Hinv": StateSpec((K, K)),
                "ons_pending_u": StateSpec((K,)), "ons_pending_c": StateSpec((1,), lo=0.0),
                "ons_b": StateSpec((K,)), "ons_p": StateSpec((K,), lo=0.0),
                "ons_cumulative_gradient": StateSpec((K,))}

    def _check_state(self, state: Dict[str, Any]) -> None:
        """H must be symmetric positive definite (every round's projection solves with it; it
        is alpha I plus Gram terms; O(K^3) through its Cholesky factor) and p a point of the
        simplex."""
        H = state["ons_H"]
        if not np.array_equal(H, H.T):
            raise ValueError("state['ons_H'] must be symmetric")
        try:
            np.linalg.cholesky(H)
        except np.linalg.LinAlgError:
            raise ValueError("state['ons_H'] must be positive definite (H = alpha I + beta "
                             "sum g g'); its Cholesky factorisation fails") from None
        total = float(state["ons_p"].sum())
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"state['ons_p'] must lie on the simplex (sum 1); its sum is {total}")

    def _set_state(self, state: Dict[str, Any]) -> None:
        sd = self._ons.state_dict()
        sd.update({name: state[f"ons_{name}"] for name in self._ONS_ARRAYS}, round=self.round)
        self._ons.load_state_dict(sd)

    @property
    def p(self) -> np.ndarray:
        """The current decision :math:`p^{(t+1)}` ``[K]`` (a read-only copy; ``1/K`` before any
        round)."""
        return self._ons.p

    @property
    def last_certificate(self) -> Optional[ops.QpCertificate]:
        """KKT certificate of the last round's projection (None before the first round)."""
        return self._ons.last_info

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        K = self.num_clients
        if ids.shape[0] != K:
            raise ValueError(f"client_ids must hold all {K} clients every round (AAggFF-S is "
                             f"cross-silo, Alg. 3.1); got {ids.shape[0]}. Use AAggFFD for partial "
                             "participation")
        assert losses is not None  # needs_losses: propose() refuses a round without
        _check_losses(losses)
        r = np.empty(K)
        r[ids] = cdf_responses(losses, self.cdf, self.c1, self.c2, normal_cdf=self.normal_cdf)
        # The authors' code starts from p = C 1 = 1 (cross-silo) in the first gradient only.
        p = np.ones(K) if self.initial_p == "reference_code" and self.round == 0 else self._ons.p
        g = -r / (1.0 + float(p @ r))
        # The step runs on a copy so that nothing changes before commit (O(K^2), as the step).
        ons = copy.deepcopy(self._ons)
        coef = np.asarray(ons.step(g))[ids]

        def commit() -> None:
            self._ons = ons

        return coef, commit
