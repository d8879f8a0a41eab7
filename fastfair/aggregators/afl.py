r"""AFL (agnostic federated learning): projected gradient ascent on the client weights λ of the
minimax objective

.. math:: \min_\theta \max_{\lambda \in \Delta_{K-1}} \textstyle\sum_i \lambda_i F_i(\theta).

The gradient in λ is the loss vector, so one round over the sampled set S is (docs/algorithms.md §2.6.5)

.. math:: \lambda_S \leftarrow \Pi_\Delta(\lambda_S + \gamma F_S), \qquad
          \lambda_i \text{ unchanged for } i \notin S,

with the Euclidean projection onto the simplex :func:`fastfair.ops.project_simplex` (O(m)
expected). Under full participation (the only setting the thesis runs AFL in) this is
:math:`\lambda \leftarrow \Pi_\Delta(\lambda + \gamma F)`. The coefficients are the new
:math:`\lambda_S`, applied to the same round's updates like AAggFF's decisions; ``coefficients=
"previous"`` applies the λ the clients' losses were measured under (Mohri et al.'s simultaneous
descent-ascent), renormalised over S (``1/m`` when they are all 0).
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np

from fastfair import ops
from fastfair.aggregators._checks import StateSpec, check_choice, check_scalar
from fastfair.aggregators.base import Aggregator, Commit


class AFL(Aggregator):
    r"""AFL: client weights by projected gradient ascent on the losses.

    .. math:: \lambda_S \leftarrow \Pi_\Delta(\lambda_S + \gamma F_S), \qquad c = \lambda_S

    Parameters
    ----------
    num_clients
        K.
    step_size
        γ >= 0, the learning rate of the mixing coefficients (the thesis' grid: 0.01, 0.1, 1).
    coefficients
        ``"updated"`` (default): the new :math:`\lambda_S`; ``"previous"``: the λ before this
        round's step, :math:`\lambda_S / \sum_S \lambda` (``1/m`` if those are all 0).

    State: ``lam`` ``[K]`` float64 (8 bytes per client, non-negative), initialised to ``1/K``.
    The sampled entries of λ always sum to 1 after a round; under partial participation λ over
    all K need not. ``weights(client_ids, losses)`` returns ``c`` ``[m]``. O(m) per round.
    """

    name = "afl"

    def __init__(self, num_clients: int, step_size: float = 0.1, *,
                 coefficients: str = "updated") -> None:
        super().__init__(num_clients)
        self.step_size = check_scalar(step_size, "step_size", lo=0.0)
        self.coefficients = check_choice(coefficients, "coefficients", ("updated", "previous"))
        self.lam = np.full(self.num_clients, 1.0 / self.num_clients)

    def _config(self) -> Dict[str, Any]:
        return {"step_size": self.step_size, "coefficients": self.coefficients}

    def _state(self) -> Dict[str, Any]:
        return {"lam": self.lam}

    def _state_specs(self) -> Dict[str, StateSpec]:
        return {"lam": StateSpec((self.num_clients,), lo=0.0)}

    def _set_state(self, state: Dict[str, Any]) -> None:
        self.lam = state["lam"]

    def _round(self, ids, losses, num_samples, **round_inputs) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        old = self.lam[ids]
        new = ops.project_simplex(old + self.step_size * losses)
        if self.coefficients == "updated":
            coef = new
        else:
            total = float(old.sum())
            # Under partial participation every sampled λ may have been projected to 0.
            coef = old / total if total > 0.0 else np.full(ids.shape[0], 1.0 / ids.shape[0])

        def commit() -> None:
            self.lam[ids] = new

        return coef, commit
