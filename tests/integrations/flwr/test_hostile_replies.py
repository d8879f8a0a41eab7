"""At the Flower strategy every field of a reply is untrusted (a bad reply is dropped
with a log line naming the node and the field, never a raw ValueError/OverflowError), a round
commits entirely or not at all (rule, optimiser, node numbering and round counter), the opt-in
bound (update-norm clip, sample-count cap), and a fuzz test of the round."""

import copy
import logging
import os
import re

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("flwr")

from flwr.app import MetricRecord  # noqa: E402
from flwr.serverapp.exception import AggregationError  # noqa: E402

from fastfair import aggregators as agg  # noqa: E402
from fastfair.integrations.flwr import RECEIVED_LOSS_KEY, FastFairStrategy  # noqa: E402
from tests.integrations.flwr.test_strategy import (  # noqa: E402,F401
    SHAPES,
    K,
    assert_state_equal,
    configure,
    model,
    reply,
    server_identity,
)


@pytest.fixture
def flwr_log(caplog):
    """The text Flower's logger writes during the test."""
    logger = logging.getLogger("flwr")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="flwr")
    yield caplog
    logger.removeHandler(caplog.handler)


def honest(rng, params, nodes, **extra):
    """Replies near ``params`` with a count, the loss before training and a partition id."""
    out = []
    for node in nodes:
        metrics = {"num-examples": int(rng.integers(5, 50)),
                   RECEIVED_LOSS_KEY: float(rng.uniform(0.2, 3.0)), "partition-id": node % K,
                   **extra}
        local = [(p + 0.1 * rng.standard_normal(p.shape)).astype(p.dtype) for p in params]
        out.append(reply(node, local, metrics))
    return out


def snapshot(strategy):
    return copy.deepcopy(strategy.state_dict()), strategy.aggregator.round


def assert_unchanged(strategy, before):
    sd, rnd = before
    assert_state_equal(strategy.state_dict(), sd)
    assert strategy.aggregator.round == rnd


def new_arrays(record):
    return [record[k].numpy() for k in record.keys()]


# --------------------------------------------------------------------------- class 1

