"""Flower strategies backed by fastfair aggregators: the strategy's server step equals the
rule's and the server optimiser's own on the same replies (synthetic replies, then a real Flower
simulation), the round inputs follow the rules' declarations, failed and incomplete replies are
dropped with a log line, checkpoints continue exactly, and the client config carries each rule's
objective."""

import copy
import logging
import os
import pickle
import subprocess
import sys

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Opt in to Ray's coming default (leave accelerator variables alone when no GPU is asked for),
# which also silences its FutureWarning about the change.
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("flwr")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Error,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.exception import AggregationError  # noqa: E402

from fastfair import aggregators as agg  # noqa: E402
from fastfair.aggregators.objectives import PropFairObjective  # noqa: E402
from fastfair.integrations.flwr import (  # noqa: E402
    RECEIVED_LOSS_KEY,
    THRESHOLD_KEY,
    ClientObjective,
    FastFairStrategy,
    aggregate_arrays,
    array_to_numpy,
    client_config,
    numpy_to_array,
    pseudo_gradient,
)
from tests.helpers import ROOT
from tests.helpers.tolerances import assert_close, assert_rule_close  # noqa: E402

K = 10
SHAPES = [(6, 4), (4,)]


def cases():
    """One (rule, server optimiser or None) per rule family and per kind of optimiser, by name."""
    return {
        "fedavg": lambda: (agg.FedAvg(K), None),
        "fairavg": lambda: (agg.FairAvg(K), None),
        "fedprox": lambda: (agg.FedProx(K, mu=0.5), None),
        "fedmaba": lambda: (agg.FedMABA(K), None),
        "qfedavg": lambda: (agg.QFedAvg(K, q=1.0, lipschitz=2.0), None),
        "term": lambda: (agg.TERM(K, tilt=0.5), None),
        "propfair": lambda: (agg.PropFair(K, M=5.0), None),
        "fedcvar": lambda: (agg.FedCVaRAvg(K, alpha=0.3), None),
        "fedmgda": lambda: (agg.FedMGDA(K, epsilon=0.2), None),
        "fedadam": lambda: (agg.FedMABA(K), agg.FedAdam(lr=0.1)),
        "fedavgm": lambda: (agg.FedAvg(K), agg.FedAvgM(lr=1.0, momentum=0.5)),
        "aaggff-d": lambda: (agg.AAggFFD(K), None),
        "afl": lambda: (agg.AFL(K), None),
    }


def make(name, server_optimizer=None, **options):
    """The strategy of case ``name``; ``server_optimizer`` replaces a case without one."""
    rule, opt = cases()[name]()
    return FastFairStrategy(rule, server_optimizer=opt or server_optimizer, **options)


# --------------------------------------------------------------------------- message helpers

class FakeGrid:
    """The part of a Flower Grid that strategies sample from."""

    def __init__(self, nodes):
        self.nodes = list(nodes)

    def get_node_ids(self):
        return self.nodes


def reply(node, arrays, metrics, keys=None):
    keys = keys or [str(k) for k in range(len(arrays))]
    content = RecordDict({"arrays": ArrayRecord({k: Array(a) for k, a in zip(keys, arrays)}),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, metadata=_metadata(node))


def error_reply(node):
    return Message(error=Error(code=1, reason="client raised"), metadata=_metadata(node))


def _metadata(node):
    return Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0,
                    reply_to_message_id="", group_id="", created_at=0.0, ttl=60.0,
                    message_type=MessageType.TRAIN)


def model(rng, scale=1.0):
    return [(scale * rng.standard_normal(s)).astype(np.float32) for s in SHAPES]


def client_replies(rng, rule, sent, nodes, round_no):
    """Models near ``sent`` with the metrics each rule reads (loss before training, count,
    partition id, CVaR threshold)."""
    out = []
    for node in nodes:
        metrics = {"num-examples": int(rng.integers(5, 50)),
                   RECEIVED_LOSS_KEY: float(rng.uniform(0.2, 3.0)), "partition-id": node % K}
        if "thresholds" in rule.round_inputs:
            metrics[THRESHOLD_KEY] = float(rng.uniform(0.0, 2.0))
        local = [(s + 0.1 * rng.standard_normal(s.shape)).astype(np.float32) for s in sent]
        out.append(reply(node, local, metrics))
    return out


