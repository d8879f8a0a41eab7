r"""PropFair: proportional fairness, :math:`\min_\theta -\sum_k \frac{n_k}{n}\log(M - F_k(\theta))`.

Clients train on the transformed loss (the default, as in the paper's algorithm) and the server
averages with FedAvg weights:

.. math::
   \tilde\ell = -\log\!\left(1 - \frac{\ell}{M}\right) \quad\text{if } \ell \le \ell_0 = M -
   \epsilon, \qquad \tilde\ell = -\log\frac{\epsilon}{M} + \frac{\ell - \ell_0}{\epsilon}
   \quad\text{otherwise}

(the tangent continuation keeps the loss finite past the pole ℓ = M with the log's largest slope
1/ε; ``extension="reference_code"`` continues by ℓ/M instead, slope 1/M, as the authors' code by
default). With ``weighting="eg"`` clients train on their plain loss and the server applies the
gradient of the objective through the weights instead: :math:`c_k \propto n_k / (M - F_k)` (one
EG step with response :math:`-\log(M - F_k)`), which needs :math:`F_k < M`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import check_choice, check_scalar
from fastfair.aggregators._weights import eg_weights
from fastfair.aggregators.base import Aggregator, Commit
from fastfair.aggregators.fedavg import fedavg_weights
from fastfair.aggregators.objectives import PROPFAIR_EXTENSIONS, PropFairObjective, propfair_loss


class PropFair(Aggregator):
    r"""PropFair with its client loss transform.

    Parameters
    ----------
    num_clients
        K.
    M
        The utility bound M > 0. Default 2, the PropFair authors' code (``--base``); the AAggFF
        authors tuned it in {2, 3, 5} and chose 2 or 3, FedMABA ran 5 (docs/algorithms.md
        §2.6.4).
    epsilon
        Distance to the pole where the loss switches to its continuation (default 0.2, the
        authors' code; > 0 with ``"huber"``).
    extension
        ``"huber"`` (default): the tangent line at :math:`M - \epsilon`, slope 1/ε (the
        authors' ``--huber``); ``"reference_code"``: ℓ/M, slope 1/M, which gives the worst
        batches the smallest gradients.
    num_samples
        Static counts ``[K]``; per-round counts may be passed to ``weights``.
    weighting
        ``"fedavg"`` (default; clients use :meth:`client_loss`) or ``"eg"``.

    ``weights(client_ids, losses=None, num_samples=None)``: losses are required by ``"eg"``
    only. Stateless, O(m) per round.
    """

    name = "propfair"
    # A state_dict written before extension existed continued the loss by l/M near the pole.
    options_before = {"extension": "reference_code"}

    def __init__(self, num_clients: int, M: float = 2.0, epsilon: float = 0.2, *,
                 extension: str = "huber", num_samples: Any = None,
                 weighting: str = "fedavg") -> None:
        super().__init__(num_clients, num_samples)
        self.M = check_scalar(M, "M", lo=0.0, lo_open=True)
        self.extension = check_choice(extension, "extension", PROPFAIR_EXTENSIONS)
        self.epsilon = check_scalar(epsilon, "epsilon", lo=0.0,
                                    lo_open=self.extension == "huber")
        self.weighting = check_choice(weighting, "weighting", ("fedavg", "eg"))
        self.needs_losses = self.weighting == "eg"

    def _config(self) -> Dict[str, Any]:
        return {"M": self.M, "epsilon": self.epsilon, "extension": self.extension,
                "weighting": self.weighting}

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Losses at or above M under ``weighting="eg"`` (its weights are ``n_k / (M - F_k)``)."""
        if self.weighting == "eg" and loss >= self.M:
            return f"must be below M = {self.M} for weighting='eg'"
        return None

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        self._no_round_inputs(round_inputs)
        if self.weighting == "fedavg":
            return fedavg_weights(self._counts(ids, num_samples, required=True)), lambda: None
        assert losses is not None  # needs_losses (weighting="eg"): propose() refuses None
        if (losses >= self.M).any():
            pos = int(np.flatnonzero(losses >= self.M)[0])
            raise ValueError(f"losses must be below M = {self.M} for weighting='eg'; got "
                             f"{losses[pos]} at position {pos}")
        counts = self._counts(ids, num_samples, required=False)
        weights = eg_weights(-np.log(self.M - losses), counts, "-log(M - losses)")
        if weights is None:
            raise ValueError("num_samples are all zero over the round: PropFair weights are "
                             "undefined")
        return weights, lambda: None

    def client_objective(self) -> Optional[PropFairObjective]:
        r"""The client loss transform with ``weighting="fedavg"``; None with ``"eg"``, whose
        server weights :math:`n_k/(M - \ell_k)` already carry the transform's gradient scale."""
        return (PropFairObjective(self.M, self.epsilon, self.extension)
                if self.weighting == "fedavg" else None)

    def client_loss(self, loss: Any) -> Any:
        r"""The transformed training loss of a batch: :math:`-\log(1 - \ell/M)`, continued
        past :math:`M - \epsilon` by ``extension``, elementwise. ``loss`` is a float, a
        NumPy array or a torch tensor of any shape, e.g. ``[m]`` mean losses of m clients
        (autograd flows through it); the result has its type and shape."""
        return propfair_loss(loss, self.M, self.epsilon, self.extension)
