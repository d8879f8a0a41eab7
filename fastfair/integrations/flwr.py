r"""Flower strategies backed by fastfair aggregators (Flower's Message API, ``flwr>=1.41``).

:class:`FastFairStrategy` turns any :class:`fastfair.aggregators.Aggregator` (FedAvg, FairAvg,
FedProx, FedMABA, q-FedAvg, TERM, PropFair, Fed-CVaR-Avg, FedMGDA, AAggFF, ..., alone or wrapped
by a server optimiser such as :class:`~fastfair.aggregators.FedAdam`) into a
``flwr.serverapp.strategy.Strategy``. Every round:

1. Flower samples the clients (``fraction_train``, ``min_train_nodes``, as in Flower's FedAvg);
   the strategy adds the rule's client-side hyperparameters to the train config.
2. Each reply must carry the client's model (one ``ArrayRecord``) and one ``MetricRecord`` with the
   example count (``weighted_by_key``) and, for rules that need it, the loss of the *received*
   model before local training (``loss_key``).
3. The rule maps (client ids, losses, counts) to coefficients :math:`c` ``[m]``, and the new
   global model is, with :math:`w` the model sent and :math:`w_i` the replies,

   .. math:: w \leftarrow w - \eta \sum_i c_i (w - w_i)
             = \Big(1 - \eta \sum_i c_i\Big) w + \sum_i \eta c_i w_i

   computed in one multi-tensor pass of :func:`fastfair.ops.weighted_average` over the replies'
   serialized buffers (read in place, never copied). A server optimiser receives the
   pseudo-gradient :math:`\sum_i c_i (w - w_i)` from the same single pass and takes its step.
4. The coefficients are returned as train metrics (``fastfair-clients``,
   ``fastfair-coefficients``, their min/max/sum) next to Flower's own averaged client metrics.

The aggregator lives in the strategy object, so its state carries across Flower's round loop;
:meth:`FastFairStrategy.state_dict` / :meth:`~FastFairStrategy.load_state_dict` checkpoint it
together with the node-to-client mapping.

Replies that failed, or lack the count, the loss or a rule input, or whose arrays do not match
the model sent, are dropped with one log line each and the round goes on with the rest; a round
left with no usable reply keeps the global model unchanged. (Flower's own FedAvg drops failed
replies the same way but stops the run on inconsistent ones.) Inputs the rule itself rejects
(e.g. a negative loss for q-FedAvg) raise Flower's ``AggregationError``.

Client side: :class:`ClientObjective` rebuilds, inside a ``ClientApp``, the objective that
FedProx, PropFair and Fed-CVaR-Avg ask clients to train on, from the config the strategy sends.
"""

from __future__ import annotations

import io
from logging import INFO, WARNING
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.common.constant import SType
    from flwr.serverapp import Grid
    from flwr.serverapp.exception import AggregationError
    from flwr.serverapp.strategy import FedAvg as _FlowerFedAvg
    from flwr.supercore import log
except ImportError as exc:  # the integration is an optional extra
    raise ImportError('fastfair.integrations.flwr needs Flower >= 1.41: '
                      'pip install "fastfair[flower]"') from exc

from fastfair import aggregators as agg
from fastfair import ops
from fastfair.aggregators.base import FORMAT_VERSION
from fastfair.aggregators.server_opt import _ServerOptimizer

__all__ = ["ClientObjective", "FastFairStrategy", "THRESHOLD_KEY", "aggregate_arrays",
           "array_to_numpy", "client_config", "numpy_to_array", "pseudo_gradient"]

#: Metric key under which Fed-CVaR-Avg clients report their trained threshold t'.
THRESHOLD_KEY = "fastfair-threshold"
#: Config key naming the rule whose client objective :class:`ClientObjective` rebuilds.
RULE_KEY = "fastfair-rule"

_FLOAT_DTYPES = ("float16", "float32", "float64")


# --------------------------------------------------------------------------- array conversion

def _npy_header(data: bytes) -> Tuple[np.dtype, Tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, data offset) of ``.npy`` bytes, parsed once per distinct
    header (a model's arrays repeat the same few headers in every reply)."""
    # Versions 1.0 and 2.0 give the header length as a little-endian uint16 / uint32.
    size = 2 if data[6:8] == b"\x01\x00" else 4
    end = 8 + size + int.from_bytes(data[8:8 + size], "little")
    key = data[:end]
    info = _HEADERS.get(key)
    if info is None:
        stream = io.BytesIO(key)
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f".npy format version {version} is not read in place")
        if dtype.hasobject:
            raise TypeError("array holds Python objects; only numeric arrays can be aggregated")
        info = (dtype, tuple(shape), bool(fortran), end)
        if len(_HEADERS) < 4096:
            _HEADERS[key] = info
    return info