@pytest.mark.parametrize("rule", ["fedavg", "fedmaba"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_reply_with_non_finite_arrays_is_dropped(rule, bad, flwr_log):
    rng = np.random.default_rng(0)
    strategy = FastFairStrategy(agg.FedAvg(K) if rule == "fedavg" else agg.FedMABA(K))
    params = model(rng)
    configure(strategy, params, range(K))
    poisoned = [p.copy() for p in params]
    poisoned[1][2] = bad
    replies = honest(rng, params, range(4)) + [
        reply(7, poisoned, {"num-examples": 10, RECEIVED_LOSS_KEY: 1.0})]
    record, metrics = strategy.aggregate_train(1, replies)
    assert metrics["fastfair-dropped"] == 1
    assert 7 not in strategy.last_round["node_ids"].tolist()
    assert all(np.isfinite(a).all() for a in new_arrays(record))
    assert "dropping the reply of node 7: array '1' holds NaN or inf" in flwr_log.text


@pytest.mark.parametrize("opt", [None, "fedadam"])
@pytest.mark.parametrize("clip", [None, 3.0])
def test_a_non_finite_reply_of_coefficient_zero_is_dropped_too(opt, clip, flwr_log):
    # Without a clip the arrays are checked through the step (NaN * 0 is NaN): a reply whose
    # coefficient is 0 is found as well, and the round is taken again without it.
    rng = np.random.default_rng(11)
    strategy = FastFairStrategy(agg.FedAvg(K), max_update_norm=clip,
                                server_optimizer=agg.FedAdam(lr=0.1) if opt else None)
    params = model(rng)
    configure(strategy, params, range(K))
    poisoned = [p.copy() for p in params]
    poisoned[0][1, 1] = np.nan
    replies = honest(rng, params, range(3)) + [reply(7, poisoned, {"num-examples": 0})]
    rule = copy.deepcopy(strategy.aggregator)
    record, metrics = strategy.aggregate_train(1, replies)
    assert metrics["fastfair-dropped"] == 1 and strategy.last_round["node_ids"].tolist() == [
        0, 1, 2]
    assert all(np.isfinite(a).all() for a in new_arrays(record))
    assert strategy.aggregator.round == rule.round + 1 and strategy.server_optimizer.steps == 1
    assert "dropping the reply of node 7: array '0' holds NaN or inf (first at flat index 5)" \
        in flwr_log.text


BAD_COUNTS = [-1, 2.5, float("nan"), float("inf"), 10 ** 400, [3, 4], 1e308 * 10]


@pytest.mark.parametrize("edit", [
    lambda b: b.replace(b"'descr': '<f4'", b"'descr': '<f4"),     # an unterminated string
    lambda b: b.replace(b"'shape': (6, 4)", b"'shape': (6, 4"),   # unclosed: TokenError
    lambda b: b.replace(b"(6, 4)", b"(6, 5)"),                    # more data than the bytes
    lambda b: b.replace(b"(6, 4)", b"(2**62, 4)"),                # a size that wraps int64
    lambda b: b.replace(b"'<f4'", b"'|O'"),                       # Python objects
    lambda b: b[:6] + b"\x03\x00" + b[8:],                        # format 3.0, unparseable
    lambda b: b"\x93NUMPX" + b[6:],                               # not .npy at all
    lambda b: b[:40],                                             # truncated header
], ids=["quote", "bracket", "short", "wrap", "object", "v3", "magic", "truncated"])
def test_a_reply_with_unreadable_array_bytes_is_dropped(edit, flwr_log):
    # Before: a header NumPy's parser chokes on raised tokenize.TokenError out of the round,
    # which ends Flower's run.
    rng = np.random.default_rng(8)
    strategy = FastFairStrategy(agg.FedAvg(K))
    params = model(rng)
    configure(strategy, params, range(K))
    replies = honest(rng, params, range(3))
    record = next(iter(replies[1].content.array_records.values()))
    key = list(record.keys())[0]
    record[key].data = edit(bytes(record[key].data))
    out, metrics = strategy.aggregate_train(1, replies)
    assert out is not None and metrics["fastfair-dropped"] == 1
    assert "dropping the reply of node 1: unreadable array" in flwr_log.text


@pytest.mark.parametrize("count", BAD_COUNTS, ids=lambda v: repr(v)[:12])
def test_a_bad_example_count_is_dropped_with_a_log_line(count, flwr_log):
    rng = np.random.default_rng(1)
    strategy = FastFairStrategy(agg.FedAvg(K))
    params = model(rng)
    configure(strategy, params, range(K))
    replies = honest(rng, params, range(3)) + [reply(8, params, {"num-examples": count})]
    record, metrics = strategy.aggregate_train(1, replies)
    assert record is not None and metrics["fastfair-dropped"] == 1
    assert "dropping the reply of node 8: metric 'num-examples'" in flwr_log.text


BAD_IDS = [float("nan"), float("inf"), -1, K, 2.5, 10 ** 400, [1], 2 ** 64]


@pytest.mark.parametrize("client_id", BAD_IDS, ids=lambda v: repr(v)[:12])
def test_a_bad_client_id_is_dropped_with_a_log_line(client_id, flwr_log):
    rng = np.random.default_rng(2)
    strategy = FastFairStrategy(agg.FedMABA(K), client_id_key="partition-id")
    params = model(rng)
    configure(strategy, params, range(K))
    replies = honest(rng, params, range(3)) + [
        reply(8, params, {"num-examples": 3, RECEIVED_LOSS_KEY: 1.0, "partition-id": client_id})]
    record, metrics = strategy.aggregate_train(1, replies)
    assert record is not None and metrics["fastfair-dropped"] == 1
    assert "dropping the reply of node 8: metric 'partition-id' (client id)" in flwr_log.text


@pytest.mark.parametrize("loss", [10 ** 400, [1.0, 2.0], float("-inf")], ids=lambda v: repr(v)[:12])
def test_a_bad_loss_is_dropped_with_a_log_line(loss, flwr_log):
    rng = np.random.default_rng(3)
    strategy = FastFairStrategy(agg.AAggFFD(K))
    params = model(rng)
    configure(strategy, params, range(K))
    replies = honest(rng, params, range(3)) + [
        reply(8, params, {"num-examples": 3, RECEIVED_LOSS_KEY: loss})]
    record, metrics = strategy.aggregate_train(1, replies)
    assert record is not None and metrics["fastfair-dropped"] == 1
    assert f"dropping the reply of node 8: metric '{RECEIVED_LOSS_KEY}'" in flwr_log.text


@pytest.mark.parametrize("rule,loss,why", [
    (lambda: agg.QFedAvg(K, q=1.0), -1.0, "must be non-negative (q-FedAvg takes F^q)"),
    (lambda: agg.QFedAvg(K, q=0.5), 0.0, "must be positive when 0 < q < 1"),
    (lambda: agg.AAggFFD(K), -0.5, "must be non-negative (AAggFF divides"),
    (lambda: agg.PropFair(K, M=5.0, weighting="eg"), 5.0, "must be below M = 5.0"),
    # A finite loss whose product with the rule's factor overflows (before: the round was
    # refused, or FedMABA's projection broke on NaN scores).
    (lambda: agg.TERM(K, tilt=50.0), 1e300, "is too large: tilt * loss = 5e+301 is beyond"),
    (lambda: agg.AFL(K, step_size=10.0), 1e308, "is too large: step_size * loss = inf"),
    (lambda: agg.FedMABA(K, step_size=10.0), 1e308, "is too large: step_size * loss = inf"),
    (lambda: agg.QFedAvg(K, q=5.0), 1e100, "is too large: L * loss ** q = inf"),
])
def test_a_loss_the_rule_cannot_take_drops_that_reply_not_the_run(rule, loss, why, flwr_log):
    # Before: the rule refused the whole round (AggregationError), which stops Flower's run:
    # one client could end it. The rule's per-client check (invalid_loss) now drops the reply.
    rng = np.random.default_rng(12)
    strategy = FastFairStrategy(rule())
    params = model(rng)
    configure(strategy, params, range(K))
    replies = honest(rng, params, range(3)) + [
        reply(8, params, {"num-examples": 3, RECEIVED_LOSS_KEY: loss})]
    record, metrics = strategy.aggregate_train(1, replies)
    assert record is not None and metrics["fastfair-dropped"] == 1
    assert f"dropping the reply of node 8: metric '{RECEIVED_LOSS_KEY}' = {loss!r} {why}" \
        in flwr_log.text


def test_nodes_beyond_num_clients_are_dropped_not_the_run(flwr_log):
    # Before: one node more than num_clients raised AggregationError, which ends Flower's run.
    rng = np.random.default_rng(5)
    strategy = FastFairStrategy(agg.FedAvg(4))
    params = model(rng)
    configure(strategy, params, range(4))
    strategy.aggregate_train(1, honest(rng, params, [0, 1, 2]))
    record, metrics = strategy.aggregate_train(2, honest(rng, params, [7, 1, 8, 9]))
    assert record is not None and metrics["fastfair-dropped"] == 2
    assert strategy.state_dict()["node_ids"] == [0, 1, 2, 7]
    assert strategy.last_round["client_ids"].tolist() == [3, 1]
    assert "dropping the reply of node 8: 4 distinct nodes are numbered already, num_clients " \
           "= 4; build the aggregator with num_clients >= the number of nodes" in flwr_log.text
    before = snapshot(strategy)  # only new nodes: not aggregated, nothing changed
    assert strategy.aggregate_train(3, honest(rng, params, [11, 12])) == (None, None)
    assert_unchanged(strategy, before)


@pytest.mark.parametrize("node_ids,shown", [
    ([0, float("nan")], "nan at position 1"), ([0, 1.5], "1.5 at position 1"),
    ([True], "True at position 0"), ([-1], "-1 at position 0"), ([2 ** 64], "at position 0"),
    (["3"], "'3' at position 0"), ([None], "None at position 0"), ("01", "str"),
    (None, "NoneType")])
def test_a_state_with_bad_node_ids_is_refused_naming_the_entry(node_ids, shown):
    # Before: int(n) raised a raw ValueError/TypeError, or took 1.5 and True as nodes 1.
    rng = np.random.default_rng(6)
    trained = FastFairStrategy(agg.FedAvg(K))
    params = model(rng)
    configure(trained, params, range(K))
    trained.aggregate_train(1, honest(rng, params, [5, 6]))
    strategy = FastFairStrategy(agg.FedAvg(K))
    before = snapshot(strategy)
    with pytest.raises(ValueError, match=r"state_dict\['node_ids'\] must be a list of Flower "
                                         rf"node ids .*got .*{re.escape(shown)}"):
        strategy.load_state_dict(dict(trained.state_dict(), node_ids=node_ids))
    assert_unchanged(strategy, before)
    strategy.load_state_dict(dict(trained.state_dict(), node_ids=(np.uint64(2 ** 64 - 1), 0)))
    assert strategy.state_dict()["node_ids"] == [2 ** 64 - 1, 0]


def test_replies_that_claim_the_same_client_id_are_dropped(flwr_log):
    rng = np.random.default_rng(4)
    strategy = FastFairStrategy(agg.FedMABA(K), client_id_key="partition-id")
    params = model(rng)
    configure(strategy, params, range(K))
    replies = honest(rng, params, range(4))
    replies += [reply(20, params, {"num-examples": 3, RECEIVED_LOSS_KEY: 1.0,
                                   "partition-id": 2})]  # node 2's id
    record, metrics = strategy.aggregate_train(1, replies)
    assert record is not None and metrics["fastfair-dropped"] == 2
    assert sorted(strategy.last_round["client_ids"].tolist()) == [0, 1, 3]
    assert "client id 2 is claimed by 2 replies" in flwr_log.text


def test_metric_values_of_any_python_type_are_read_safely(flwr_log):
    # A MetricRecord decoded from the wire holds int/float/lists only, but nothing outside the
    # strategy guarantees it: a string where a number belongs is a bad reply, not a crash.
    rng = np.random.default_rng(5)
    strategy = FastFairStrategy(agg.FedMABA(K), client_id_key="partition-id")
    params = model(rng)
    configure(strategy, params, range(K))
    bad = reply(8, params, {"num-examples": 3, RECEIVED_LOSS_KEY: 1.0, "partition-id": 8})
    record = next(iter(bad.content.metric_records.values()))
    record._data["num-examples"] = "3"  # bypasses MetricRecord's type check
    replies = honest(rng, params, range(3)) + [bad]
    _, metrics = strategy.aggregate_train(1, replies)
    assert metrics["fastfair-dropped"] == 1
    assert "dropping the reply of node 8: metric 'num-examples'" in flwr_log.text


# --------------------------------------------------------------------------- class 2

@pytest.mark.parametrize("name", ["fedavg", "fairavg", "fedmaba", "fedadam"])
def test_a_round_where_every_count_is_zero_changes_nothing(name, flwr_log):
    rng = np.random.default_rng(6)
    rule = {"fedavg": agg.FedAvg, "fairavg": agg.FairAvg}.get(name, agg.FedMABA)(K)
    opt = agg.FedAdam(lr=0.1) if name == "fedadam" else None
    strategy = FastFairStrategy(rule, server_optimizer=opt)
    params = model(rng)
    configure(strategy, params, range(K))
    strategy.aggregate_train(1, honest(rng, params, range(3)))  # numbers nodes 0..2
    before = snapshot(strategy)
    replies = honest(rng, params, range(6), **{"num-examples": 0})
    assert strategy.aggregate_train(2, replies) == (None, None)
    assert_unchanged(strategy, before)  # rule, optimiser, node numbering, round counter
    assert "round 2 is not aggregated: every usable reply reports 'num-examples' 0" \
        in flwr_log.text


@pytest.mark.parametrize("name", ["fedmaba", "fedadam"])
@pytest.mark.parametrize("values", [(1.0, [1.0, 2.0]), ([1.0, 2.0], [1.0]), ([1.0], 2)],
                         ids=["number-list", "lengths", "list-number"])
def test_inconsistent_metrics_do_not_break_the_round(name, values, flwr_log):
    rng = np.random.default_rng(7)
    opt = agg.FedAdam(lr=0.1) if name == "fedadam" else None
    strategy = FastFairStrategy(agg.FedMABA(K), server_optimizer=opt)
    params = model(rng)
    configure(strategy, params, range(K))
    replies = honest(rng, params, range(2))
    for msg, value in zip(replies, values):
        next(iter(msg.content.metric_records.values()))["accuracy"] = value
    rule = copy.deepcopy(strategy.aggregator)
    record, metrics = strategy.aggregate_train(1, replies)
    assert record is not None and "accuracy" not in metrics
    assert RECEIVED_LOSS_KEY in metrics  # consistent keys are still averaged
    assert strategy.aggregator.round == rule.round + 1
    assert "metric 'accuracy' is left out of the averaged metrics" in flwr_log.text


def test_a_failing_metrics_function_leaves_the_round_uncommitted(flwr_log):
    def broken(records, key):
        raise TypeError("boom")

    rng = np.random.default_rng(8)
    strategy = FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.1),
                                train_metrics_aggr_fn=broken)
    params = model(rng)
    configure(strategy, params, range(K))
    before = snapshot(strategy)
    assert strategy.aggregate_train(1, honest(rng, params, range(4))) == (None, None)
    assert_unchanged(strategy, before)
    assert "train_metrics_aggr_fn raised TypeError: boom" in flwr_log.text


