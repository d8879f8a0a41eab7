"""Selection policies on live replies: the first to reply, within the deadline, ties by node;
and the strategy aggregating only the kept replies."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Message, MessageType, Metadata  # noqa: E402

from fastfair.aggregators import FedAvg  # noqa: E402
from fastfair.integrations.flwr import FastFairStrategy  # noqa: E402
from fastfair.integrations.flwr.selection import ReplySelection, select_replies  # noqa: E402
from tests.integrations.flwr.test_strategy import (  # noqa: E402
    K,
    client_replies,
    configure,
    model,
    server_identity,  # noqa: F401  (autouse: the ServerApp's ids, as the strategy tests set)
)


def _at(msg: Message, created: float) -> Message:
    m = msg.metadata
    return Message(content=msg.content, metadata=Metadata(
        run_id=m.run_id, message_id="", src_node_id=m.src_node_id, dst_node_id=0,
        reply_to_message_id="", group_id="", created_at=created, ttl=60.0,
        message_type=MessageType.TRAIN))


def test_first_replies_within_the_deadline_are_kept():
    rng = np.random.default_rng(0)
    sent = model(rng)
    replies = [_at(r, t) for r, t in zip(client_replies(rng, FedAvg(K), sent, range(5), 1),
                                         (103.0, 101.0, 109.0, 101.0, 104.0))]
    kept, late = select_replies(replies, 100.0, 2, None)
    assert [m.metadata.src_node_id for m in kept] == [1, 3]  # ties by node id
    assert len(late) == 3
    kept, late = select_replies(replies, 100.0, None, 4.0)
    assert sorted(m.metadata.src_node_id for m in kept) == [0, 1, 3, 4]
    kept, _ = select_replies(replies, 100.0, 3, 3.5)
    assert [m.metadata.src_node_id for m in kept] == [1, 3, 0]
    assert select_replies(replies, 100.0, None, None) == (replies, [])


def test_the_strategy_aggregates_only_the_kept_replies(monkeypatch):
    rng = np.random.default_rng(1)
    strategy = FastFairStrategy(FedAvg(K), keep_first=2, min_train_nodes=4,
                                min_available_nodes=4)
    params = model(rng)
    monkeypatch.setattr("time.time", lambda: 1000.0)
    configure(strategy, params, range(6))
    replies = [_at(r, 1000.0 + t) for r, t in zip(client_replies(rng, FedAvg(K), params,
                                                                 range(4), 1),
                                                  (5.0, 2.0, 9.0, 1.0))]
    _, metrics = strategy.aggregate_train(1, replies)
    assert sorted(int(n) for n in strategy.last_round["node_ids"]) == [1, 3]
    assert metrics["fastfair-dropped"] == 2


@pytest.mark.parametrize("kwargs, match", [(dict(keep_first=0), "keep_first"),
                                           (dict(deadline=-1.0), "deadline")])
def test_policies_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FastFairStrategy(FedAvg(K), **kwargs)


def test_a_selection_keeps_the_replies_of_the_round_it_started(monkeypatch):
    rng = np.random.default_rng(2)
    replies = [_at(r, t) for r, t in zip(client_replies(rng, FedAvg(K), model(rng), range(3), 1),
                                         (506.0, 501.0, 503.0))]
    selection = ReplySelection(keep_first=None, deadline=4.0)
    monkeypatch.setattr("time.time", lambda: 500.0)
    selection.start()
    kept, late = selection.select(replies)
    assert [m.metadata.src_node_id for m in kept] == [1, 2]
    assert [m.metadata.src_node_id for m in late] == [0]
    monkeypatch.setattr("time.time", lambda: 503.0)
    selection.start()  # a later round: its deadline counts from its own start
    assert [m.metadata.src_node_id for m in selection.select(replies)[0]] == [1, 2, 0]
    with pytest.raises(ValueError, match="keep_first"):
        ReplySelection(keep_first=True)
