"""The untrusted train replies of a Flower round: reading and checking each field of a reply
(a reply that fails is dropped with a log line naming the node and the field), measuring its
update and its round inputs. :class:`~fastfair.integrations.flwr.strategy.FastFairStrategy`
reads its replies through the :class:`ReplyReader` it owns."""

from __future__ import annotations

import math
from collections import Counter
from logging import INFO, WARNING
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from flwr.app import Message, RecordDict
from flwr.serverapp.exception import AggregationError
from flwr.supercore import log

from fastfair.aggregators.base import UPDATE_INPUTS, Aggregator
from fastfair.aggregators.bounds import UpdateBound
from fastfair.aggregators.compose import round_objective
from fastfair.integrations.flwr.aggregate import squared_distance
from fastfair.integrations.flwr.arrays import array_to_numpy
from fastfair.integrations.flwr.metrics import finite_number
from fastfair.integrations.flwr.nodes import NodeNumbering

if TYPE_CHECKING:
    from fastfair.aggregators.objectives import ClientObjective

#: The model a round sent: its array names and its arrays, viewed in place.
Model = Tuple[List[str], List[np.ndarray]]

#: The metric key of a client's group in a reply, read when the rule runs over the groups the
#: clients report (:class:`~fastfair.aggregators.ReportedGroups`).
GROUP_KEY = "fastfair-group"


class _Reply:
    """One usable train reply, its arrays viewed in place, with its squared update norm."""

    __slots__ = ("node_id", "arrays", "count", "loss", "inputs", "content", "client", "sq_norm",
                 "group")

    def __init__(self, node_id, arrays, count, loss, inputs, content, client, sq_norm,
                 group=None):
        self.node_id, self.arrays, self.count, self.loss = node_id, arrays, count, loss
        self.inputs, self.content, self.client, self.sq_norm = inputs, content, client, sq_norm
        self.group = group


def _integer(value: Any) -> Optional[int]:
    """``value`` as an int when it is an integer (an int, or a float with no fraction that fits
    a float), else None."""
    v = finite_number(value)
    if v is None or v != math.floor(v):
        return None
    return int(value) if isinstance(value, (int, np.integer)) else int(v)