def test_evaluate_metrics_with_zero_counts_do_not_divide_by_zero():
    strategy = FastFairStrategy(agg.FedAvg(K))
    replies = [reply(n, [], {"num-examples": 0, "accuracy": 0.5}) for n in range(3)]
    for msg in replies:
        del msg.content["arrays"]
    metrics = strategy.aggregate_evaluate(1, replies)
    assert metrics["accuracy"] == pytest.approx(0.5)


def test_inconsistent_evaluate_replies_do_not_raise(flwr_log):
    strategy = FastFairStrategy(agg.FedAvg(K))
    replies = [reply(0, [], {"num-examples": 3, "accuracy": 0.5}),
               reply(1, [], {"accuracy": [0.5, 0.1]}),  # no count, a list: Flower's raises
               reply(2, [], {"num-examples": 1, "accuracy": 0.9})]
    for msg in replies:
        del msg.content["arrays"]
    del replies[2].content["metrics"]  # no MetricRecord at all
    metrics = strategy.aggregate_evaluate(1, replies)
    assert "accuracy" not in metrics
    assert "leaving out the reply of node 2" in flwr_log.text
    assert "metric 'accuracy' is left out of the averaged metrics" in flwr_log.text


def test_a_step_that_overflows_is_refused_and_changes_nothing(flwr_log):
    # Finite replies whose combined update overflows float32: FedAdam's step would write inf
    # into the model and its moments; the round is refused before anything is committed.
    strategy = FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.1))
    params = [np.full(s, -3e38, np.float32) for s in SHAPES]
    configure(strategy, params, range(K))
    before = snapshot(strategy)
    far = [np.full(s, 3e38, np.float32) for s in SHAPES]
    replies = [reply(n, far, {"num-examples": 3, RECEIVED_LOSS_KEY: 1.0}) for n in range(3)]
    assert strategy.aggregate_train(1, replies) == (None, None)
    assert_unchanged(strategy, before)
    assert "round 1 is not aggregated" in flwr_log.text and "not finite" in flwr_log.text