# --------------------------------------------------------------------------- the oracle

def local_models(strategy, replies):
    """The models and metrics of the replies the strategy used, from Flower's own decoding."""
    used = [int(n) for n in strategy.last_round["node_ids"]]
    by_node = {m.metadata.src_node_id: m for m in replies if not m.has_error()}
    records = [by_node[n].content for n in used]
    local = [next(iter(r.array_records.values())).to_numpy_ndarrays() for r in records]
    return local, [next(iter(r.metric_records.values())) for r in records]


def exact_sq_norms(sent, local):
    """The squared update norms from the exact float64 differences."""
    return np.array([sum(float(((g.astype(np.float64) - a) ** 2).sum()) for g, a in zip(sent, w))
                     for w in local])


def reference_step(rule, opt, strategy, sent, replies):
    """The rule's and the optimiser's own round on the replies the strategy used: ``weights``
    with the inputs the rule declares, ``aggregate`` of the pseudo-gradients ``w - w_i``, then
    the optimiser's ``step``."""
    local, metrics = local_models(strategy, replies)
    ids = strategy.last_round["client_ids"]
    losses = np.array([m[RECEIVED_LOSS_KEY] for m in metrics]) if rule.needs_losses else None
    deltas = [[g - a for g, a in zip(sent, w)] for w in local]
    given = {"sq_norms": lambda: exact_sq_norms(sent, local), "updates": lambda: deltas,
             "thresholds": lambda: np.array([m[THRESHOLD_KEY] for m in metrics])}
    inputs = {name: given[name]() for name in rule.round_inputs}
    coef = rule.weights(ids, losses, num_samples=np.array([m["num-examples"] for m in metrics],
                                                         dtype=float), **inputs)
    base = opt.step([g.copy() for g in sent], rule.aggregate(deltas, coef))
    scale = [np.abs(g) + sum(abs(c) * (np.abs(g) + np.abs(w[k])) for c, w in zip(coef, local))
             for k, g in enumerate(sent)]
    return np.asarray(coef), base, scale


def check_round(strategy, sent, replies, server_round=1, aggregate_train=None):
    """Runs one aggregate_train and asserts it equals the reference on the same replies;
    returns the new arrays, the record and the metrics."""
    rule = copy.deepcopy(strategy.aggregator)
    opt = copy.deepcopy(strategy.server_optimizer)
    record, metrics = (aggregate_train or strategy.aggregate_train)(server_round, replies)
    coef, expected, scale = reference_step(rule, opt, strategy, sent, replies)
    if "sq_norms" in rule.round_inputs:
        # The strategy sums the squared float32 differences in float32 (pairwise).
        assert_close(strategy.last_round["coefficients"], coef, "float32")
    else:
        assert_rule_close(strategy.last_round["coefficients"], coef)
    assert np.array_equal(metrics["fastfair-coefficients"], strategy.last_round["coefficients"])
    assert metrics["fastfair-clients"] == [int(i) for i in strategy.last_round["client_ids"]]
    new = [record[k].numpy() for k in record.keys()]
    for a, e, s in zip(new, expected, scale):
        assert a.dtype == e.dtype
        assert_close(a, e, "float32", scale=s)
    # Rule and optimiser states advanced exactly as the reference's.
    assert_state_equal(strategy.aggregator.state_dict(), rule.state_dict())
    assert_state_equal(strategy.server_optimizer.state_dict(), opt.state_dict())
    return new, record, metrics


