""":class:`FastFairStrategy`: a Flower strategy whose aggregation is a fastfair rule and whose
server step is a fastfair server optimiser (the round is described in
:mod:`fastfair.integrations.flwr`). It is composed of the parts it owns: the
:class:`~fastfair.integrations.flwr.replies.ReplyReader` that reads and checks its replies
(``replies``), the :class:`~fastfair.integrations.flwr.selection.ReplySelection` that keeps
the replies its policy selects (``selection``) and the
:class:`~fastfair.integrations.flwr.nodes.NodeNumbering` of nodes without a client id."""

from __future__ import annotations

import copy
import threading
from logging import INFO, WARNING
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as _FlowerFedAvg
from flwr.supercore import log

from fastfair.aggregators.base import FORMAT_VERSION, Aggregator
from fastfair.aggregators.bounds import UpdateBound
from fastfair.aggregators.compose import choose_objective
from fastfair.aggregators.server_opt import ServerOptimizer
from fastfair.integrations.flwr.aggregate import (
    check_model_dtypes,
    checked_parts,
    propose_server_step,
)
from fastfair.integrations.flwr.arrays import array_to_numpy, numpy_to_array
from fastfair.integrations.flwr.client import RECEIVED_LOSS_KEY, client_config
from fastfair.integrations.flwr.metrics import add_round_metrics, average_metrics
from fastfair.integrations.flwr.nodes import NodeNumbering, checked_node_ids
from fastfair.integrations.flwr.replies import (
    Model,
    ReplyReader,
    _non_finite,
    _Reply,
    split_replies,
)
from fastfair.integrations.flwr.selection import ReplySelection
from fastfair.state import StateDict

MetricsAggregation = Callable[[List[RecordDict], str], MetricRecord]


class _Refused(Exception):
    """A round that is not aggregated; the message says why."""


class _NotFinite(Exception):
    """A step that is not finite because of these replies (``args[0]``: (reply, why) pairs)."""


