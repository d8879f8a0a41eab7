r"""AFL (agnostic federated learning): projected gradient ascent on the client weights λ of the
minimax objective

.. math:: \min_\theta \max_{\lambda \in \Delta_{K-1}} \textstyle\sum_i \lambda_i F_i(\theta).

The gradient in λ is the loss vector, so one round over the sampled set S is (docs/algorithms.md
§2.6.5)

.. math:: \lambda_S \leftarrow \Pi_\Delta(\lambda_S + \gamma F_S), \qquad
          \lambda_i \text{ unchanged for } i \notin S,

with the Euclidean projection onto the simplex :func:`fastfair.ops.project_simplex` (O(m)
expected). Under full participation this is :math:`\lambda \leftarrow \Pi_\Delta(\lambda +
\gamma F)`; the AAggFF authors' code also runs it cross-device, from :math:`\lambda^{(0)} =
C\mathbf 1` (``initial_lambda="reference_code"``) where fastfair starts at :math:`\mathbf 1/K`.
The projection ignores a common shift of its input, so the start matters only once a fresh
client (still at :math:`\lambda^{(0)}`) is sampled beside clients that have moved. The
coefficients are the new :math:`\lambda_S`, applied to the same round's updates like AAggFF's
decisions; ``coefficients="previous"`` applies the λ the clients' losses were measured under
(Mohri et al.'s simultaneous descent-ascent), renormalised over S (``1/m`` when they are all 0).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair import ops
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


class AFL(Aggregator):
    r"""AFL: client weights by projected gradient ascent on the losses.

    .. math:: \lambda_S \leftarrow \Pi_\Delta(\lambda_S + \gamma F_S), \qquad c = \lambda_S

    Parameters
    ----------
    num_clients
        K.
    step_size
        γ >= 0, the learning rate of the mixing coefficients. Default 0.1, the PropFair authors'
        code; the thesis' grid is {0.01, 0.1, 1}, and the AAggFF authors tuned 0.01 on every
        cross-silo data set.
    coefficients
        ``"updated"`` (default): the new :math:`\lambda_S`; ``"previous"``: the λ before this
        round's step, :math:`\lambda_S / \sum_S \lambda` (``1/m`` if those are all 0).
    initial_lambda
        ``"uniform"`` (default): :math:`\lambda^{(0)} = \mathbf 1/K`; ``"reference_code"``: the
        AAggFF authors' :math:`\lambda^{(0)} = C\mathbf 1`, C the sampling fraction, set when
        the first round runs (docs/algorithms.md §2.6.5). Under partial participation the two
        differ from the first round in which a fresh client meets clients that have moved: with
        K = 20, m = 5 (C = 0.25) and a fresh client sampled beside four at 0.2 with equal
        losses, it gets 0.08 (uniform) or 0.24 (reference code) and the others 0.23 or 0.19.
    sample_prob
        C for ``initial_lambda="reference_code"``: None (default) for :math:`m/K` of the first
        round, or the nominal fraction in (0, 1] of the authors' runs (their m is
        :math:`\max(\lfloor CK\rfloor, 1)`).

    State: ``lam`` over the K clients (non-negative), ``1/K`` for every client not yet sampled
    (C from the first round on with ``initial_lambda="reference_code"``), kept as a
    :class:`~fastfair.aggregators._client_vector.ClientVector` (16 bytes per client sampled so
    far, at most 8 bytes per client); :attr:`lam` materialises it ``[K]`` in O(K). The sampled
    entries of λ always sum to 1 after a round; under partial participation λ over all K need
    not. ``weights(client_ids, losses)`` returns ``c`` ``[m]``. O(m) per round.
    """

    name = "afl"

    def __init__(self, num_clients: int, step_size: float = 0.1, *,
                 coefficients: str = "updated", initial_lambda: str = "uniform",
                 sample_prob: Optional[float] = None) -> None:
        super().__init__(num_clients)
        self.step_size = check_scalar(step_size, "step_size", lo=0.0)
        self.coefficients = check_choice(coefficients, "coefficients", ("updated", "previous"))
        self.initial_lambda = check_choice(initial_lambda, "initial_lambda",
                                           ("uniform", "reference_code"))
        if sample_prob is not None and self.initial_lambda != "reference_code":
            raise ValueError("sample_prob only sets the start of initial_lambda="
                             "'reference_code'; drop it or pass that option")
        self.sample_prob = (None if sample_prob is None else
                            check_scalar(sample_prob, "sample_prob", lo=0.0, hi=1.0, lo_open=True))
        self._lam = ClientVector(self.num_clients, 1.0 / self.num_clients)

    def _config(self) -> Dict[str, Any]:
        return {"step_size": self.step_size, "coefficients": self.coefficients,
                "initial_lambda": self.initial_lambda, "sample_prob": self.sample_prob}

    def _state(self) -> Dict[str, Any]:
        return self._lam.state("lam")

    def _state_specs(self) -> Dict[str, StateSpec]:
        return ClientVector.specs("lam", lo=0.0)

    def _check_state(self, state: Dict[str, Any]) -> None:
        check_state(state, "lam", self.num_clients)

    def _upgrade_state(self, given: Dict[str, Any]) -> Dict[str, Any]:
        return upgrade(given, "lam", self.num_clients, 1.0 / self.num_clients, lo=0.0)

    def _set_state(self, state: Dict[str, Any]) -> None:
        self._lam = ClientVector.from_state(state, "lam", self.num_clients)

    @property
    def lam(self) -> np.ndarray:
        """The state λ ``[K]`` float64 (a new read-only array; O(K), on demand)."""
        return read_only(self._lam.dense())

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Losses whose ``step_size * loss`` is beyond ``+-2**1000`` (the projection
        overflows)."""
        return scaled_loss_problem(self.step_size * loss, "step_size * loss")

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        assert losses is not None  # needs_losses: propose() refuses a round without
        with np.errstate(over="ignore"):
            check_scaled_losses(self.step_size * losses, "step_size * losses")
        m = ids.shape[0]
        start = None
        if self.initial_lambda == "reference_code" and self.round == 0:
            start = self.sample_prob if self.sample_prob is not None else m / self.num_clients
            old = np.full(m, start)
        else:
            old = self._lam.gather(ids)
        new = ops.project_simplex(old + self.step_size * losses)
        if self.coefficients == "updated":
            coef = new
        else:
            total = float(old.sum())
            # Under partial participation every sampled λ may have been projected to 0.
            coef = old / total if total > 0.0 else np.full(m, 1.0 / m)

        def commit() -> None:
            self._lam.scatter(ids, new, fill=start)

        return coef, commit