def test_a_rule_that_rejects_the_round_commits_nothing():
    # A rejection of the whole round (no single reply is at fault) comes through
    # propose/commit before anything of the strategy is committed.
    strategy = FastFairStrategy(agg.QFedAvg(K, q=0.5, form="eg"),
                                server_optimizer=agg.FedAvgM())
    params = model(np.random.default_rng(9))
    configure(strategy, params, range(K))
    before = snapshot(strategy)
    with pytest.raises(AggregationError, match="losses .* are all zero"):
        strategy.aggregate_train(1, [reply(n, params, {"num-examples": 3,
                                                       RECEIVED_LOSS_KEY: 0.0})
                                     for n in range(2)])
    assert_unchanged(strategy, before)


def test_rounds_from_two_threads_each_commit_whole():
    # The server optimiser steps only when its round commits, and the rounds are taken one at
    # a time: every round returns a model, and the optimiser's steps equal the rule's rounds.
    import sys
    import threading

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        strategy = FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.1))
        params = model(np.random.default_rng(0))
        configure(strategy, params, range(K))
        errors, results = [], []

        def rounds(seed):
            rng = np.random.default_rng(seed)
            for r in range(20):
                try:
                    results.append(strategy.aggregate_train(r + 1, honest(rng, params, range(4))))
                except Exception as exc:  # noqa: BLE001 - collected and reported below
                    errors.append(exc)

        threads = [threading.Thread(target=rounds, args=(s,)) for s in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert all(record is not None for record, _ in results) and len(results) == 40
    assert strategy.aggregator.round == strategy.server_optimizer.steps == 40


def test_a_rule_changed_behind_the_strategys_back_is_an_aggregation_error(monkeypatch):
    # The rule's commit refuses when its state changed after the proposal: the round raises
    # AggregationError (not the rule's RuntimeError) and neither the rule nor the optimiser
    # has moved.
    rng = np.random.default_rng(3)
    strategy = FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.1))
    params = model(rng)
    configure(strategy, params, range(K))
    strategy.aggregate_train(1, honest(rng, params, range(4)))
    before = snapshot(strategy)
    rule = strategy.aggregator
    propose = rule.propose

    def propose_then_reload(*args, **kwargs):
        proposed = propose(*args, **kwargs)
        rule.load_state_dict(rule.state_dict())  # another caller's change
        return proposed

    monkeypatch.setattr(rule, "propose", propose_then_reload)
    with pytest.raises(AggregationError, match="could not commit round 2"):
        strategy.aggregate_train(2, honest(rng, params, range(4)))
    assert_unchanged(strategy, before)
    assert strategy.server_optimizer.steps == 1


