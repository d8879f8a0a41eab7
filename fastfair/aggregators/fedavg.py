r"""FedAvg (sample-count weights over the sampled set), FairAvg (uniform weights) and FedProx
(FedAvg on the server, a proximal term on the clients).

.. math::
   \text{FedAvg: } c_k = \frac{n_k}{\sum_{j \in S} n_j}, \qquad
   \text{FairAvg: } c_k = \frac{1}{m}, \qquad
   \text{FedProx client objective: } F_k(w) + \frac{\mu}{2}\lVert w - w^t \rVert^2 .

Both weightings are O(m) per round and keep no per-client state beyond FedAvg's static counts.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import check_choice, check_scalar
from fastfair.aggregators._weights import normalize
from fastfair.aggregators.base import Aggregator, Commit
from fastfair.aggregators.objectives import Params, ProximalObjective, param_pairs, proximal_term

_NOTHING: Commit = lambda: None  # noqa: E731  (stateless rules commit nothing)


def fedavg_weights(num_samples: np.ndarray, zero_total: str = "uniform") -> np.ndarray:
    r"""FedAvg coefficients ``c_k = n_k / sum_{j in S} n_j`` over the m sampled clients.

    ``num_samples`` is ``[m]``, finite and non-negative, of any magnitude (the sum is scaled
    first, so counts near the float64 maximum do not overflow it). When every count is zero the
    weights are undefined: ``zero_total="uniform"`` falls back to FairAvg's ``1/m``, ``"raise"``
    raises ``ValueError``.
    """
    weights = normalize(num_samples)
    if weights is None:
        if zero_total == "raise":
            raise ValueError("num_samples sum to zero over the round: FedAvg weights are "
                             "undefined (use zero_total='uniform' to fall back to 1/m)")
        return np.full(num_samples.shape[0], 1.0 / num_samples.shape[0])
    return weights


class FedAvg(Aggregator):
    r"""FedAvg: the sampled clients weighted by their sample counts, renormalised over the round.

    .. math:: c_k = n_k \Big/ \sum_{j \in S_t} n_j \qquad (k \in S_t)

    Parameters
    ----------
    num_clients
        K, the client population.
    num_samples
        Static counts ``[K]`` (float64, 8 bytes per client), or None to pass them every round.
    zero_total
        ``"uniform"`` (default): a round whose counts sum to 0 gets ``1/m``; ``"raise"``: error.

    ``weights(client_ids, losses=None, num_samples=None)``: losses are optional (validated when
    given, otherwise unused). O(m) per round.
    """

    name = "fedavg"
    needs_losses = False

    def __init__(self, num_clients: int, num_samples: Any = None, *,
                 zero_total: str = "uniform") -> None:
        super().__init__(num_clients, num_samples)
        self.zero_total = check_choice(zero_total, "zero_total", ("uniform", "raise"))

    def _config(self) -> Dict[str, Any]:
        return {"zero_total": self.zero_total}

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        counts = self._counts(ids, num_samples, required=True)
        return fedavg_weights(counts, self.zero_total), _NOTHING


class FairAvg(Aggregator):
    r"""FairAvg: every participating client gets the same weight, :math:`c_k = 1/m`.

    ``weights(client_ids, losses=None)``; no state besides the round counter. O(m) per round.
    """

    name = "fairavg"
    needs_losses = False

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        return np.full(ids.shape[0], 1.0 / ids.shape[0]), _NOTHING


class FedProx(FedAvg):
    r"""FedProx: FedAvg on the server, and a proximal term on every client's local objective.

    .. math:: h_k(w) = F_k(w) + \frac{\mu}{2}\lVert w - w^t\rVert^2, \qquad
              \nabla h_k(w) = \nabla F_k(w) + \mu (w - w^t)

    where ``w^t`` is the global model the client received. Use :meth:`proximal_term` in an
    autograd loop (add it to the loss) or :meth:`proximal_gradient` in a hand-written one.
    ``mu`` >= 0; ``mu = 0`` is FedAvg; default 0.1 (FedMABA's FedProx baseline, in the FedProx
    paper's grid {0.001, 0.01, 0.1, 1}). :meth:`client_objective` is the proximal objective.
    """

    name = "fedprox"

    def __init__(self, num_clients: int, num_samples: Any = None, *, mu: float = 0.1,
                 zero_total: str = "uniform") -> None:
        super().__init__(num_clients, num_samples, zero_total=zero_total)
        self.mu = check_scalar(mu, "mu", lo=0.0)

    def _config(self) -> Dict[str, Any]:
        return {"zero_total": self.zero_total, "mu": self.mu}

    def client_objective(self) -> ProximalObjective:
        return ProximalObjective(self.mu)

    def proximal_term(self, params: Params, global_params: Params) -> Any:
        r"""``(mu/2) * sum_l ||params_l - global_l||^2`` for one array or a list of arrays (torch
        tensors keep their autograd graph; ``global_params`` should be detached)."""
        return proximal_term(params, global_params, self.mu)

    def proximal_gradient(self, grads: Params, params: Params, global_params: Params) -> Params:
        r"""``grad_l + mu * (params_l - global_l)`` for each array: the gradient of the proximal
        objective given the gradient of the plain loss. Returns new arrays."""
        if isinstance(grads, (list, tuple)):
            pairs = param_pairs(params, global_params)
            return [g + self.mu * (p - w) for g, (p, w) in zip(grads, pairs)]
        return grads + self.mu * (params - global_params)

