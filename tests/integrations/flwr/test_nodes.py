"""Numbering Flower nodes as clients: in order of first reply, at most K, committed only when a
round commits, and read back from a checkpoint."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("flwr")

from fastfair.aggregators.base import FORMAT_VERSION  # noqa: E402
from fastfair.integrations.flwr.nodes import NodeNumbering, checked_node_ids  # noqa: E402


def _replies(*nodes):
    return [SimpleNamespace(node_id=n) for n in nodes]


def test_nodes_are_numbered_in_order_of_first_reply_once_committed():
    numbering = NodeNumbering(num_clients=3)
    usable = numbering.drop_unnumbered(_replies(70, 50, 70))
    ids, new = numbering.client_ids(usable)
    np.testing.assert_array_equal(ids, [0, 1, 0])
    assert new == {70: 0, 50: 1} and numbering.node_ids() == []  # not yet committed
    numbering.commit(new)
    ids, new = numbering.client_ids(_replies(50, 90))
    np.testing.assert_array_equal(ids, [1, 2])
    assert new == {90: 2} and numbering.node_ids() == [70, 50]


def test_nodes_beyond_num_clients_are_dropped_with_a_log_line(caplog):
    numbering = NodeNumbering(num_clients=2)
    numbering.commit({7: 0})
    with caplog.at_level(logging.WARNING):
        kept = numbering.drop_unnumbered(_replies(8, 9, 7))
    assert [r.node_id for r in kept] == [8, 7]
    assert "dropping the reply of node 9" in caplog.text and "num_clients = 2" in caplog.text


def test_a_checkpoints_node_ids_are_checked_then_restored():
    numbering = NodeNumbering(num_clients=3)
    state = {"format_version": FORMAT_VERSION, "rule": {}, "optimizer": {}, "node_ids": [40, 10]}
    numbering.restore(checked_node_ids(state, numbering.num_clients))
    assert numbering.node_ids() == [40, 10]
    with pytest.raises(ValueError, match="distinct"):
        checked_node_ids({**state, "node_ids": [1, 1]}, 3)
    with pytest.raises(ValueError, match=r"node_ids'\] must be a list .* True at position 0"):
        checked_node_ids({**state, "node_ids": [True]}, 3)