# --------------------------------------------------------------------------- the bound

def test_bound_options_are_checked_by_the_strategy():
    with pytest.raises(ValueError, match="max_update_norm"):
        FastFairStrategy(agg.FedAvg(K), max_update_norm=-1.0)
    with pytest.raises(ValueError, match="update_norm_reference"):
        FastFairStrategy(agg.FedAvg(K), max_update_norm=1.0, update_norm_reference="mean")
    with pytest.raises(ValueError, match="max_samples_per_client"):
        FastFairStrategy(agg.FedAvg(K), max_samples_per_client=0)


@pytest.mark.parametrize("name", ["fedavg", "fairavg", "fedprox", "fedmaba", "aaggff-d",
                                  "aaggff-s", "term", "afl", "propfair", "qfedavg", "fedmgda"])
def test_the_strategy_bounds_a_poisoned_reply_as_the_shared_functions_do(name):
    # Every rule of the docs' table but Fed-CVaR-Avg (its thresholds come from its clients).
    from tests.aggregators.test_bounds import BOUND, poison

    updates, losses, counts = poison.poisoned_round()
    strategy = FastFairStrategy(agg.registry.build(name, K), client_id_key="partition-id",
                                max_update_norm=BOUND.max_update_norm)
    sent = [np.zeros(100)]  # float64: the step is compared with the float64 functions
    configure(strategy, sent, range(K))
    replies = [reply(n, [sent[0] - updates[n]], {"num-examples": float(counts[n]),
                                                 RECEIVED_LOSS_KEY: float(losses[n]),
                                                 "partition-id": n}) for n in range(K)]
    record, metrics = strategy.aggregate_train(1, replies)
    step = sent[0] - new_arrays(record)[0]
    expected, _ = poison.bounded_step(name, updates, losses, counts, BOUND)
    assert np.allclose(step, expected, rtol=1e-9, atol=1e-12)
    assert metrics["fastfair-clipped"] >= 1
    free = FastFairStrategy(agg.registry.build(name, K), client_id_key="partition-id")
    configure(free, sent, range(K))
    unbounded = sent[0] - new_arrays(free.aggregate_train(1, replies)[0])[0]
    assert np.linalg.norm(step) < np.linalg.norm(unbounded) or name == "fedmgda"


