r"""Ditto (Li, Hu, Beirami and Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization", ICML 2021): every client k keeps a personal model :math:`v_k` beside the global
one :math:`w`, and solves

.. math::  \min_{v_k}\; h_k(v_k; w^*) = F_k(v_k) + \frac{\lambda}{2}\,\|v_k - w^*\|^2,

where :math:`w^*` is what the global objective (FedAvg's here) reaches. Algorithm 1 of the paper,
one round t: the server sends :math:`w^t` to the sampled clients; each client runs its local
training of :math:`w` from :math:`w^t` (the global update, sent back) and, on the same
minibatches, the personal update

.. math::  v_k \leftarrow v_k - \eta\,\big(\nabla F_k(v_k) + \lambda\,(v_k - w^t)\big);

the server averages the global updates (FedAvg weights). Every :math:`v_k` starts at the initial
global model :math:`w^0`; a client evaluates with its own :math:`v_k` (the personalised accuracy
fairness papers report). :math:`\lambda = 0` is local training alone, :math:`\lambda \to \infty`
the global model.

This module holds the options and the personal step; the simulator runs the method as
:class:`fastfair.sim.rounds.ditto.DittoSimulation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

_T = TypeVar("_T")


@dataclass
class DittoOptions:
    """Ditto's hyperparameters (``--rule-option KEY=VALUE``).

    ``lam`` is :math:`\\lambda`, the pull of a personal model toward the global one; the paper
    picks it per data set from {0.01, 0.1, 1, 2} (fastfair's default 0.1, its most frequent
    choice)."""

    lam: float = 0.1

    def __post_init__(self) -> None:
        if not (self.lam >= 0 and self.lam != float("inf")):
            raise ValueError(f"lam must be finite and >= 0; got {self.lam}")


def personal_step(v: _T, grad: _T, w: _T, lam: float, lr: float) -> _T:
    r"""One step of Ditto's personal update, :math:`v - \eta\,(g + \lambda\,(v - w))`.

    Parameters
    ----------
    v
        ``[..., P]`` the personal models (NumPy arrays or torch tensors).
    grad
        ``[..., P]`` :math:`\nabla F_k(v_k)` on the step's minibatch.
    w
        ``[P]`` or ``[..., P]`` the global model the round started from, :math:`w^t`.
    lam, lr
        :math:`\lambda` and the step size :math:`\eta`.

    Returns
    -------
    The new personal models, a new array of ``v``'s shape.
    """
    return v - lr * (grad + lam * (v - w))  # type: ignore[operator]  # arrays or tensors