class FastFairStrategy(_FlowerFedAvg):
    r"""A Flower strategy whose aggregation is a fastfair rule.

    .. code-block:: python

        from fastfair.aggregators import FedAdam, FedMABA
        from fastfair.integrations.flwr import FastFairStrategy

        strategy = FastFairStrategy(FedMABA(num_clients=100), fraction_train=0.1,
                                    client_id_key="partition-id")
        # or with an adaptive server step on the same coefficients:
        strategy = FastFairStrategy(FedMABA(num_clients=100), server_optimizer=FedAdam(lr=0.01))
        result = strategy.start(grid, initial_arrays=ArrayRecord(model.state_dict()),
                                num_rounds=50)

    Parameters
    ----------
    aggregator
        Any fastfair rule (:class:`fastfair.aggregators.Aggregator`); its ``num_clients`` K
        bounds the client ids. A rule that expects gradients at the received model in the replies
        (``expects_gradients``, e.g. Fed-CVaR-Avg's one-step form) is refused, and so is a server
        optimiser (pass it as ``server_optimizer``). Fair over groups:
        :class:`~fastfair.aggregators.OverGroups` with the group map (an array of the client
        ids' groups, or a function of them), or with
        :class:`~fastfair.aggregators.ReportedGroups` to read each reply's group from its
        metric ``"fastfair-group"`` (an integer in ``[0, G)``; a reply without one is dropped).
    server_optimizer
        The server step on the round's combined pseudo-gradient (SGD, FedAvgM, FedAdam,
        FedYogi, FedAdagrad); its ``lr`` is :math:`\eta`. None: ``SGD(lr=1.0)``, the rule's own.
    objective, objective_options
        What the clients minimise in place of the rule's own (None): ``"plain"``, ``"proximal"``
        (``{"mu": ...}``) or ``"propfair"``, sent in every round's train config
        (:func:`client_config`); :func:`fastfair.aggregators.compose.choose_objective` refuses
        a combination without meaning.
    loss_key
        Metric key of each client's loss of the *received* model on its training data, measured
        before local training (as the adaptive rules require). Default :data:`RECEIVED_LOSS_KEY`
        (``"fastfair-received-loss"``), not Flower's ``train_loss`` (the mean loss *during*
        local training). Required only by rules that use losses (``needs_losses``): a reply
        without it is dropped with a warning that says what to send, and a round in which no
        reply has it raises ``AggregationError``.
    client_id_key
        Metric key of each client's id in ``[0, K)`` (e.g. its partition id), so that per-client
        state follows the data across runs. ``None`` (default): Flower node ids are numbered
        ``0, 1, ...`` in order of first reply (kept in :meth:`state_dict`); the replies of nodes
        beyond the first ``num_clients`` are dropped with a log line.
    round_input_keys
        The rule's ``round_inputs`` are filled in from the replies: ``sq_norms`` and ``updates``
        from their models, every other input from the metric key its client objective declares
        (``reports``; Fed-CVaR-Avg's ``thresholds`` under :data:`THRESHOLD_KEY`). This mapping
        ``{input name: metric key}`` overrides those keys or adds inputs read from the metrics.
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes,
    weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn,
    evaluate_metrics_aggr_fn
        As Flower's ``FedAvg`` (client sampling, record keys, metric averaging). ``weighted_by_key``
        (default ``"num-examples"``) gives the counts the rules weigh by. The default metric
        averaging is :func:`average_metrics` (Flower's weighted average, which never raises).
    max_update_norm, update_norm_reference, max_samples_per_client
        The opt-in bound of :mod:`fastfair.aggregators.bounds` (off by default): each reply's
        update :math:`X_i = w - w_i` is clipped to norm :math:`\tau` (``max_update_norm`` times
        the round's median update norm with ``update_norm_reference="median"``, or
        ``max_update_norm`` itself with ``"absolute"``) and each reported count to
        ``max_samples_per_client``, before the rule sees the round.
    keep_first, deadline
        Selection policies on the replies (:class:`~.selection.ReplySelection`).

    Every field of a reply is untrusted: a reply whose arrays hold NaN or inf, whose count is
    not a non-negative integer that fits a float, whose loss, round inputs or client id are
    not finite numbers (the id an integer in ``[0, K)``), whose loss the rule cannot take
    (:meth:`~fastfair.aggregators.Aggregator.invalid_loss`), or whose client id another reply
    of the round also claims, is dropped with a log line naming the node and the field. A round
    commits entirely or not at all: the metrics, the rule's coefficients
    (:meth:`~fastfair.aggregators.Aggregator.propose`) and the server step are computed first,
    and only then are the rule, the optimiser's step count and the node numbering committed. A
    round that cannot be aggregated (every count 0, a metrics function that raises, a step
    that overflows) is logged and returns no new arrays, with nothing changed; a rule that
    rejects the round raises ``AggregationError``, with nothing changed. Rounds called from
    several threads are taken one at a time (a lock), each committing whole.
    """

    def __init__(self, aggregator: Aggregator, *,
                 server_optimizer: Optional[ServerOptimizer] = None,
                 objective: Optional[str] = None,
                 objective_options: Optional[Mapping[str, Any]] = None,
                 loss_key: str = RECEIVED_LOSS_KEY, client_id_key: Optional[str] = None,
                 round_input_keys: Optional[Mapping[str, str]] = None,
                 fraction_train: float = 1.0, fraction_evaluate: float = 1.0,
                 min_train_nodes: int = 2, min_evaluate_nodes: int = 2,
                 min_available_nodes: int = 2, weighted_by_key: str = "num-examples",
                 arrayrecord_key: str = "arrays", configrecord_key: str = "config",
                 train_metrics_aggr_fn: Optional[MetricsAggregation] = None,
                 evaluate_metrics_aggr_fn: Optional[MetricsAggregation] = None,
                 max_update_norm: Optional[float] = None,
                 update_norm_reference: str = "median",
                 max_samples_per_client: Optional[float] = None,
                 keep_first: Optional[int] = None, deadline: Optional[float] = None) -> None:
        selection = ReplySelection(keep_first, deadline)
        server_optimizer = checked_parts(aggregator, server_optimizer)
        bound = UpdateBound(max_update_norm, update_norm_reference, max_samples_per_client)
        chosen = choose_objective(aggregator, objective, objective_options)
        reader = ReplyReader(aggregator, chosen, bound, weighted_by_key=weighted_by_key,
                             loss_key=loss_key, client_id_key=client_id_key,
                             round_input_keys=round_input_keys)
        super().__init__(fraction_train=fraction_train, fraction_evaluate=fraction_evaluate,
                         min_train_nodes=min_train_nodes, min_evaluate_nodes=min_evaluate_nodes,
                         min_available_nodes=min_available_nodes,
                         weighted_by_key=weighted_by_key, arrayrecord_key=arrayrecord_key,
                         configrecord_key=configrecord_key,
                         train_metrics_aggr_fn=train_metrics_aggr_fn or average_metrics,
                         evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn or average_metrics)
        self.aggregator = aggregator
        #: The client objective in place of the rule's own (None: the rule's own).
        self.objective = chosen
        #: The opt-in bound on each reply (:class:`~fastfair.aggregators.bounds.UpdateBound`).
        self.bound = bound
        self.server_optimizer = server_optimizer
        #: Reads and checks each round's replies (:class:`ReplyReader`).
        self.replies = reader
        #: Keeps the replies the policy selects (:class:`ReplySelection`).
        self.selection = selection
        self._numbering = NodeNumbering(aggregator.num_clients)
        self._sent: Optional[Model] = None
        self._out: Optional[List[np.ndarray]] = None
        #: Coefficients, client ids and node ids of the last aggregated round (for inspection).
        self.last_round: Optional[Dict[str, np.ndarray]] = None
        self._lock = threading.RLock()  # one round at a time: each commits whole or not at all

    @property
    def loss_key(self) -> str:
        """The metric key of each reply's loss of the received model."""
        return self.replies.loss_key

    @property
    def client_id_key(self) -> Optional[str]:
        """The metric key of each reply's client id (None: numbered by node id)."""
        return self.replies.client_id_key

    @property
    def round_input_keys(self) -> Dict[str, str]:
        """Round inputs read from the reply metrics, ``{input name: metric key}``."""
        return self.replies.round_input_keys

    @property
    def keep_first(self) -> Optional[int]:
        """How many of the first replies a round keeps (None: every reply)."""
        return self.selection.keep_first

    @property
    def deadline(self) -> Optional[float]:
        """Seconds after the round's start within which a reply counts (None: no deadline)."""
        return self.selection.deadline

    def __getstate__(self) -> Dict[str, Any]:
        """The strategy without its lock (a lock is not copied or pickled)."""
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """A copied or unpickled strategy, with a lock of its own."""
        self.__dict__.update(state, _lock=threading.RLock())

    # ------------------------------------------------------------------ Flower hooks
    def summary(self) -> None:
        """Logs the rule, the optimiser and the keys read from replies, then Flower's."""
        log(INFO, "\t├──> fastfair rule: %r", self.aggregator)
        log(INFO, "\t│\t├── server optimizer: %r", self.server_optimizer)
        log(INFO, "\t│\t├── loss key: '%s' (needed: %s)", self.loss_key,
            self.aggregator.needs_losses)
        if self.round_input_keys:
            log(INFO, "\t│\t├── round inputs from metrics: %s", self.round_input_keys)
        log(INFO, "\t│\t└── client ids: %s", f"metric '{self.client_id_key}'"
            if self.client_id_key else "node ids in order of first reply")
        super().summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Flower's sampling and messages, with the client config added; remembers the model
        sent (viewed in place) for the server step."""
        keys = list(arrays.keys())
        sent = [array_to_numpy(arrays[k]) for k in keys]
        check_model_dtypes(keys, sent)
        with self._lock:
            self._sent = (keys, sent)
            self.selection.start()
        for key, value in client_config(self.aggregator, self.objective).items():
            config[key] = value
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> Tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Validates the replies, asks the rule for coefficients and takes the server step.

        Returns the new global ``ArrayRecord`` and the train metrics: the weighted average
        of the client metrics (:func:`average_metrics` unless ``train_metrics_aggr_fn`` is
        given) plus ``fastfair-clients``, ``fastfair-coefficients``,
        ``fastfair-coef-min``/``-max``/``-sum``, ``fastfair-dropped`` (replies left out) and,
        with ``max_update_norm``, ``fastfair-clipped``. ``(None, None)``, with a log line
        saying why and nothing changed, when no reply is usable or the round cannot be
        aggregated (see the class docstring). Rounds from several threads take turns.
        """
        with self._lock:
            return self._aggregate_train(server_round, replies)

    def _aggregate_train(self, server_round: int, replies: Iterable[Message]
                         ) -> Tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """:meth:`aggregate_train` under the strategy's lock."""
        if self._sent is None:
            raise AggregationError("aggregate_train was called before configure_train: the "
                                   "strategy needs the model it sent")
        valid, failed = split_replies(list(replies), is_train=True)
        valid, late = self.selection.select(valid)
        usable = self.replies.read(server_round, valid, self._sent, self._numbering)
        dropped = len(failed) + len(late) + len(valid) - len(usable)
        if not usable:
            log(WARNING, "aggregate_train: no usable reply in round %d; the global model is "
                "unchanged", server_round)
            return None, None
        try:
            try:
                return self._aggregate(server_round, usable, dropped)
            except _NotFinite as exc:  # nothing committed: again without those replies
                bad = exc.args[0]
                for r, why in bad:
                    log(WARNING, "aggregate_train: dropping the reply of node %d: %s",
                        r.node_id, why)
                usable = [r for r in usable if all(r is not b for b, _ in bad)]
                if not usable:
                    raise _Refused("no usable reply is left") from None
                return self._aggregate(server_round, usable, dropped + len(bad), checked=True)
        except _Refused as why:
            log(WARNING, "aggregate_train: round %d is not aggregated: %s. The global model, "
                "the rule, the server optimiser, the node numbering and the round counter are "
                "unchanged", server_round, why)
            return None, None

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> Optional[MetricRecord]:
        """Flower's evaluation average, with untrusted replies: a reply without exactly one
        ``MetricRecord`` is left out with a log line (Flower's FedAvg raises on it), and the
        default :func:`average_metrics` never raises; a user's ``evaluate_metrics_aggr_fn``
        that raises is logged and the round has no evaluation metrics."""
        valid, _ = split_replies(list(replies), is_train=False)
        contents = self.replies.evaluate_contents(valid)
        if not contents:
            return None
        try:
            return self.evaluate_metrics_aggr_fn(contents, self.weighted_by_key)
        except Exception as exc:  # a user's function
            log(WARNING, "aggregate_evaluate: round %d has no evaluation metrics: "
                "evaluate_metrics_aggr_fn raised %s: %s", server_round, type(exc).__name__, exc)
            return None

    def _aggregate(self, server_round: int, usable: List[_Reply], dropped: int,
                   checked: bool = False) -> Tuple[ArrayRecord, MetricRecord]:
        """The round on checked replies: everything that can fail first (raising ``_Refused``,
        or the rule's ``ValueError``/``TypeError``), then the commits, which cannot fail."""
        assert self._sent is not None  # aggregate_train refuses a round before configure_train
        keys, sent = self._sent
        counts = self.bound.counts(np.array([r.count for r in usable], dtype=np.float64))
        if not (counts > 0).any():
            raise _Refused(f"every usable reply reports '{self.weighted_by_key}' 0, so there "
                           "is nothing to weigh; clients must report the number of examples "
                           "they trained on")
        ids, new_nodes = self.replies.client_ids(usable, self._numbering)
        losses = (np.array([r.loss for r in usable]) if all(r.loss is not None for r in usable)
                  else None)
        inputs, scales = self.replies.round_inputs(sent, usable)
        metrics = self._train_metrics(usable, counts)
        self.replies.report_groups(ids, usable)
        try:
            coef, commit_rule = self.aggregator.propose(ids, losses, num_samples=counts,
                                                        **inputs)
        except (ValueError, TypeError) as exc:  # nothing has changed
            raise AggregationError(f"rule {self.aggregator.name!r} rejected round "
                                   f"{server_round}: {exc}") from exc
        coef = np.asarray(coef, dtype=np.float64)
        step = coef if scales is None else coef * scales
        if not np.isfinite(step).all():
            raise _Refused(f"rule {self.aggregator.name!r} gave coefficients that are not "
                           "finite")

        # The results are serialised (copied) below, so one set of buffers serves every round:
        # the pass writes to memory already mapped instead of faulting in new pages.
        if self._out is None or any(o.shape != g.shape or o.dtype != g.dtype
                                    for o, g in zip(self._out, sent)):
            self._out = [np.empty_like(g) for g in sent]
        new, commit_step = propose_server_step(self.server_optimizer, sent,
                                               [r.arrays for r in usable], step, out=self._out)
        if new is None and not (self.replies.measures or checked):
            bad = [(r, why) for r, why in ((r, _non_finite(keys, r.arrays)) for r in usable)
                   if why is not None]
            if bad:
                raise _NotFinite(bad)
        if new is None:
            raise _Refused("the server step is not finite (the replies' updates overflow the "
                           "model's dtype); bound them with max_update_norm")
        record = ArrayRecord({k: numpy_to_array(a) for k, a in zip(keys, new)})

        # Checked: only the rule's commit can refuse (its state changed since), changing nothing.
        try:
            commit_rule()
        except RuntimeError as exc:
            raise AggregationError(f"rule {self.aggregator.name!r} could not commit round "
                                   f"{server_round}: {exc}") from exc
        commit_step()
        self._numbering.commit(new_nodes)
        add_round_metrics(metrics, ids, coef, dropped, scales)
        self.last_round = {"client_ids": ids, "coefficients": coef,
                           "node_ids": np.array([r.node_id for r in usable], dtype=np.uint64)}
        if scales is not None:
            self.last_round["clip_scales"] = scales
        return record, metrics

    def _train_metrics(self, usable: List[_Reply], counts: np.ndarray) -> MetricRecord:
        """The averaged train metrics, before anything is committed (raises ``_Refused`` when
        a user's ``train_metrics_aggr_fn`` fails)."""
        contents = [r.content for r in usable]
        if self.train_metrics_aggr_fn is average_metrics:
            return average_metrics(contents, self.weighted_by_key, weights=counts)
        try:
            metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        except Exception as exc:  # a user's function: any failure refuses the round
            raise _Refused(f"train_metrics_aggr_fn raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(metrics, MetricRecord):
            raise _Refused(f"train_metrics_aggr_fn returned {type(metrics).__name__}, not a "
                           "MetricRecord")
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Checkpoint of the strategy: the rule's and the server optimiser's versioned
        state_dicts and the node-to-client numbering. ``torch.save`` it (``torch.load`` with
        torch's defaults reads it), save it with :func:`fastfair.save_state` (NumPy only) or
        pickle it; restore with :meth:`load_state_dict`."""
        with self._lock:
            return StateDict(format_version=FORMAT_VERSION, rule=self.aggregator.state_dict(),
                             optimizer=self.server_optimizer.state_dict(),
                             node_ids=self._numbering.node_ids())

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict` (the rule's and the optimiser's own checks apply: same
        rule, optimiser, population and configuration); on any mismatch raises and changes
        nothing."""
        with self._lock:
            nodes = checked_node_ids(state_dict, self.aggregator.num_clients)
            # Each load checks before it changes anything; the rule's part is checked on a copy
            # first, so that a failure in either part leaves both untouched.
            copy.deepcopy(self.aggregator).load_state_dict(state_dict["rule"])
            self.server_optimizer.load_state_dict(state_dict["optimizer"])
            self.aggregator.load_state_dict(state_dict["rule"])
            self._numbering.restore(nodes)