def test_the_count_cap_takes_a_huge_claim_off_fedavgs_weight_in_flower():
    rng = np.random.default_rng(10)
    params = model(rng)
    replies = honest(rng, params, range(4))
    replies.append(reply(9, params, {"num-examples": 1e308}))
    for cap, share in ((None, 1.0), (100, None)):
        strategy = FastFairStrategy(agg.FedAvg(K), max_samples_per_client=cap)
        configure(strategy, params, range(K))
        strategy.aggregate_train(1, replies)
        coef = strategy.last_round["coefficients"]
        if share is not None:
            assert coef[-1] == share  # without the cap one reply takes all the weight
        else:
            assert coef[-1] < 0.8 and coef[:-1].sum() > 0.2


# --------------------------------------------------------------------------- fuzz

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

FUZZ_RULES = {"fedavg": lambda: agg.FedAvg(K), "fedmaba": lambda: agg.FedMABA(K),
              "qfedavg": lambda: agg.QFedAvg(K, q=5.0), "aaggff-d": lambda: agg.AAggFFD(K),
              "fedmgda": lambda: agg.FedMGDA(K), "afl": lambda: agg.AFL(K),
              "term": lambda: agg.TERM(K, tilt=10.0), "fairavg": lambda: agg.FairAvg(K),
              "propfair-eg": lambda: agg.PropFair(K, weighting="eg", M=4.0),
              "aaggff-s": lambda: agg.AAggFFS(K)}
