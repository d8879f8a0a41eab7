r"""q-FedAvg (q-FFL): per-client losses raised to the power q re-weight the updates, and the step
is scaled by a per-round curvature estimate.

With pseudo-gradients :math:`X_k = w^t - w_k` and Lipschitz estimate L (1 / client lr):

.. math::
   \Delta w_k = L X_k,\quad h_k = q F_k^{q-1}\lVert \Delta w_k\rVert^2 + L F_k^q,\quad
   w^{t+1} = w^t - \frac{\sum_k F_k^q \Delta w_k}{\sum_k h_k}
   \;\Rightarrow\; c_k = \frac{L F_k^q}{\sum_{j \in S} h_j}

The coefficients do not sum to 1: their sum is the step scale. Each :math:`F_k` is client k's own
loss of :math:`w^t` (never one global loss). ``form="eg"`` gives instead the normalised
exponentiated-gradient form :math:`c_k \propto n_k F_k^q` (one EG step from the sample-count
weights with response :math:`q \log F_k`).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import (
    check_choice,
    check_scalar,
    check_scaled_losses,
    check_vector,
    scaled_loss_problem,
)
from fastfair.aggregators._updates import squared_norms
from fastfair.aggregators._weights import eg_weights
from fastfair.aggregators.base import Aggregator, Commit


def qfedavg_coefficients(losses: np.ndarray, sq_norms: np.ndarray, q: float,
                         lipschitz: float) -> np.ndarray:
    r"""q-FedAvg coefficients ``[m]`` on the pseudo-gradients :math:`X_k`:
    :math:`c_k = L F_k^q / \sum_j (q F_j^{q-1} L^2 \lVert X_j\rVert^2 + L F_j^q)`.

    ``losses`` ``[m]`` >= 0 (> 0 where 0 < q < 1 and the update is non-zero, as
    :math:`F^{q-1}` is infinite at 0), ``sq_norms`` ``[m]`` the :math:`\lVert X_k\rVert^2`.
    """
    if (losses < 0).any():
        pos = int(np.flatnonzero(losses < 0)[0])
        raise ValueError(f"losses must be non-negative for q-FedAvg (F^q); got {losses[pos]} "
                         f"at position {pos}")
    with np.errstate(over="ignore"):
        fq = losses ** q
        check_scaled_losses(lipschitz * fq, "L * losses ** q")
    curv = np.zeros_like(losses)
    moving = sq_norms > 0
    if q != 0.0:
        if q < 1.0 and ((losses == 0) & moving).any():
            pos = int(np.flatnonzero((losses == 0) & moving)[0])
            raise ValueError(f"losses must be positive when 0 < q < 1 (F^(q-1) is infinite at "
                             f"0); got 0 at position {pos}")
        curv[moving] = q * losses[moving] ** (q - 1.0) * (lipschitz ** 2) * sq_norms[moving]
    total = float(np.sum(curv + lipschitz * fq))
    if total == 0.0:
        raise ValueError("losses are all zero: the q-FedAvg step (sum of h_k) is zero and the "
                         "coefficients are undefined")
    return lipschitz * fq / total


class QFedAvg(Aggregator):
    r"""q-FedAvg over the sampled clients.

    Parameters
    ----------
    num_clients
        K.
    q
        Fairness exponent q >= 0 (q = 0 is FedAvg-like with step scaling). Default 0.1, the
        PropFair authors' code and the AAggFF authors' tuned value on 4 of 6 data sets.
    lipschitz
        L > 0, the inverse of the clients' learning rate (``form="qffl"``); pass ``1 / lr``
        (the default 1.0 is a placeholder: the rule does not know lr). The AAggFF authors'
        code uses :math:`L = \eta_s/\eta` (server over client learning rate) and steps by
        :math:`\eta_s`: ``QFedAvg(lipschitz=server_lr / lr)`` with the server optimiser
        ``SGD(lr=server_lr)`` (or ``aggregate(..., lr=server_lr)``) reproduces that update
        (docs/algorithms.md §2.6.2); with :math:`\eta_s = 1` it is the q-FFL paper's.
    num_samples
        Static counts ``[K]`` for ``form="eg"`` (uniform when absent).
    form
        ``"qffl"`` (default, the q-FedAvg server step) or ``"eg"`` (normalised :math:`n_k F_k^q`).

    ``weights(client_ids, losses, updates=None, sq_norms=None)``: ``"qffl"`` needs the updates
    ``[m, *S]`` (or m lists of arrays) or their squared norms ``sq_norms`` ``[m]``. Stateless,
    O(m) per round plus one pass over the updates for their norms.
    """

    name = "qfedavg"

    def __init__(self, num_clients: int, q: float = 0.1, lipschitz: float = 1.0, *,
                 num_samples: Any = None, form: str = "qffl") -> None:
        super().__init__(num_clients, num_samples)
        self.q = check_scalar(q, "q", lo=0.0)
        self.lipschitz = check_scalar(lipschitz, "lipschitz", lo=0.0, lo_open=True)
        self.form = check_choice(form, "form", ("qffl", "eg"))

    def _config(self) -> Dict[str, Any]:
        return {"q": self.q, "lipschitz": self.lipschitz, "form": self.form}

    @property
    def round_inputs(self) -> Tuple[str, ...]:
        return ("sq_norms",) if self.form == "qffl" else ()

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Negative losses (F^q), and in the q-FFL form 0 where 0 < q < 1 (F^(q-1) is infinite
        at 0; such a client's coefficient L F^q would be 0 anyway) and losses whose L F^q is
        beyond 2**1000 (the sum of the h_j overflows)."""
        if loss < 0:
            return "must be non-negative (q-FedAvg takes F^q)"
        if loss == 0 and self.form == "qffl" and 0.0 < self.q < 1.0:
            return "must be positive when 0 < q < 1 (F^(q-1) is infinite at 0)"
        if self.form == "qffl":
            try:
                fq = loss ** self.q
            except OverflowError:
                fq = math.inf
            return scaled_loss_problem(self.lipschitz * fq, "L * loss ** q")
        return None

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        updates = round_inputs.pop("updates", None)
        norms = round_inputs.pop("sq_norms", None)
        self._no_round_inputs(round_inputs)
        assert losses is not None  # needs_losses: propose() refuses a round without
        m = ids.shape[0]
        if self.form == "eg":
            if (losses < 0).any():
                pos = int(np.flatnonzero(losses < 0)[0])
                raise ValueError(f"losses must be non-negative for q-FedAvg (F^q); got "
                                 f"{losses[pos]} at position {pos}")
            counts = self._counts(ids, num_samples, required=False)
            # F^q in log space: q log F (-inf at F = 0, weight 0; F^0 = 1 when q = 0).
            with np.errstate(divide="ignore", over="ignore"):
                response = self.q * np.log(losses) if self.q != 0.0 else np.zeros(m)
            weights = eg_weights(response, counts, "q * log(losses)")
            if weights is None:
                raise ValueError("losses (times num_samples) are all zero: the normalised "
                                 "q-FedAvg weights are undefined")
            return weights, lambda: None
        if (updates is None) == (norms is None):
            raise ValueError("pass exactly one of updates ([m, *S] or m lists of arrays) and "
                             "sq_norms ([m]): q-FedAvg scales its step by the update norms")
        if norms is not None:
            sq = check_vector(norms, m, "sq_norms", nonnegative=True)
        else:
            sq = squared_norms(updates, m)
        return qfedavg_coefficients(losses, sq, self.q, self.lipschitz), lambda: None
