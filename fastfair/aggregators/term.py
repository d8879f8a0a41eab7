r"""TERM (tilted empirical risk minimisation) at the client level: one exponentiated-gradient step
from the sample-count weights with the losses as response and tilt λ as inverse step.

.. math:: c_k = \frac{n_k\, e^{\lambda F_k}}{\sum_{j \in S} n_j\, e^{\lambda F_j}}

computed in log space (shifted by the maximum), so large λF never overflows.
``variant="reference_code"`` reproduces the authors' code: :math:`c_k \propto
e^{\lambda(F_k - \max F)}` without :math:`n_k` (its running evidence average cancels when the
weights are renormalised over S).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import (
    check_choice,
    check_scalar,
    check_scaled_losses,
    scaled_loss_problem,
)
from fastfair.aggregators._weights import eg_weights
from fastfair.aggregators.base import Aggregator, Commit


def tilted_weights(losses: np.ndarray, tilt: float, counts: Any = None) -> np.ndarray:
    r"""``softmax(log n + tilt * F)`` over the m clients (``counts`` None: uniform n), in log
    space (:func:`~fastfair.aggregators._weights.eg_weights`). Clients with :math:`n_k = 0` get
    weight 0; all-zero counts, or a ``tilt * losses`` that overflows, raise ``ValueError``."""
    with np.errstate(over="ignore"):  # an overflow is reported by eg_weights
        response = tilt * losses
    weights = eg_weights(response, counts, "tilt * losses")
    if weights is None:
        raise ValueError("num_samples are all zero over the round: TERM weights are undefined")
    return weights


class TERM(Aggregator):
    r"""TERM: tilted client weights :math:`c_k \propto n_k e^{\lambda F_k}`.

    Parameters
    ----------
    num_clients
        K.
    tilt
        λ (any finite value; λ > 0 favours high-loss clients, λ = 0 is FedAvg). Default 0.1:
        the TERM authors' fair-FL script, the AAggFF authors' tuned value on 5 of 6 data sets
        and FedMABA's run. With losses that differ by ~1 the weights then move by at most
        :math:`e^{0.1}`, close to FedAvg; λ = 1 moves them visibly (docs/defaults.md).
    num_samples
        Static counts ``[K]``; without them (and without per-round counts) n is uniform.
    variant
        ``"paper"`` (default) or ``"reference_code"`` (no :math:`n_k`).

    ``weights(client_ids, losses, num_samples=None)``. Stateless, O(m) per round.
    """

    name = "term"

    def __init__(self, num_clients: int, tilt: float = 0.1, *, num_samples: Any = None,
                 variant: str = "paper") -> None:
        super().__init__(num_clients, num_samples)
        self.tilt = check_scalar(tilt, "tilt")
        self.variant = check_choice(variant, "variant", ("paper", "reference_code"))

    def _config(self) -> Dict[str, Any]:
        return {"tilt": self.tilt, "variant": self.variant}

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Losses whose ``tilt * loss`` is beyond ``+-2**1000`` (the weights overflow)."""
        return scaled_loss_problem(self.tilt * loss, "tilt * loss")

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        assert losses is not None  # needs_losses: propose() refuses a round without
        with np.errstate(over="ignore"):
            check_scaled_losses(self.tilt * losses, "tilt * losses")
        counts = None
        if self.variant == "paper":
            counts = self._counts(ids, num_samples, required=False)
        return tilted_weights(losses, self.tilt, counts), lambda: None