BOUNDS = [{}, {"max_update_norm": 3.0}, {"max_samples_per_client": 30},
          {"max_update_norm": 0.5, "update_norm_reference": "absolute",
           "max_samples_per_client": 1e300}]
ODD_NUMBERS = [0, -1, 2.5, float("nan"), float("inf"), -float("inf"), 10 ** 400, 1e308, 1e300,
               -1e308, 2 ** 64, [1.0], [1.0, 2.0], "3", True, None]

reply_spec = st.fixed_dictionaries({  # each field usable about two times in three
    "array": st.sampled_from(["ok"] * 5 + ["nan", "inf", "huge", "tiny", "shape"]),
    "count": st.one_of(st.integers(1, 50), st.integers(1, 50), st.sampled_from(ODD_NUMBERS)),
    "loss": st.one_of(st.floats(0.0, 3.0), st.floats(0.0, 3.0), st.sampled_from(ODD_NUMBERS)),
    "client": st.one_of(st.integers(0, K - 1), st.integers(0, K - 1),
                        st.sampled_from(ODD_NUMBERS + [K])),
    "extra": st.sampled_from([None, 1.0, [1.0, 2.0], [3.0], float("nan")]),
    # one byte of the first array's .npy header (128 bytes) overwritten: (position, value)
    "garble": st.one_of(st.none(), st.none(), st.tuples(st.integers(0, 127),
                                                         st.integers(0, 255))),
})