_HEADERS: Dict[bytes, Tuple[np.dtype, Tuple[int, ...], bool, int]] = {}


def array_to_numpy(array: Array) -> np.ndarray:
    """A Flower :class:`~flwr.app.Array` as a read-only NumPy view of its serialized bytes.

    Flower stores arrays in the ``.npy`` format; the header is parsed (once per distinct header)
    and the data are viewed in place (``Array.numpy()`` copies them). Fortran-ordered data come
    back as a C-ordered copy; ``.npy`` format 3.0 (non-ASCII field names) is read by copying.

    Returns
    -------
    ``np.ndarray`` of the array's shape and dtype (no copy for C-ordered data).
    """
    if array.stype != SType.NUMPY:
        raise TypeError(f"array has serialization {array.stype!r}; fastfair reads "
                        f"{SType.NUMPY!r} (arrays built from NumPy or torch)")
    data = array.data
    if data[6:8] not in (b"\x01\x00", b"\x02\x00"):
        return array.numpy()
    dtype, shape, fortran, offset = _npy_header(data)
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    if fortran:
        return flat.reshape(shape[::-1]).T.copy(order="C")
    return flat.reshape(shape)


def numpy_to_array(x: np.ndarray) -> Array:
    """A NumPy array as a Flower :class:`~flwr.app.Array` (``.npy`` bytes, one copy of the data;
    ``Array(ndarray)`` makes two)."""
    if not x.flags.c_contiguous:  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        x = x.copy(order="C")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(x))
    data = header.getvalue() + memoryview(x.reshape(-1).view(np.uint8))
    return Array(dtype=str(x.dtype), shape=tuple(int(s) for s in x.shape), stype=SType.NUMPY,
                 data=data)


# --------------------------------------------------------------------------- pure aggregation

def _combine(global_arrays: Sequence[np.ndarray], local_arrays: Sequence[Sequence[np.ndarray]],
             global_weight: float, local_weights: np.ndarray,
             out: Optional[List[np.ndarray]] = None) -> List[np.ndarray]:
    """``global_weight * w + sum_i local_weights[i] * w_i`` per array: one weighted_average pass
    per dtype (a model of one float dtype is one pass); integer arrays (e.g. batch-norm counters)
    are combined in float64 and rounded back to their dtype. ``out``: preallocated results for
    the float arrays (the others are always fresh)."""
    inputs = [list(global_arrays)] if global_weight != 0.0 else []
    inputs += [list(a) for a in local_arrays]
    weights = np.concatenate([[global_weight] if global_weight != 0.0 else [], local_weights])
    result: List[Optional[np.ndarray]] = [None] * len(global_arrays)
    groups: Dict[str, List[int]] = {}
    for k, a in enumerate(global_arrays):
        groups.setdefault(str(a.dtype), []).append(k)
    for dtype, idx in groups.items():
        if dtype in _FLOAT_DTYPES:
            res = ops.weighted_average([[client[k] for k in idx] for client in inputs], weights,
                                       out=None if out is None else [out[k] for k in idx])
        else:
            res = ops.weighted_average(
                [[client[k].astype(np.float64) for k in idx] for client in inputs], weights)
            res = [np.rint(r).astype(dtype) for r in res]
        for k, r in zip(idx, res):
            result[k] = r
    return result


def aggregate_arrays(global_arrays: Sequence[np.ndarray],
                     local_arrays: Sequence[Sequence[np.ndarray]], coefficients: Any, *,
                     lr: float = 1.0, out: Optional[List[np.ndarray]] = None
                     ) -> List[np.ndarray]:
    r"""The server step of a rule from the clients' models, without forming their updates.

    .. math:: w' = w - \eta \sum_i c_i (w - w_i) = \Big(1 - \eta\sum_i c_i\Big) w
              + \sum_i \eta\, c_i\, w_i

    Parameters
    ----------
    global_arrays
        The model sent, L arrays :math:`w`.
    local_arrays
        m client models, each L arrays of the shapes and dtypes of ``global_arrays``.
    coefficients
        ``[m]`` the rule's coefficients :math:`c` (they need not sum to 1).
    lr
        Server learning rate :math:`\eta`.
    out
        Optional L preallocated results (contiguous, shapes and dtypes of ``global_arrays``);
        used for the float arrays.

    Returns
    -------
    L new arrays (one multi-tensor pass of :func:`fastfair.ops.weighted_average`; the term in
    :math:`w` is skipped when its weight is exactly 0, e.g. FedAvg with lr = 1).
    """
    c = np.asarray(coefficients, dtype=np.float64)
    return _combine(global_arrays, local_arrays, 1.0 - lr * float(c.sum()), lr * c, out)