def assert_state_equal(a, b):
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            if k in ("exp_avg", "exp_avg_sq", "momentum_buffer") and a[k] is not None:
                for x, y in zip(a[k], b[k]):  # buffers follow the float32 server step
                    assert_close(x, y, "float32", scale=np.abs(y) + 1.0)
            else:
                assert_state_equal(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert_rule_close(a, b)
    elif isinstance(a, float) and a != b:  # (equal infinities pass)
        assert_rule_close(np.array(a), np.array(b))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_state_equal(x, y)
    else:
        assert a == b


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """Instruction messages take the run and node ids of the ServerApp process, which Flower
    sets when it starts one; the synthetic rounds here run without it."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
        monkeypatch.setattr(TaskIdentity, attr, value)


def configure(strategy, params, nodes, config=None):
    arrays = ArrayRecord({str(k): Array(p) for k, p in enumerate(params)})
    return list(strategy.configure_train(1, arrays, ConfigRecord(config or {}), FakeGrid(nodes)))


def play_round(strategy, rng, nodes=range(K)):
    """One round on a random model and replies from ``nodes``; returns the model sent, the
    replies and the new global record."""
    params = model(rng)
    configure(strategy, params, range(K))
    replies = client_replies(rng, strategy.aggregator, params, nodes, 0)
    record, _ = strategy.aggregate_train(1, replies)
    return params, replies, record


# --------------------------------------------------------------------------- arrays

@pytest.mark.parametrize("x", [np.arange(12, dtype=np.float32).reshape(3, 4),
                               np.asfortranarray(np.random.default_rng(0).random((3, 5))),
                               np.array(2.5, np.float32), np.zeros((0, 3), np.float16),
                               np.arange(7, dtype=np.int64)])
def test_array_round_trip(x):
    arr = Array(x)
    view = array_to_numpy(arr)
    assert view.shape == x.shape and view.dtype == x.dtype and np.array_equal(view, x)
    if not np.isfortran(x):
        assert not view.flags.owndata and not view.flags.writeable  # read in place
        assert numpy_to_array(x).data == arr.data  # byte-identical to Flower's serialisation
    assert np.array_equal(numpy_to_array(x).numpy(), x)


def test_pure_steps_one_dtype_group_and_integers():
    g = [np.ones(3, np.float32), np.array([11, 20])]
    local = [[np.zeros(3, np.float32), np.array([0, 4])], [np.full(3, 2, np.float32),
                                                          np.array([20, 40])]]
    new = aggregate_arrays(g, local, [0.25, 0.5], lr=1.0)
    assert np.allclose(new[0], 0.25 * 1 + 0.25 * 0 + 0.5 * 2) and new[0].dtype == np.float32
    # 0.25 * [11, 20] + 0.25 * [0, 4] + 0.5 * [20, 40] = [12.75, 26], rounded to the int dtype
    assert new[1].tolist() == [13, 26] and new[1].dtype == g[1].dtype
    grad = pseudo_gradient(g, local, [0.5, 0.5])  # [11, 20] - [10, 22]
    assert np.allclose(grad[0], 0.0) and grad[1].tolist() == [1, -2]


# --------------------------------------------------------------------------- strategy rounds

@pytest.mark.parametrize("name", sorted(cases()))
def test_strategy_equals_aggregator_on_same_replies(name):
    rng = np.random.default_rng(7)
    strategy = make(name, server_optimizer=agg.SGD(lr=0.8), fraction_train=0.6,
                    client_id_key="partition-id")
    rule = strategy.aggregator
    params = model(rng)
    nodes = list(range(100, 100 + K))
    for rnd in range(3):
        messages = configure(strategy, params, nodes)
        assert len(messages) == 6
        config = messages[0].content["config"]
        assert config["fastfair-rule"] == rule.name
        objective = rule.client_objective()
        assert ClientObjective.from_config(config).kind == (
            ClientObjective.kind if objective is None else objective.kind)
        sampled = [m.metadata.dst_node_id for m in messages]
        replies = client_replies(rng, rule, params, sampled, rnd)
        params, _, metrics = check_round(strategy, params, replies, rnd + 1)
        assert metrics["fastfair-dropped"] == 0
        assert RECEIVED_LOSS_KEY in metrics  # Flower's weighted average of client metrics


def test_sgd_step_is_the_fused_pass_bit_for_bit():
    rng = np.random.default_rng(5)
    strategy = FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.SGD(lr=0.7))
    params, replies, record = play_round(strategy, rng)
    local, _ = local_models(strategy, replies)
    expected = aggregate_arrays(params, local, strategy.last_round["coefficients"], lr=0.7)
    for k, e in zip(record.keys(), expected):
        assert np.array_equal(record[k].numpy(), e)
    assert strategy.server_optimizer.steps == 1  # the fused pass counts as the SGD step


@pytest.mark.parametrize("rule,expected", [
    (lambda: agg.QFedAvg(K, q=1.0), {"sq_norms"}),
    (lambda: agg.QFedAvg(K, q=1.0, form="eg"), set()),  # no updates-derived input
    (lambda: agg.FedMGDA(K), {"updates"}),
    (lambda: agg.FedCVaRAvg(K), {"thresholds"}),
    (lambda: agg.FedMABA(K), set()),
])
def test_round_inputs_follow_the_rules_declarations(rule, expected, monkeypatch):
    rule = rule()
    assert set(rule.round_inputs) == expected
    seen = {}
    propose = rule.propose  # the strategy's round: propose, check everything, then commit

    def spy(ids, losses=None, num_samples=None, **inputs):
        seen.update(inputs)
        return propose(ids, losses, num_samples=num_samples, **inputs)

    monkeypatch.setattr(rule, "propose", spy)
    strategy = FastFairStrategy(rule, client_id_key="partition-id")
    params, replies, _ = play_round(strategy, np.random.default_rng(11), range(4))
    assert set(seen) == expected
    local, metrics = local_models(strategy, replies)
    if "sq_norms" in expected:
        assert_close(seen["sq_norms"], exact_sq_norms(params, local), "float32")
    if "updates" in expected:
        for update, w in zip(seen["updates"], local):
            for u, g, a in zip(update, params, w):
                assert np.array_equal(u, g - a)
    if "thresholds" in expected:
        assert seen["thresholds"].tolist() == [m[THRESHOLD_KEY] for m in metrics]


def test_round_input_keys_override_the_objectives_keys():
    strategy = FastFairStrategy(agg.FedCVaRAvg(K), round_input_keys={"thresholds": "t-prime"})
    assert strategy.round_input_keys == {"thresholds": "t-prime"}
    params = model(np.random.default_rng(0))
    configure(strategy, params, range(K))
    _, metrics = strategy.aggregate_train(1, [
        reply(1, params, {"num-examples": 3, "t-prime": 0.5}),
        reply(2, params, {"num-examples": 3, THRESHOLD_KEY: 0.5})])  # dropped: no t-prime
    assert metrics["fastfair-dropped"] == 1
    assert strategy.aggregator.threshold == 0.5


def test_failed_and_incomplete_replies_are_dropped_with_a_log_line(caplog):
    rng = np.random.default_rng(3)
    strategy = FastFairStrategy(agg.FedMABA(K))
    params = model(rng)
    configure(strategy, params, range(K))
    good = client_replies(rng, strategy.aggregator, params, range(5), 0)
    bad_shape = [np.zeros((2, 2), np.float32), params[1]]
    replies = good + [
        error_reply(5),
        reply(6, params, {"num-examples": 3}),                        # no loss
        reply(7, params, {RECEIVED_LOSS_KEY: 1.0}),                   # no count
        reply(8, params, {"num-examples": 3, RECEIVED_LOSS_KEY: float("nan")}),
        reply(9, bad_shape, {"num-examples": 3, RECEIVED_LOSS_KEY: 1.0}),
        reply(10, params, {"num-examples": 3, "train_loss": 1.0}),   # Flower's key, not ours
    ]
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="flwr"):
            _, _, metrics = check_round(strategy, params, replies)
    finally:
        flwr_logger.removeHandler(caplog.handler)
    assert metrics["fastfair-dropped"] == 6
    assert sorted(strategy.last_round["node_ids"].tolist()) == [0, 1, 2, 3, 4]
    text = caplog.text
    loss = f"metric '{RECEIVED_LOSS_KEY}' is missing or not a finite number"
    for node, what in [(6, loss), (7, "metric 'num-examples'"), (8, loss), (9, "array '0'"),
                       (10, loss)]:
        assert f"dropping the reply of node {node}: {what}" in text
    assert "loss of the model it received, on its training data before local training" in text
    assert "Received error in reply from node 5" in text
    # Nodes first seen in a dropped reply were not numbered.
    assert strategy.state_dict()["node_ids"] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("rule", [agg.AAggFFD(K), agg.FedMABA(K), agg.QFedAvg(K),
                                  agg.TERM(K), agg.AFL(K)])
def test_replies_of_an_unchanged_flower_client_are_an_error_that_says_what_to_send(rule):
    # Flower's examples report train_loss, the mean loss during local training: a rule that
    # weighs by the loss of the received model must not take it for that.
    strategy = FastFairStrategy(rule)
    params = model(np.random.default_rng(0))
    configure(strategy, params, range(K))
    sd = strategy.state_dict()
    replies = [reply(n, params, {"num-examples": 3, "train_loss": 0.5}) for n in range(4)]
    with pytest.raises(AggregationError, match=rf"none of the 4 replies of round 1 has metric "
                       rf"'{RECEIVED_LOSS_KEY}'.*'train_loss', the mean loss during training.*"
                       rf"add {{'{RECEIVED_LOSS_KEY}': loss}}"):
        strategy.aggregate_train(1, replies)
    assert_state_equal(strategy.state_dict(), sd)
    # A rule that needs no losses takes the same replies.
    fedavg = FastFairStrategy(agg.FedAvg(K))
    configure(fedavg, params, range(K))
    assert fedavg.aggregate_train(1, replies)[0] is not None


def test_round_without_usable_replies_keeps_the_model():
    strategy = FastFairStrategy(agg.FedAvg(K))
    params = model(np.random.default_rng(0))
    configure(strategy, params, range(K))
    sd = strategy.state_dict()
    assert strategy.aggregate_train(1, [error_reply(1), reply(2, params, {})]) == (None, None)
    assert_state_equal(strategy.state_dict(), sd)


def test_rule_rejection_is_an_aggregation_error_and_changes_nothing():
    # A round the rule refuses as a whole (a single bad loss, e.g. a negative one for q-FedAvg,
    # drops that reply instead: tests/integrations/flwr/test_hostile_replies.py).
    strategy = FastFairStrategy(agg.QFedAvg(K, q=0.5, form="eg"), server_optimizer=agg.FedYogi())
    params = model(np.random.default_rng(0))
    configure(strategy, params, range(K))
    sd = strategy.state_dict()
    with pytest.raises(AggregationError, match="losses .* are all zero"):
        strategy.aggregate_train(1, [reply(1, params, {"num-examples": 3,
                                                       RECEIVED_LOSS_KEY: 0.0})])
    assert_state_equal(strategy.state_dict(), sd)


def test_more_nodes_than_clients_names_the_fix(caplog):
    # The third node's reply is dropped (one node too many must not end Flower's run), with a
    # log line that says how to number them all.
    strategy = FastFairStrategy(agg.FairAvg(2))
    params = model(np.random.default_rng(0))
    configure(strategy, params, range(3))
    logging.getLogger("flwr").addHandler(caplog.handler)
    try:
        _, metrics = strategy.aggregate_train(
            1, [reply(n, params, {"num-examples": 1}) for n in range(3)])
    finally:
        logging.getLogger("flwr").removeHandler(caplog.handler)
    assert metrics["fastfair-dropped"] == 1 and strategy.state_dict()["node_ids"] == [0, 1]
    assert "dropping the reply of node 2" in caplog.text
    assert "build the aggregator with num_clients >= the number of nodes" in caplog.text


class _NeedsScores(agg.FedAvg):
    """A rule with a round input that neither the models nor its objective provide."""

    name = "needs-scores"
    round_inputs = ("scores",)


def test_unsupported_rule_and_arguments():
    with pytest.raises(ValueError, match="expects gradients"):
        FastFairStrategy(agg.FedCVaRAvg(K, form="fedsgd"))
    with pytest.raises(TypeError, match="aggregator must be a fastfair rule"):
        FastFairStrategy("fedavg")
    with pytest.raises(TypeError, match="as server_optimizer="):
        FastFairStrategy(agg.FedAdam(lr=0.1))
    with pytest.raises(TypeError, match="server_optimizer must be"):
        FastFairStrategy(agg.FedAvg(K), server_optimizer="fedadam")
    with pytest.raises(TypeError, match="server_lr"):  # the learning rate is the optimiser's
        FastFairStrategy(agg.FedAvg(K), server_lr=0.5)
    with pytest.raises(ValueError, match="round input.*scores.*round_input_keys"):
        FastFairStrategy(_NeedsScores(K))
    assert FastFairStrategy(_NeedsScores(K), round_input_keys={"scores": "score"}
                            ).round_input_keys == {"scores": "score"}


def test_missing_flower_names_the_extra():
    code = "import sys; sys.modules['flwr'] = None; import fastfair.integrations.flwr"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode != 0
    assert 'needs Flower >= 1.41: pip install "fastfair[flower]"' in done.stderr


@pytest.mark.parametrize("name", ["fedmaba", "fedadam", "fedcvar"])
def test_checkpoint_continues_bit_identically(name):
    def run(strategy, rng, params, rounds):
        for _ in range(rounds):
            sampled = [m.metadata.dst_node_id for m in configure(strategy, params, range(K))]
            replies = client_replies(rng, strategy.aggregator, params, sampled, 0)
            record, _ = strategy.aggregate_train(1, replies)
            params = [record[k].numpy() for k in record.keys()]
        return params

    import random

    random.seed(0)  # Flower samples nodes with the random module
    whole = make(name, fraction_train=0.5)
    p_whole = run(whole, np.random.default_rng(1), model(np.random.default_rng(2)), 4)

    random.seed(0)
    first = make(name, fraction_train=0.5)
    rng = np.random.default_rng(1)
    p_half = run(first, rng, model(np.random.default_rng(2)), 2)
    saved = pickle.dumps(first.state_dict())
    resumed = make(name, fraction_train=0.5)
    resumed.load_state_dict(pickle.loads(saved))
    assert pickle.dumps(resumed.state_dict()) == saved
    p_resumed = run(resumed, rng, p_half, 2)
    for a, b in zip(p_whole, p_resumed):
        assert np.array_equal(a, b)
    assert pickle.dumps(whole.state_dict()) == pickle.dumps(resumed.state_dict())
    sd = whole.state_dict()
    assert sd["rule"]["rule"] == whole.aggregator.name
    assert sd["optimizer"]["optimizer"] == whole.server_optimizer.name
    assert sd["optimizer"]["state"]["steps"] == 4


def test_load_state_dict_is_atomic_across_rule_and_optimizer():
    trained = FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.1))
    play_round(trained, np.random.default_rng(4))
    good = trained.state_dict()

    strategy = FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.1))
    fresh = strategy.state_dict()
    wrong_optimizer = dict(good, optimizer=FastFairStrategy(
        agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.2)).state_dict()["optimizer"])
    wrong_rule = dict(good, rule=FastFairStrategy(agg.TERM(K)).state_dict()["rule"])
    for bad in (wrong_optimizer, wrong_rule, dict(good, node_ids=[1, 1]),
                {"rule": good["rule"], "optimizer": good["optimizer"]}):
        with pytest.raises(ValueError):
            strategy.load_state_dict(bad)
        assert_state_equal(strategy.state_dict(), fresh)
    with pytest.raises(ValueError, match="FastFairStrategy.state_dict"):
        strategy.load_state_dict({"aggregator": good["rule"]})
    strategy.load_state_dict(good)
    assert pickle.dumps(strategy.state_dict()) == pickle.dumps(good)


# --------------------------------------------------------------------------- client side

def test_client_config_carries_the_rules_objective():
    torch = pytest.importorskip("torch")
    loss = torch.tensor(1.5, requires_grad=True)
    params = [torch.ones(3, requires_grad=True)]
    global_params = [torch.zeros(3)]

    def objective(rule):  # through a Flower ConfigRecord, as a ClientApp receives it
        return ClientObjective.from_config(ConfigRecord(client_config(rule)))

    prox = objective(agg.FedProx(K, mu=0.5))
    value = prox(loss, params, global_params)
    assert float(value.detach()) == pytest.approx(1.5 + 0.25 * 3)
    value.backward()
    assert torch.allclose(params[0].grad, torch.full((3,), 0.5))

    prop = objective(agg.PropFair(K, M=5.0, epsilon=0.2, extension="reference_code"))
    assert isinstance(prop, PropFairObjective)
    assert float(prop(loss).detach()) == pytest.approx(-np.log(1 - 1.5 / 5.0))
    assert float(prop(4.9)) == pytest.approx(4.9 / 5.0)  # within epsilon of the pole

    cvar = objective(agg.FedCVaRAvg(K, alpha=0.25, gamma=0.1, threshold=0.75,
                                    lr_threshold_ratio=1.0))
    assert cvar.initial_state() == 0.75 and cvar.state_lr(0.05) == 0.05
    t = torch.tensor(cvar.initial_state(), requires_grad=True)
    expected = 0.9 * 0.75 + 0.9 / 0.25 * 0.75 + 0.1 * 1.5
    assert float(cvar(loss, state=t).detach()) == pytest.approx(expected)
    assert cvar.reply_metrics(0.5) == {THRESHOLD_KEY: 0.5}

    for plain_rule in (agg.FedMABA(K), agg.PropFair(K, weighting="eg")):
        config = client_config(plain_rule)
        assert config == {"fastfair-rule": plain_rule.name}  # no objective is sent
        plain = objective(plain_rule)
        assert type(plain) is ClientObjective
        assert plain(2.0) == 2.0 and plain.reply_metrics() == {}
    with pytest.raises(ValueError, match="global_params"):
        prox(loss)
    with pytest.raises(ValueError, match="fastfair-mu"):
        ClientObjective.from_config({"fastfair-objective": "proximal"})
    with pytest.raises(TypeError, match="fastfair rule"):
        client_config(agg.FedAdam())


def test_cvar_threshold_travels_in_every_rounds_config():
    strategy = FastFairStrategy(agg.FedCVaRAvg(K, alpha=0.3, threshold=0.25))
    params = model(np.random.default_rng(0))
    config = configure(strategy, params, range(K))[0].content["config"]
    assert config["fastfair-objective"] == "cvar" and config[THRESHOLD_KEY] == 0.25
    strategy.aggregate_train(1, [reply(n, params, {"num-examples": 3, THRESHOLD_KEY: float(n)})
                                 for n in (1, 2)])
    config = configure(strategy, params, range(K))[0].content["config"]
    assert config[THRESHOLD_KEY] == 1.5  # the mean of the reported thresholds



def test_an_objective_composes_with_any_rule_through_the_train_config():
    strategy = FastFairStrategy(agg.AAggFFD(K), server_optimizer=agg.FedAdam(),
                                objective="proximal", objective_options={"mu": 0.01})
    config = configure(strategy, model(np.random.default_rng(0)), range(K))[0].content["config"]
    assert (config["fastfair-rule"], config["fastfair-objective"], config["fastfair-mu"]) == (
        "aaggff-d", "proximal", 0.01)
    assert ClientObjective.from_config(config).to_config() == strategy.objective.to_config()
    propfair = FastFairStrategy(agg.FairAvg(K), objective="propfair")
    assert client_config(propfair.aggregator, propfair.objective)["fastfair-M"] == 2.0
    assert client_config(agg.AAggFFD(K)) == {"fastfair-rule": "aaggff-d"}
    with pytest.raises(ValueError, match="objective 'proximal' with rule 'fedcvar': fedcvar's "
                                         "relay form averages the thresholds"):
        FastFairStrategy(agg.FedCVaRAvg(K), objective="proximal")
    with pytest.raises(ValueError, match="objective options need an objective"):
        FastFairStrategy(agg.FedAvg(K), objective_options={"mu": 0.1})


# --------------------------------------------------------------------------- real simulation

SIM_RULES = ["fedavg", "aaggff-d", "fedmaba", "qfedavg", "fedcvar", "fedprox", "propfair",
             "fedadam"]
SIM_RESULTS = {}


def _client_data(partition):
    rng = np.random.default_rng(1000 + partition)
    n = 20 + 5 * partition
    x = rng.standard_normal((n, SHAPES[0][0])).astype(np.float32)
    w = rng.standard_normal(SHAPES[0]).astype(np.float32)
    return x, x @ w + 0.1 * partition


def _client_train(msg, context):
    """A linear least-squares client: reports the loss of the received model before training,
    its example count and partition id, and trains 5 gradient steps (torch autograd) on the
    objective its config describes, with the objective's scalar state when it has one."""
    import torch

    from fastfair.integrations.flwr import ClientObjective

    torch.set_num_threads(1)
    config = msg.content["config"]
    partition = int(context.node_config["partition-id"])
    if config.get("misbehave") and partition == 7 and config["server-round"] == 2:
        raise RuntimeError("client 7 fails in round 2")
    received = [torch.from_numpy(a.numpy()) for a in msg.content["arrays"].values()]
    params = [p.clone().requires_grad_(True) for p in received]
    x, y = (torch.from_numpy(a) for a in _client_data(partition))
    objective = ClientObjective.from_config(config)
    start = objective.initial_state()
    state = None if start is None else torch.tensor(start, requires_grad=True)
    trained = params + ([state] if state is not None else [])

    def mse(weight, bias):
        return ((x @ weight + bias - y) ** 2).mean()

    with torch.no_grad():
        loss_before = float(mse(*received))
    lr = 0.05
    for _ in range(5):
        grads = torch.autograd.grad(objective(mse(*params), params, received, state), trained)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= lr * g
            if state is not None:
                state -= objective.state_lr(lr) * grads[-1]
    metrics = {"num-examples": len(y), "partition-id": partition,
               **objective.reply_metrics(state)}
    if not (config.get("misbehave") and partition == 8):
        metrics[RECEIVED_LOSS_KEY] = loss_before
    content = RecordDict({"arrays": ArrayRecord([p.detach().numpy() for p in params]),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


class RecordingStrategy(FastFairStrategy):
    """Checks every round against the aggregator's own step; failures are recorded, since the
    ServerApp runs in Flower's thread."""

    def configure_train(self, server_round, arrays, config, grid):
        self.sent_now = [a.numpy() for a in arrays.values()]
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        out = {"replies": len(replies)}
        record = metrics = None
        try:
            _, record, metrics = check_round(self, self.sent_now, replies, server_round,
                                             super().aggregate_train)
            out["nodes"] = len(self.last_round["node_ids"])
            out["dropped"] = metrics["fastfair-dropped"]
        except Exception as exc:  # recorded for the test body to report
            out["error"] = repr(exc)
        SIM_RESULTS.setdefault(self.name, []).append(out)
        return record, metrics


def _server_main(grid, context):
    init = [np.zeros(SHAPES[0], np.float32), np.zeros(SHAPES[1], np.float32)]
    for name in SIM_RULES:
        # Flower sizes the cohort from the nodes connected so far, before waiting for
        # min_available_nodes: min_train_nodes keeps the first round's cohort full.
        rule, opt = cases()[name]()
        strategy = RecordingStrategy(rule, server_optimizer=opt, fraction_train=0.6,
                                     fraction_evaluate=0.0, min_train_nodes=6,
                                     min_available_nodes=K, client_id_key="partition-id")
        strategy.name = name
        strategy.start(grid, ArrayRecord(init), num_rounds=3,
                       train_config=ConfigRecord({"misbehave": name == "fedmaba"}))


def test_flower_simulation_per_rule_family():
    pytest.importorskip("torch")  # the clients train with autograd
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    client = ClientApp()
    client.train()(_client_train)
    server = ServerApp()
    server.main()(_server_main)
    SIM_RESULTS.clear()
    run_simulation(server_app=server, client_app=client, num_supernodes=K,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 2, "include_dashboard": False}})
    assert sorted(SIM_RESULTS) == sorted(SIM_RULES)
    for name, rounds in SIM_RESULTS.items():
        assert len(rounds) == 3, name
        for r, out in enumerate(rounds, 1):
            assert "error" not in out, f"{name} round {r}: {out['error']}"
            assert out["replies"] == 6
            if name == "fedmaba":  # client 7 fails in round 2; client 8 never reports its loss
                assert out["nodes"] == out["replies"] - out["dropped"]
            else:
                assert out["nodes"] == 6 and out["dropped"] == 0
    assert sum(out["dropped"] for out in SIM_RESULTS["fedmaba"]) >= 1