def fuzz_reply(node, spec, params):
    local = [(p + 0.1).astype(p.dtype) for p in params]
    kind = spec["array"]
    if kind == "nan":
        local[0][0, 0] = np.nan
    elif kind == "inf":
        local[1][0] = -np.inf
    elif kind == "huge":
        local = [np.full(p.shape, 3e38, p.dtype) for p in params]
    elif kind == "tiny":
        local = [np.full(p.shape, 1e-45, p.dtype) for p in params]
    elif kind == "shape":
        local = [np.zeros((2, 2), np.float32), local[1]]
    metrics = {}
    for key, value in (("num-examples", spec["count"]), (RECEIVED_LOSS_KEY, spec["loss"]),
                       ("partition-id", spec["client"]), ("accuracy", spec["extra"])):
        if value is None:  # the metric is missing
            continue
        try:
            metrics[key] = value
            MetricRecord({key: value})
        except Exception:  # a type MetricRecord refuses: put in behind its back
            del metrics[key]
            metrics.setdefault("_raw", {})[key] = value
    raw = metrics.pop("_raw", {})
    msg = reply(node, local, metrics)
    record = next(iter(msg.content.metric_records.values()))
    record._data.update(raw)
    if spec["garble"] is not None:
        arrays = next(iter(msg.content.array_records.values()))
        first = arrays[list(arrays.keys())[0]]
        data = bytearray(first.data)
        data[spec["garble"][0]] = spec["garble"][1]
        first.data = bytes(data)
    return msg


@pytest.mark.parametrize("rule", sorted(FUZZ_RULES))
@hypothesis.settings(max_examples=25, derandomize=True, deadline=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(optimizer=st.sampled_from(["sgd", "fedadam"]),
                  bound=st.sampled_from(range(len(BOUNDS))),
                  by_client=st.booleans(),
                  specs=st.lists(reply_spec, min_size=1, max_size=8))
def test_fuzz_a_round_commits_entirely_or_not_at_all(rule, optimizer, bound, by_client, specs):
    rng = np.random.default_rng(0)
    strategy = FastFairStrategy(FUZZ_RULES[rule](),
                                server_optimizer=agg.FedAdam(lr=0.1) if optimizer == "fedadam"
                                else None, client_id_key="partition-id" if by_client else None,
                                **BOUNDS[bound])
    params = model(rng)
    configure(strategy, params, range(K))
    # A state to keep; AAggFF-S takes all K clients every round, the others leave node numbers
    # free for the fuzzed replies' nodes.
    first = range(K) if rule == "aaggff-s" else range(3)
    record, _ = strategy.aggregate_train(1, honest(rng, params, first))
    params = new_arrays(record)
    configure(strategy, params, range(K))
    before = snapshot(strategy)
    steps = strategy.server_optimizer.steps
    replies = [fuzz_reply(10 + n, spec, params) for n, spec in enumerate(specs)]
    try:
        record, metrics = strategy.aggregate_train(2, replies)
    except AggregationError:  # the rule rejected the round: nothing changed
        hypothesis.event(f"rejected by the rule {rule}")
        assert_unchanged(strategy, before)
        return
    if record is None:
        hypothesis.event(f"not aggregated {rule}")
        assert metrics is None
        assert_unchanged(strategy, before)
    else:
        hypothesis.event(f"committed {rule}")
        # Committed entirely: the rule's round, the optimiser's step, the numbering of every
        # node used, and a finite model, optimiser state and coefficients.
        assert strategy.aggregator.round == before[1] + 1
        assert strategy.server_optimizer.steps == steps + 1
        used = strategy.last_round["node_ids"].tolist()
        if not by_client:
            assert set(used) <= set(strategy.state_dict()["node_ids"])
        assert all(np.isfinite(a).all() for a in new_arrays(record))
        assert np.isfinite(strategy.last_round["coefficients"]).all()
        assert all(np.isfinite(b).all() for bufs in strategy.server_optimizer.state.values()
                   if bufs is not None for b in bufs)
        assert metrics["fastfair-dropped"] == len(replies) - len(used)
        # No reply whose arrays hold NaN or inf or have the wrong shape is ever used.
        assert not {10 + n for n, spec in enumerate(specs)
                    if spec["array"] in ("nan", "inf", "shape") and spec["garble"] is None
                    } & set(used)
        params = new_arrays(record)
    # Whatever happened, the strategy goes on: an honest round commits.
    configure(strategy, params, range(K))
    record, _ = strategy.aggregate_train(3, honest(rng, params, first))
    assert record is not None and all(np.isfinite(a).all() for a in new_arrays(record))
