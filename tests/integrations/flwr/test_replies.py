"""The reply reader on its own: built from the rule, the objective, the bound and the metric
keys alone, it reads a round's replies against the model sent and the node numbering it is
given, and the strategy that owns it (and its copies) reads through it."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

pytest.importorskip("flwr")

from fastfair import aggregators as agg  # noqa: E402
from fastfair.aggregators.bounds import UpdateBound  # noqa: E402
from fastfair.integrations.flwr import (  # noqa: E402
    RECEIVED_LOSS_KEY,
    THRESHOLD_KEY,
    ClientObjective,
    FastFairStrategy,
)
from fastfair.integrations.flwr.nodes import NodeNumbering  # noqa: E402
from fastfair.integrations.flwr.replies import ReplyReader  # noqa: E402
from tests.integrations.flwr.test_strategy import (  # noqa: E402
    K,
    model,
    play_round,
    reply,
    server_identity,  # noqa: F401  (autouse: the ServerApp's ids, as the strategy tests set)
)


def _reader(rule, bound=None, **keys):
    return ReplyReader(rule, None, bound or UpdateBound(), weighted_by_key="num-examples",
                       loss_key=keys.get("loss_key", RECEIVED_LOSS_KEY),
                       client_id_key=keys.get("client_id_key"),
                       round_input_keys=keys.get("round_input_keys"))


def test_a_reader_checks_replies_against_the_model_and_numbering_it_is_given():
    sent = model(np.random.default_rng(0))
    near = [a + 1.0 for a in sent]
    reader = _reader(agg.QFedAvg(K, q=1.0))
    assert reader.computed == ["sq_norms"] and reader.measures
    numbering = NodeNumbering(K)
    usable = reader.read(1, [reply(4, near, {"num-examples": 5, RECEIVED_LOSS_KEY: 1.0}),
                             reply(6, near, {"num-examples": -1, RECEIVED_LOSS_KEY: 1.0}),
                             reply(8, near[:1], {"num-examples": 5, RECEIVED_LOSS_KEY: 1.0})],
                         (["0", "1"], sent), numbering)
    assert [r.node_id for r in usable] == [4]  # a negative count, a missing array: dropped
    ids, new = reader.client_ids(usable, numbering)
    assert ids.tolist() == [0] and new == {4: 0}
    inputs, scales = reader.round_inputs(sent, usable)
    assert scales is None
    np.testing.assert_allclose(inputs["sq_norms"], [sum(a.size for a in sent)], rtol=1e-6)


def test_a_reader_with_a_clip_measures_and_scales_each_reply():
    sent = model(np.random.default_rng(1))
    reader = _reader(agg.FedAvg(K), UpdateBound(1.0, "absolute"), client_id_key="id")
    assert reader.computed == [] and reader.measures
    far = [a + 2.0 for a in sent]  # update norm 2 sqrt(size) > 1
    usable = reader.read(1, [reply(3, far, {"num-examples": 5, "id": 7})], (["0", "1"], sent),
                         NodeNumbering(K))
    assert reader.client_ids(usable, NodeNumbering(K))[0].tolist() == [7]
    _, scales = reader.round_inputs(sent, usable)
    np.testing.assert_allclose(scales, [1.0 / (2.0 * np.sqrt(sum(a.size for a in sent)))],
                               rtol=1e-6)


def test_a_round_input_no_reply_provides_is_refused_by_name():
    rule = agg.FedCVaRAvg(K)
    assert _reader(rule).round_input_keys == {"thresholds": THRESHOLD_KEY}  # its objective's
    with pytest.raises(ValueError, match="thresholds.*round_input_keys"):
        ReplyReader(rule, ClientObjective(), UpdateBound(), weighted_by_key="num-examples",
                    loss_key=RECEIVED_LOSS_KEY, client_id_key=None)  # the plain loss: none


def test_a_pickled_strategy_reads_through_parts_that_share_its_rule():
    strategy = FastFairStrategy(agg.FedMABA(K), keep_first=3)
    play_round(strategy, np.random.default_rng(2))
    copy = pickle.loads(pickle.dumps(strategy))
    assert copy.replies.aggregator is copy.aggregator and copy.keep_first == 3
    assert copy._lock is not strategy._lock
    _, _, want = play_round(strategy, np.random.default_rng(3))
    _, _, got = play_round(copy, np.random.default_rng(3))
    for k in want.keys():
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())