def pseudo_gradient(global_arrays: Sequence[np.ndarray],
                    local_arrays: Sequence[Sequence[np.ndarray]],
                    coefficients: Any) -> List[np.ndarray]:
    r"""The combined pseudo-gradient a server optimiser steps on, in one pass:

    .. math:: \sum_i c_i (w - w_i) = \Big(\sum_i c_i\Big) w - \sum_i c_i w_i

    Shapes as :func:`aggregate_arrays`; returns L arrays.
    """
    c = np.asarray(coefficients, dtype=np.float64)
    return _combine(global_arrays, local_arrays, float(c.sum()), -c)


def _sq_distance(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """``sum_l ||a_l - b_l||^2``: q-FedAvg's update norms without keeping the updates. For float
    arrays the difference and its square are formed in their dtype (the difference of nearby
    values is exact) and summed pairwise (relative error about log2(size) units of roundoff);
    integer arrays go through float64."""
    total = 0.0
    buffers: Dict[np.dtype, np.ndarray] = {}
    for x, y in zip(a, b):
        if x.dtype.kind != "f":
            d = x.astype(np.float64) - y
        else:
            buf = buffers.get(x.dtype)
            if buf is None or buf.size < x.size:
                buf = buffers[x.dtype] = np.empty(max(x.size for x in a), dtype=x.dtype)
            d = buf[:x.size].reshape(x.shape)
            np.subtract(x, y, out=d)
        np.square(d, out=d)
        total += float(d.sum())
    return total


# --------------------------------------------------------------------------- client side

def _inner(aggregator: agg.Aggregator) -> agg.Aggregator:
    return aggregator.aggregator if isinstance(aggregator, _ServerOptimizer) else aggregator


def client_config(aggregator: agg.Aggregator) -> Dict[str, Any]:
    """The config entries clients of ``aggregator`` need to train on its objective.

    FedProx sends ``fastfair-mu``; PropFair (``weighting="fedavg"``) ``fastfair-M`` and
    ``fastfair-epsilon``; Fed-CVaR-Avg (relay form) ``fastfair-alpha``, ``fastfair-gamma`` and the
    current threshold ``fastfair-threshold``; every rule sends its name as ``fastfair-rule``.
    Read back by :meth:`ClientObjective.from_config`.
    """
    rule = _inner(aggregator)
    config: Dict[str, Any] = {RULE_KEY: type(rule).__name__}
    if isinstance(rule, agg.FedProx):
        config["fastfair-mu"] = rule.mu
    elif isinstance(rule, agg.PropFair) and rule.weighting == "fedavg":
        config.update({"fastfair-M": rule.M, "fastfair-epsilon": rule.epsilon})
    elif isinstance(rule, agg.FedCVaRAvg):
        config.update({"fastfair-alpha": rule.alpha, "fastfair-gamma": rule.gamma,
                       THRESHOLD_KEY: rule.threshold})
    return config


class ClientObjective:
    r"""The training objective of a fastfair rule, for use inside a Flower ``ClientApp``.

    Built from the train config the strategy sends (:meth:`from_config`); calling it maps the mean
    loss of a batch to what the client minimises:

    - FedProx: :math:`\ell + \frac{\mu}{2}\sum_l \lVert w_l - w^t_l\rVert^2` (needs ``params`` and
      ``global_params``);
    - PropFair: :math:`-\log(1 - \ell/M)`, or :math:`\ell/M` within ``epsilon`` of M;
    - Fed-CVaR-Avg: :math:`(1-\gamma)t + \frac{1-\gamma}{\alpha}[\ell - t]_+ + \gamma\ell`, trained
      jointly in the threshold ``t`` (start from :attr:`threshold`, report the final t with
      :meth:`reply_metrics`);
    - any other rule: ℓ unchanged.

    It works on floats, NumPy and torch (autograd flows through ``batch_loss``, ``params`` and a
    tensor ``t``), since it calls the rule's own client methods
    (:meth:`~fastfair.aggregators.FedProx.proximal_term`,
    :meth:`~fastfair.aggregators.PropFair.client_loss`,
    :meth:`~fastfair.aggregators.FedCVaRAvg.client_objective`).
    """

    def __init__(self, rule: Optional[agg.Aggregator] = None,
                 threshold: Optional[float] = None) -> None:
        self.rule = rule
        self.threshold = threshold

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ClientObjective":
        """The objective described by a train ``ConfigRecord`` (or any mapping) from
        :class:`FastFairStrategy`; a config without fastfair keys gives the plain loss."""
        name = config.get(RULE_KEY)
        try:
            if name == "FedProx":
                return cls(agg.FedProx(1, mu=config["fastfair-mu"]))
            if name == "PropFair" and "fastfair-M" in config:
                return cls(agg.PropFair(1, config["fastfair-M"], config["fastfair-epsilon"]))
            if name == "FedCVaRAvg":
                t = float(config[THRESHOLD_KEY])
                rule = agg.FedCVaRAvg(1, config["fastfair-alpha"], config["fastfair-gamma"],
                                      threshold=t)
                return cls(rule, threshold=t)
        except KeyError as exc:
            raise ValueError(f"config for rule {name!r} lacks {exc.args[0]!r}: build it with "
                             "fastfair.integrations.flwr.client_config(aggregator)") from None
        return cls()

    def __call__(self, batch_loss: Any, params: Any = None, global_params: Any = None,
                 t: Any = None) -> Any:
        r"""The objective of one batch from its mean loss ``batch_loss`` (a scalar).

        Parameters
        ----------
        batch_loss
            Mean loss ℓ of the batch (float, NumPy or torch scalar).
        params, global_params
            FedProx only: the client's parameters and the received ones (one array or lists of
            L arrays; ``global_params`` detached).
        t
            Fed-CVaR-Avg only: the client's current threshold (a float or a torch scalar that is
            trained with the parameters).
        """
        rule = self.rule
        if isinstance(rule, agg.FedProx):
            if params is None or global_params is None:
                raise ValueError("params and global_params are required by FedProx's proximal "
                                 "term: pass the client's parameters and the received ones")
            return batch_loss + rule.proximal_term(params, global_params)
        if isinstance(rule, agg.PropFair):
            return rule.client_loss(batch_loss)
        if isinstance(rule, agg.FedCVaRAvg):
            if t is None:
                raise ValueError("t is required by Fed-CVaR-Avg: start from "
                                 "ClientObjective.threshold and train it with the parameters")
            return rule.client_objective(batch_loss, t)
        return batch_loss

    def reply_metrics(self, t: Any = None) -> Dict[str, float]:
        """Metrics the rule needs in the reply besides the loss and count: Fed-CVaR-Avg's trained
        threshold ``{"fastfair-threshold": t'}``; empty for other rules."""
        if isinstance(self.rule, agg.FedCVaRAvg):
            if t is None:
                raise ValueError("t is required: pass the threshold the client trained")
            return {THRESHOLD_KEY: float(t)}
        return {}


# --------------------------------------------------------------------------- the strategy

class _Reply:
    """One usable train reply, its arrays viewed in place."""

    __slots__ = ("node_id", "arrays", "count", "loss", "inputs", "content", "client")

    def __init__(self, node_id, arrays, count, loss, inputs, content, client):
        self.node_id, self.arrays, self.count, self.loss = node_id, arrays, count, loss
        self.inputs, self.content, self.client = inputs, content, client


def _finite_number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if np.isfinite(v) else None


class FastFairStrategy(_FlowerFedAvg):
    r"""A Flower strategy whose aggregation is a fastfair rule.

    .. code-block:: python

        from fastfair.aggregators import FedMABA
        from fastfair.integrations.flwr import FastFairStrategy

        strategy = FastFairStrategy(FedMABA(num_clients=100), fraction_train=0.1,
                                    client_id_key="partition-id")
        result = strategy.start(grid, initial_arrays=ArrayRecord(model.state_dict()),
                                num_rounds=50)

    Parameters
    ----------
    aggregator
        Any :class:`fastfair.aggregators.Aggregator`, optionally wrapped by a server optimiser
        (FedAvgM, FedAdam, FedYogi, FedAdagrad). Its ``num_clients`` K bounds the client ids.
        Fed-CVaR-Avg's one-step form (clients reply with gradients) is not supported.
    loss_key
        Metric key of each client's loss of the *received* model, measured before local training
        (as the adaptive rules require). Default ``"train_loss"``, the key of Flower's QFedAvg.
        Required only by rules that use losses.
    client_id_key
        Metric key of each client's id in ``[0, K)`` (e.g. its partition id), so that per-client
        state follows the data across runs. ``None`` (default): Flower node ids are numbered
        ``0, 1, ...`` in order of first reply (kept in :meth:`state_dict`).
    server_lr
        Server learning rate :math:`\eta` of plain rules (server optimisers bring their own).
    round_input_keys
        Extra per-round rule inputs read from the reply metrics, ``{input name: metric key}``;
        Fed-CVaR-Avg's ``thresholds`` default to :data:`THRESHOLD_KEY`. q-FedAvg's update norms
        and FedMGDA's updates are computed from the replies.
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes,
    weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn,
    evaluate_metrics_aggr_fn
        As Flower's ``FedAvg`` (client sampling, record keys, metric averaging).
        ``weighted_by_key`` (default ``"num-examples"``) gives the counts the rules weigh by.
    """

    def __init__(self, aggregator: agg.Aggregator, *, loss_key: str = "train_loss",
                 client_id_key: Optional[str] = None, server_lr: float = 1.0,
                 round_input_keys: Optional[Mapping[str, str]] = None,
                 fraction_train: float = 1.0, fraction_evaluate: float = 1.0,
                 min_train_nodes: int = 2, min_evaluate_nodes: int = 2,
                 min_available_nodes: int = 2, weighted_by_key: str = "num-examples",
                 arrayrecord_key: str = "arrays", configrecord_key: str = "config",
                 train_metrics_aggr_fn: Optional[Callable[[List[RecordDict], str],
                                                          MetricRecord]] = None,
                 evaluate_metrics_aggr_fn: Optional[Callable[[List[RecordDict], str],
                                                             MetricRecord]] = None) -> None:
        if not isinstance(aggregator, agg.Aggregator):
            raise TypeError("aggregator must be a fastfair aggregator (e.g. "
                            f"fastfair.aggregators.FedAvg(num_clients)); got "
                            f"{type(aggregator).__name__}")
        rule = _inner(aggregator)
        if isinstance(rule, agg.FedCVaRAvg) and rule.form != "relay":
            raise ValueError("aggregator: FedCVaRAvg(form='fedsgd') expects gradients in the "
                             "replies; the strategy aggregates models, so use form='relay'")
        lr = float(server_lr)
        if not np.isfinite(lr) or lr <= 0:
            raise ValueError(f"server_lr must be finite and positive; got {server_lr!r}")
        super().__init__(fraction_train=fraction_train, fraction_evaluate=fraction_evaluate,
                         min_train_nodes=min_train_nodes, min_evaluate_nodes=min_evaluate_nodes,
                         min_available_nodes=min_available_nodes,
                         weighted_by_key=weighted_by_key, arrayrecord_key=arrayrecord_key,
                         configrecord_key=configrecord_key,
                         train_metrics_aggr_fn=train_metrics_aggr_fn,
                         evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn)
        self.aggregator = aggregator
        self.loss_key = loss_key
        self.client_id_key = client_id_key
        self.server_lr = lr
        self.round_input_keys = dict(round_input_keys or {})
        if isinstance(rule, agg.FedCVaRAvg):
            self.round_input_keys.setdefault("thresholds", THRESHOLD_KEY)
        self._node_index: Dict[int, int] = {}
        self._sent: Optional[Tuple[List[str], List[np.ndarray]]] = None
        self._out: Optional[List[np.ndarray]] = None
        #: Coefficients, client ids and node ids of the last aggregated round (for inspection).
        self.last_round: Optional[Dict[str, np.ndarray]] = None

    # ------------------------------------------------------------------ Flower hooks
    def summary(self) -> None:
        """Logs the rule and the keys read from replies, then Flower's FedAvg summary."""
        log(INFO, "\t├──> fastfair rule: %r", self.aggregator)
        log(INFO, "\t│\t├── loss key: '%s' (needed: %s)", self.loss_key, self._needs_losses())
        log(INFO, "\t│\t└── client ids: %s", f"metric '{self.client_id_key}'"
            if self.client_id_key else "node ids in order of first reply")
        super().summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Flower's sampling and messages, with the rule's client config added; remembers the
        model sent (viewed in place) for the server step."""
        keys = list(arrays.keys())
        self._sent = (keys, [array_to_numpy(arrays[k]) for k in keys])
        for key, value in client_config(self.aggregator).items():
            config[key] = value
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> Tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Validates the replies, asks the rule for coefficients and takes the server step.

        Returns the new global ``ArrayRecord`` (None when no reply is usable) and the train
        metrics: Flower's weighted average of the client metrics plus ``fastfair-clients``,
        ``fastfair-coefficients``, ``fastfair-coef-min``/``-max``/``-sum`` and
        ``fastfair-dropped`` (replies left out).
        """
        if self._sent is None:
            raise AggregationError("aggregate_train was called before configure_train: the "
                                   "strategy needs the model it sent")
        valid, failed = self._check_and_log_replies(list(replies), is_train=True,
                                                    validate=False)
        usable = [r for r in (self._read_reply(msg) for msg in valid) if r is not None]
        dropped = len(failed) + len(valid) - len(usable)
        if not usable:
            log(WARNING, "aggregate_train: no usable reply in round %d; the global model is "
                "unchanged", server_round)
            return None, None

        keys, sent = self._sent
        ids, new_nodes = self._client_ids(usable)
        losses = (np.array([r.loss for r in usable]) if all(r.loss is not None for r in usable)
                  else None)
        counts = np.array([r.count for r in usable])
        inputs = {name: np.array([r.inputs[name] for r in usable])
                  for name in self.round_input_keys}
        inputs.update(self._computed_inputs(sent, usable))
        try:
            coef = np.asarray(self.aggregator.weights(ids, losses, num_samples=counts, **inputs),
                              dtype=np.float64)
        except (ValueError, TypeError) as exc:
            raise AggregationError(f"{type(_inner(self.aggregator)).__name__} rejected round "
                                   f"{server_round}: {exc}") from exc
        self._node_index.update(new_nodes)

        local = [r.arrays for r in usable]
        if isinstance(self.aggregator, _ServerOptimizer):
            new = self._optimizer_step(sent, local, coef)
        else:
            # The results are serialised (copied) below, so one set of buffers serves every
            # round: the pass writes to memory already mapped instead of faulting in new pages.
            if self._out is None or any(o.shape != g.shape or o.dtype != g.dtype
                                        for o, g in zip(self._out, sent)):
                self._out = [np.empty_like(g) for g in sent]
            new = aggregate_arrays(sent, local, coef, lr=self.server_lr, out=self._out)
        record = ArrayRecord({k: numpy_to_array(a) for k, a in zip(keys, new)})

        metrics = self.train_metrics_aggr_fn([r.content for r in usable], self.weighted_by_key)
        metrics["fastfair-clients"] = [int(i) for i in ids]
        metrics["fastfair-coefficients"] = [float(c) for c in coef]
        metrics["fastfair-coef-min"] = float(coef.min())
        metrics["fastfair-coef-max"] = float(coef.max())
        metrics["fastfair-coef-sum"] = float(coef.sum())
        metrics["fastfair-dropped"] = int(dropped)
        self.last_round = {"client_ids": ids, "coefficients": coef,
                           "node_ids": np.array([r.node_id for r in usable], dtype=np.uint64)}
        return record, metrics

    # ------------------------------------------------------------------ helpers
    def _needs_losses(self) -> bool:
        return bool(_inner(self.aggregator).needs_losses)

    def _read_reply(self, msg: Message) -> Optional[_Reply]:
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
        keys, sent = self._sent
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
        count = _finite_number(metrics.get(self.weighted_by_key))
        if count is None or count < 0:
            drop(f"metric '{self.weighted_by_key}' (example count) is missing, negative or not "
                 "a finite number")
            return None
        loss = _finite_number(metrics.get(self.loss_key))
        if loss is None and self._needs_losses():
            drop(f"metric '{self.loss_key}' (loss of the received model) is missing or not a "
                 f"finite number; {type(_inner(self.aggregator)).__name__} needs it")
            return None
        inputs = {}
        for name, key in self.round_input_keys.items():
            value = _finite_number(metrics.get(key))
            if value is None:
                drop(f"metric '{key}' ({name}) is missing or not a finite number")
                return None
            inputs[name] = value
        client = None
        if self.client_id_key is not None:
            raw = metrics.get(self.client_id_key)
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != int(raw) \
                    or not 0 <= raw < self.aggregator.num_clients:
                drop(f"metric '{self.client_id_key}' (client id) must be an integer in "
                     f"[0, {self.aggregator.num_clients}); got {raw!r}")
                return None
            client = int(raw)
        return _Reply(node, arrays, count, loss, inputs, content, client)

    def _client_ids(self, usable: List[_Reply]) -> Tuple[np.ndarray, Dict[int, int]]:
        """Client ids of the replies, and the node numbers this round would add (committed
        only once the rule accepts the round)."""
        if self.client_id_key is not None:
            return np.array([r.client for r in usable], dtype=np.int64), {}
        new: Dict[int, int] = {}
        ids = []
        for r in usable:
            idx = self._node_index.get(r.node_id, new.get(r.node_id))
            if idx is None:
                idx = len(self._node_index) + len(new)
                if idx >= self.aggregator.num_clients:
                    raise AggregationError(
                        f"more than num_clients = {self.aggregator.num_clients} distinct nodes "
                        "replied: build the aggregator with num_clients >= the number of nodes, "
                        "or pass client_id_key")
                new[r.node_id] = idx
            ids.append(idx)
        return np.array(ids, dtype=np.int64), new

    def _computed_inputs(self, sent: List[np.ndarray], usable: List[_Reply]) -> Dict[str, Any]:
        """Rule inputs computed from the models: q-FedAvg's squared update norms, FedMGDA's
        updates ``w - w_i``."""
        rule = _inner(self.aggregator)
        if isinstance(rule, agg.QFedAvg) and rule.form == "qffl":
            return {"sq_norms": np.array([_sq_distance(sent, r.arrays) for r in usable])}
        if isinstance(rule, agg.FedMGDA):
            return {"updates": [[g - a for g, a in zip(sent, r.arrays)] for r in usable]}
        return {}

    def _optimizer_step(self, sent: List[np.ndarray], local: List[List[np.ndarray]],
                        coef: np.ndarray) -> List[np.ndarray]:
        """Server optimiser: float arrays take its step on the combined pseudo-gradient; integer
        arrays (counters) are averaged as by a plain rule."""
        opt = self.aggregator
        floats = [k for k, a in enumerate(sent) if str(a.dtype) in _FLOAT_DTYPES]
        others = [k for k in range(len(sent)) if k not in floats]
        new: List[Optional[np.ndarray]] = [None] * len(sent)
        grad = pseudo_gradient([sent[k] for k in floats], [[a[k] for k in floats] for a in local],
                               coef)
        params = [sent[k].copy() for k in floats]
        opt.aggregate([grad], [1.0], base=params)
        for k, p in zip(floats, params):
            new[k] = p
        if others:
            rest = aggregate_arrays([sent[k] for k in others],
                                    [[a[k] for k in others] for a in local], coef)
            for k, p in zip(others, rest):
                new[k] = p
        return new

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Checkpoint of the strategy: the aggregator's versioned state_dict (server optimiser
        buffers included) and the node-to-client numbering. Pickle it, or save it with
        ``torch.save``; restore with :meth:`load_state_dict`."""
        nodes = sorted(self._node_index, key=self._node_index.get)
        return {"format_version": FORMAT_VERSION, "aggregator": self.aggregator.state_dict(),
                "node_ids": [int(n) for n in nodes]}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict` (the aggregator's own checks apply: same rule, population
        and configuration); on a mismatch raises and changes nothing."""
        if not isinstance(state_dict, dict) or set(state_dict) != {"format_version",
                                                                   "aggregator", "node_ids"}:
            raise ValueError("state_dict must come from FastFairStrategy.state_dict()")
        if state_dict["format_version"] != FORMAT_VERSION:
            raise ValueError(f"state_dict has format_version {state_dict['format_version']!r}; "
                             f"this fastfair reads {FORMAT_VERSION}")
        nodes = [int(n) for n in state_dict["node_ids"]]
        if len(set(nodes)) != len(nodes) or len(nodes) > self.aggregator.num_clients:
            raise ValueError("state_dict['node_ids'] must be distinct and at most num_clients")
        self.aggregator.load_state_dict(state_dict["aggregator"])
        self._node_index = {n: i for i, n in enumerate(nodes)}
