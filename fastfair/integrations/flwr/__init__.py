r"""Flower strategies backed by fastfair aggregators (Flower's Message API, ``flwr>=1.41``).

:class:`FastFairStrategy` turns any fastfair rule (FedAvg, FairAvg, FedProx, FedMABA, q-FedAvg,
TERM, PropFair, Fed-CVaR-Avg, FedMGDA, AAggFF, ...) with any server optimiser (``SGD`` by default,
FedAvgM, FedAdam, FedYogi, FedAdagrad) into a ``flwr.serverapp.strategy.Strategy``. Every round:

1. Flower samples the clients (``fraction_train``, ``min_train_nodes``, as in Flower's FedAvg);
   the strategy adds the rule's name and its client objective (:func:`client_config`) to the
   train config.
2. Each reply must carry the client's model (one ``ArrayRecord``) and one ``MetricRecord`` with the
   example count (``weighted_by_key``), for rules that need it the loss of the *received* model
   before local training (``loss_key``, default :data:`RECEIVED_LOSS_KEY`,
   ``"fastfair-received-loss"``: not Flower's ``train_loss``, the mean loss during training),
   and the round inputs its objective reports (Fed-CVaR-Avg's trained threshold under
   :data:`THRESHOLD_KEY`).
3. The rule maps (client ids, losses, counts, round inputs) to coefficients :math:`c` ``[m]``;
   the round inputs it declares that come from the models (q-FedAvg's squared update norms,
   FedMGDA's updates) are computed from the replies. With :math:`w` the model sent, :math:`w_i`
   the replies and ``SGD(lr=η)``, the new global model is

   .. math:: w \leftarrow w - \eta \sum_i c_i (w - w_i)
             = \Big(1 - \eta \sum_i c_i\Big) w + \sum_i \eta c_i w_i

   computed in one multi-tensor pass of :func:`fastfair.ops.weighted_average` over the replies'
   serialized buffers (read in place, never copied). Any other server optimiser receives the
   pseudo-gradient :math:`\sum_i c_i (w - w_i)` from the same single pass and takes its step.
4. The coefficients are returned as train metrics (``fastfair-clients``,
   ``fastfair-coefficients``, their min/max/sum) next to Flower's own averaged client metrics.

The rule and the optimiser live in the strategy object, so their state carries across Flower's
round loop; :meth:`FastFairStrategy.state_dict` / :meth:`~FastFairStrategy.load_state_dict`
checkpoint both together with the node-to-client mapping.

Every field of a reply is untrusted. Replies that failed, or lack the count, the loss or a rule
input, whose arrays do not match the model sent or hold NaN or inf, whose count is not a
non-negative integer that fits a float, whose loss or inputs are not finite numbers, or whose
client id is not an integer in ``[0, K)`` or is claimed by another reply, are dropped with one
log line each (naming the node and the field) and the round goes on with the rest; a round left
with no usable reply keeps the global model unchanged. A round commits entirely or not at all:
metrics, coefficients (the rule's ``propose``) and the server step are computed before the rule,
the optimiser and the node numbering are committed; a round that cannot be aggregated (every
count 0, a metrics function that raises, a step that overflows) is logged and returns no new
arrays. The opt-in bound of :mod:`fastfair.aggregators.bounds` (``max_update_norm``,
``update_norm_reference``, ``max_samples_per_client``) clips each update's norm and caps each
count before the rule sees them. A round in which no reply carries the
loss a rule needs is a misconfigured ``ClientApp`` (e.g. an unchanged Flower example): it raises
``AggregationError`` saying what to send. (Flower's own FedAvg drops failed
replies the same way but stops the run on inconsistent ones.) A loss the rule cannot take from
one client (``Aggregator.invalid_loss``: a negative loss for q-FedAvg or AAggFF, a loss at or
above M for PropFair's EG weighting) drops that reply; a round the rule refuses as a whole
(e.g. every loss 0 under q-FedAvg's EG form) raises Flower's ``AggregationError``, with nothing
changed.

Client side: ``ClientObjective.from_config(msg.content["config"])`` rebuilds, inside a
``ClientApp``, what the rule asks clients to minimise (FedProx's proximal term, PropFair's loss
transform, Fed-CVaR-Avg's jointly trained threshold; the plain loss otherwise): the one protocol
of :mod:`fastfair.aggregators.objectives`, shared with the simulator.

Modules: :mod:`~fastfair.integrations.flwr.arrays` (Flower arrays read in place),
:mod:`~fastfair.integrations.flwr.aggregate` (the pure server step),
:mod:`~fastfair.integrations.flwr.client` (the client config),
:mod:`~fastfair.integrations.flwr.metrics` (the replies' metrics, :func:`average_metrics`),
:mod:`~fastfair.integrations.flwr.replies` (reading and checking the untrusted replies),
:mod:`~fastfair.integrations.flwr.selection` (keep-first and deadline policies),
:mod:`~fastfair.integrations.flwr.nodes` (numbering nodes as clients) and
:mod:`~fastfair.integrations.flwr.strategy` (:class:`FastFairStrategy`, which owns a reader, a
selection policy and a node numbering).
"""

try:
    from fastfair.integrations.flwr.arrays import array_to_numpy, numpy_to_array
    from fastfair.integrations.flwr.metrics import average_metrics
    from fastfair.integrations.flwr.strategy import FastFairStrategy
except ImportError as exc:  # the integration is an optional extra
    if not (exc.name or "").startswith("flwr"):
        raise
    raise ImportError('fastfair.integrations.flwr needs Flower >= 1.41: '
                      'pip install "fastfair[flower]"') from exc
from fastfair.integrations.flwr.aggregate import aggregate_arrays, pseudo_gradient
from fastfair.integrations.flwr.client import (
    RECEIVED_LOSS_KEY,
    THRESHOLD_KEY,
    ClientObjective,
    client_config,
)

__all__ = ["ClientObjective", "FastFairStrategy", "RECEIVED_LOSS_KEY", "THRESHOLD_KEY",
           "aggregate_arrays", "array_to_numpy", "average_metrics", "client_config",
           "numpy_to_array", "pseudo_gradient"]