def _shown(value: Any) -> str:
    """``repr(value)``, shortened for a log line (a 400-digit integer is not read)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def _non_finite(keys: List[str], arrays: List[np.ndarray]) -> Optional[str]:
    """Why the arrays cannot be averaged (the first array holding NaN or inf), or None."""
    for k, a in zip(keys, arrays):
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            pos = int(np.flatnonzero(~np.isfinite(a.reshape(-1)))[0])
            return (f"array '{k}' holds NaN or inf (first at flat index {pos}); a model that "
                    "is not finite is never averaged")
    return None


def _measure(keys: List[str], sent: List[np.ndarray], arrays: List[np.ndarray]
             ) -> Tuple[Optional[float], Optional[str]]:
    """``(||w - w_i||^2, None)``, or ``(None, why)`` when the arrays hold NaN or inf or the
    norm overflows float64. One pass in the arrays' dtype; a finite update whose squares
    overflow that dtype is measured again in float64."""
    with np.errstate(over="ignore", invalid="ignore"):  # NaN, inf and overflow: below
        sq = squared_distance(sent, arrays)
    if math.isfinite(sq):
        return sq, None
    why = _non_finite(keys, arrays)
    if why is not None:
        return None, why
    with np.errstate(over="ignore", invalid="ignore"):
        sq = sum(float(np.square(a.astype(np.float64) - g).sum()) for a, g in zip(arrays, sent))
    if not math.isfinite(sq):
        return None, "its update is too large to measure (the norm overflows float64)"
    return sq, None


def split_replies(replies: List[Message], is_train: bool) -> Tuple[List[Message], List[Message]]:
    """``(with content, with an error)``: the round's replies split by
    :meth:`~flwr.app.Message.has_error`, each error logged with its node, as Flower's
    strategies log them (``aggregate_train: Received 3 results and 1 failures``)."""
    valid = [msg for msg in replies if not msg.has_error()]
    failed = [msg for msg in replies if msg.has_error()]
    if not replies:
        return valid, failed
    log(INFO, "%s: Received %s results and %s failures",
        "aggregate_train" if is_train else "aggregate_evaluate", len(valid), len(failed))
    for msg in failed:
        log(INFO, "\t> Received error in reply from node %d: %s", msg.metadata.src_node_id,
            msg.error.reason)
    return valid, failed


class ReplyReader:
    r"""Reads and checks the untrusted train replies of a round for one rule; a
    :class:`~fastfair.integrations.flwr.strategy.FastFairStrategy` owns one (``replies``) and
    passes each round the model it sent and its node numbering.

    Parameters
    ----------
    aggregator
        The rule: what it needs (``needs_losses``, ``invalid_loss``, ``num_clients``,
        ``allow_duplicates``, its ``groups``) decides what a reply must carry.
    objective
        The client objective chosen in place of the rule's own (None: the rule's own); its
        ``reports`` name the metric of each of the rule's ``round_inputs`` it provides.
    bound
        The opt-in :class:`~fastfair.aggregators.bounds.UpdateBound` on each reply.
    weighted_by_key, loss_key, client_id_key
        The metric keys of each reply's example count, its loss of the received model and its
        client id (None: clients are numbered by Flower node id).
    round_input_keys
        ``{input name: metric key}`` over the objective's keys, or adding inputs read from the
        metrics. A round input that neither the models (``sq_norms``, ``updates``) nor a metric
        provide is refused (ValueError naming it and the fix).
    """

    def __init__(self, aggregator: Aggregator, objective: Optional[ClientObjective],
                 bound: UpdateBound, *, weighted_by_key: str, loss_key: str,
                 client_id_key: Optional[str],
                 round_input_keys: Optional[Mapping[str, str]] = None) -> None:
        own = round_objective(aggregator, objective)
        reports = {} if own is None else own.reports
        keys = {name: reports[name] for name in aggregator.round_inputs if name in reports}
        keys.update(round_input_keys or {})
        missing = [name for name in aggregator.round_inputs
                   if name not in UPDATE_INPUTS and name not in keys]
        if missing:
            raise ValueError(f"rule {aggregator.name!r} needs the round input(s) "
                             f"{', '.join(missing)}, which neither the replies' models nor its "
                             "client objective provide: map each to the reply metric that "
                             "carries it with round_input_keys")
        self.aggregator, self.bound = aggregator, bound
        self.weighted_by_key, self.loss_key = weighted_by_key, loss_key
        self.client_id_key = client_id_key
        #: Round inputs read from the reply metrics, ``{input name: metric key}``.
        self.round_input_keys = keys
        #: Round inputs computed from the replies' models (of :data:`UPDATE_INPUTS`).
        self.computed = [name for name in aggregator.round_inputs
                         if name in UPDATE_INPUTS and name not in keys]
        # Whether each reply's update norm is measured as it is read (the clip and the inputs
        # from the models need it, and it finds NaN/inf on the way); otherwise the arrays are
        # checked through the step itself (NaN and inf reach the new model whatever their
        # coefficient), which costs no pass over the replies when every reply is finite.
        self.measures = bool(self.computed) or bound.clips

    def read(self, server_round: int, replies: List[Message], sent: Model,
             numbering: NodeNumbering) -> List[_Reply]:
        """The usable replies of the round, each checked against the model ``sent``
        (``(keys, arrays)``); a reply that fails a check, whose client id another reply also
        claims, or (numbering by node id) that ``numbering`` has no client id left for
        (:meth:`NodeNumbering.drop_unnumbered`) is dropped with a log line. Raises
        ``AggregationError`` when the rule needs losses and no reply has the loss key."""
        self._check_losses_sent(server_round, replies)
        usable = [r for r in (self._read_reply(msg, sent) for msg in replies) if r is not None]
        usable = self._drop_shared_ids(usable)
        return usable if self.client_id_key is not None else numbering.drop_unnumbered(usable)

    def round_inputs(self, sent: List[np.ndarray], usable: List[_Reply]
                     ) -> Tuple[Dict[str, Any], Optional[np.ndarray]]:
        r"""``(inputs, scales)``: the rule's round inputs over the replies (read from their
        metrics, or computed from their models and clipped as the bound says) and the bound's
        ``[n]`` clip scales :math:`\min(1, \tau / \|X_i\|)` (None without a clip)."""
        sq_norms = np.array([r.sq_norm for r in usable]) if self.measures else None
        scales = None
        if self.bound.clips:
            assert sq_norms is not None  # a bound measures every reply (measures)
            scales = self.bound.scales(np.sqrt(sq_norms))
        inputs = {name: np.array([r.inputs[name] for r in usable])
                  for name in self.round_input_keys}
        computed = self._computed_inputs(sent, usable, sq_norms)
        inputs.update(computed if scales is None else self.bound.clipped_inputs(computed, scales))
        return inputs, scales

    def report_groups(self, ids: np.ndarray, usable: List[_Reply]) -> None:
        """Tells a rule over the groups the clients report (``ReportedGroups``) the group of
        each client ``ids[i]`` of the replies :meth:`read` kept; other rules take no report."""
        groups = self._reported_groups()
        if groups is not None:
            groups.report(ids, [r.group for r in usable])

    @staticmethod
    def evaluate_contents(replies: List[Message]) -> List[RecordDict]:
        """The contents of the evaluation replies that hold exactly one ``MetricRecord``; the
        others are left out with a log line (Flower's FedAvg raises on them)."""
        contents = []
        for msg in replies:
            if len(msg.content.metric_records) != 1:
                log(WARNING, "aggregate_evaluate: leaving out the reply of node %d: expected one "
                    "MetricRecord; got %d", msg.metadata.src_node_id,
                    len(msg.content.metric_records))
            else:
                contents.append(msg.content)
        return contents

    def _reported_groups(self) -> Any:
        """The rule's groups when the clients report them (None otherwise)."""
        groups = getattr(self.aggregator, "groups", None)
        return groups if groups is not None and getattr(groups, "reported", False) else None

    def _read_reply(self, msg: Message, sent_model: Model) -> Optional[_Reply]:
        """The reply's arrays and metrics, or None (with a log line saying why) if unusable."""
        node = msg.metadata.src_node_id
        content = msg.content

        def drop(reason: str) -> None:
            log(WARNING, "aggregate_train: dropping the reply of node %d: %s", node, reason)

        if len(content.array_records) != 1 or len(content.metric_records) != 1:
            drop(f"expected one ArrayRecord and one MetricRecord; got "
                 f"{len(content.array_records)} and {len(content.metric_records)}")
            return None
        record = next(iter(content.array_records.values()))
        metrics = next(iter(content.metric_records.values()))
        keys, sent = sent_model
        if list(record.keys()) != keys:
            drop(f"its arrays are named {list(record.keys())[:4]}...; the model sent has "
                 f"{keys[:4]}...")
            return None
        try:
            arrays = [array_to_numpy(record[k]) for k in keys]
        except (TypeError, ValueError) as exc:
            drop(f"unreadable array ({exc})")
            return None
        for k, a, g in zip(keys, arrays, sent):
            if a.shape != g.shape or a.dtype != g.dtype:
                drop(f"array '{k}' is {a.dtype}{list(a.shape)}; the model sent has "
                     f"{g.dtype}{list(g.shape)}")
                return None
        sq_norm = None
        if self.measures:  # the norms are needed: they check the arrays on the way
            sq_norm, why = _measure(keys, sent, arrays)
            if why is not None:
                drop(why)
                return None
        raw = metrics.get(self.weighted_by_key)
        count = _integer(raw)
        if count is None or count < 0:
            drop(f"metric '{self.weighted_by_key}' (example count) must be a non-negative "
                 f"integer that fits a float; got {_shown(raw)}")
            return None
        raw = metrics.get(self.loss_key)
        loss = finite_number(raw)
        if loss is None and self.aggregator.needs_losses:
            drop(f"metric '{self.loss_key}' is missing or not a finite number (got "
                 f"{_shown(raw)}); rule {self.aggregator.name!r} needs it: "
                 f"{self._what_to_send()}")
            return None
        why = None if loss is None else self.aggregator.invalid_loss(loss)
        if why is not None:
            drop(f"metric '{self.loss_key}' = {loss!r} {why} for rule "
                 f"{self.aggregator.name!r}")
            return None
        inputs = {}
        for name, key in self.round_input_keys.items():
            value = finite_number(metrics.get(key))
            if value is None:
                drop(f"metric '{key}' ({name}) is missing or not a finite number; got "
                     f"{_shown(metrics.get(key))}")
                return None
            inputs[name] = value
        client = None
        if self.client_id_key is not None:
            raw = metrics.get(self.client_id_key)
            client = _integer(raw)
            if client is None or not 0 <= client < self.aggregator.num_clients:
                drop(f"metric '{self.client_id_key}' (client id) must be an integer in "
                     f"[0, {self.aggregator.num_clients}); got {_shown(raw)}")
                return None
        group = None
        groups = self._reported_groups()
        if groups is not None:
            raw = metrics.get(GROUP_KEY)
            group = _integer(raw)
            if group is None or not 0 <= group < groups.num_groups:
                drop(f"metric '{GROUP_KEY}' (the client's group) must be an integer in "
                     f"[0, {groups.num_groups}); got {_shown(raw)}")
                return None
        return _Reply(node, arrays, float(count), loss, inputs, content, client, sq_norm, group)

    def _drop_shared_ids(self, usable: List[_Reply]) -> List[_Reply]:
        """The replies less those whose client id (or Flower node id) another reply of the
        round also has, each group dropped with a log line: which of them is the client
        cannot be told, and a rule takes each client at most once a round."""
        if self.aggregator.allow_duplicates:
            return usable
        by_client = self.client_id_key is not None
        key = (lambda r: r.client) if by_client else (lambda r: r.node_id)
        seen = Counter(key(r) for r in usable)
        shared = {k for k, n in seen.items() if n > 1}
        for k in sorted(shared):
            nodes = [r.node_id for r in usable if key(r) == k]
            log(WARNING, "aggregate_train: dropping the replies of nodes %s: %s %d is claimed "
                "by %d replies", nodes, "client id" if by_client else "node id", k, len(nodes))
        return [r for r in usable if key(r) not in shared] if shared else usable

    def _what_to_send(self) -> str:
        """What a reply must carry for a rule that needs losses (for error messages)."""
        return (f"each client must report its loss of the model it received, on its training "
                f"data before local training, as metric '{self.loss_key}' (Flower's examples "
                "report 'train_loss', the mean loss during training: a different quantity)")

    def _check_losses_sent(self, server_round: int, valid: List[Message]) -> None:
        """Raises ``AggregationError`` when the rule needs losses and not one reply has the
        loss key: the ``ClientApp`` does not send it (e.g. an unchanged Flower example)."""
        if not self.aggregator.needs_losses or not valid:
            return
        if any(self.loss_key in record for msg in valid
               for record in msg.content.metric_records.values()):
            return
        raise AggregationError(f"rule {self.aggregator.name!r} needs losses, but none of the "
                               f"{len(valid)} replies of round {server_round} has metric "
                               f"'{self.loss_key}': {self._what_to_send()}. In the ClientApp, "
                               "evaluate the received model before training and add "
                               f"{{'{self.loss_key}': loss}} to the reply's MetricRecord")

    def client_ids(self, usable: List[_Reply], numbering: NodeNumbering
                   ) -> Tuple[np.ndarray, Dict[int, int]]:
        """``[n]`` client ids of the replies :meth:`read` kept (from their metric, or from
        ``numbering``), and the node numbers ``{node id: client id}`` this round would add
        (committed by the caller once the rule accepts the round)."""
        if self.client_id_key is not None:
            return np.array([r.client for r in usable], dtype=np.int64), {}
        return numbering.client_ids(usable)

    def _computed_inputs(self, sent: List[np.ndarray], usable: List[_Reply],
                         sq_norms: Optional[np.ndarray]) -> Dict[str, Any]:
        """The round inputs the rule declares that come from the replies' models: ``sq_norms``
        (squared update norms, measured without forming the updates) and ``updates``
        (``w - w_i``), of the updates before any clip (``UpdateBound.clipped_inputs``)."""
        inputs: Dict[str, Any] = {}
        if "sq_norms" in self.computed:
            assert sq_norms is not None  # measured: inputs computed from the models need it
            inputs["sq_norms"] = sq_norms
        if "updates" in self.computed:
            inputs["updates"] = [[g - a for g, a in zip(sent, r.arrays)] for r in usable]
        return inputs
