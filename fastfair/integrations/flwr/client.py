"""The client side: what a ``ClientApp`` trains on, carried in the train config.

The strategy adds :func:`client_config` to every round's train config; inside the ``ClientApp``,
``ClientObjective.from_config(msg.content["config"])`` rebuilds the objective (the one protocol
of :mod:`fastfair.aggregators.objectives`, shared with the simulator):

.. code-block:: python

    objective = ClientObjective.from_config(msg.content["config"])
    state = objective.initial_state()     # Fed-CVaR-Avg's threshold t, else None
    ...   # train on objective(batch_loss, params, received_params, state)
    metrics = {"num-examples": n, RECEIVED_LOSS_KEY: loss_before,  # before training
               **objective.reply_metrics(state)}
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from fastfair.aggregators.base import Aggregator
from fastfair.aggregators.compose import round_objective
from fastfair.aggregators.objectives import THRESHOLD_KEY, ClientObjective

__all__ = ["RECEIVED_LOSS_KEY", "RULE_KEY", "THRESHOLD_KEY", "ClientObjective",
           "client_config"]

#: Config key carrying the rule's public name (``"fedprox"``), for the client's information.
RULE_KEY = "fastfair-rule"
#: Metric key of a client's loss of the model it *received*, measured on its training data before
#: local training: the loss the adaptive rules (AAggFF, FedMABA, q-FedAvg, TERM, AFL, ...) weigh
#: by. Not Flower's ``train_loss``, which its examples set to the mean loss during training.
RECEIVED_LOSS_KEY = "fastfair-received-loss"


def client_config(aggregator: Aggregator,
                  objective: Optional[ClientObjective] = None) -> Dict[str, Any]:
    """The config entries the clients of ``aggregator`` need this round: ``fastfair-rule`` (its
    name) and the ``to_config()`` of ``objective``, the objective chosen in place of the rule's
    own (:func:`fastfair.aggregators.compose.choose_objective`), or else of the rule's
    :meth:`~fastfair.aggregators.Aggregator.client_objective`.

    FedProx adds ``fastfair-objective = "proximal"`` and ``fastfair-mu``; PropFair
    (``weighting="fedavg"``) ``"propfair"``, ``fastfair-M``, ``fastfair-epsilon`` and
    ``fastfair-extension``; Fed-CVaR-Avg (relay form) ``"cvar"``, ``fastfair-alpha``,
    ``fastfair-gamma``, ``fastfair-lr_threshold`` (-1: ``fastfair-lr_threshold_ratio`` times
    the client learning rate), ``fastfair-lr_threshold_ratio`` and the current threshold
    ``fastfair-threshold``; rules whose clients minimise their plain loss add nothing. Read back
    by :meth:`ClientObjective.from_config`. Build it anew every round: the objective may carry
    the rule's current state.
    """
    if not isinstance(aggregator, Aggregator):
        raise TypeError(f"aggregator must be a fastfair rule; got {type(aggregator).__name__}")
    objective = round_objective(aggregator, objective)
    return {RULE_KEY: aggregator.name, **({} if objective is None else objective.to_config())}
