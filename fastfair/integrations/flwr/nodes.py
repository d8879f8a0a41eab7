"""The numbering of Flower nodes as clients ``0, 1, ...`` in order of first reply, for replies
that carry no client id of their own: a :class:`NodeNumbering` that
:class:`~fastfair.integrations.flwr.strategy.FastFairStrategy` owns and checkpoints
(``node_ids`` in its ``state_dict``), and :func:`checked_node_ids`, which reads them back."""

from __future__ import annotations

from logging import WARNING
from typing import Any, Dict, List, Protocol, Sequence, Set, Tuple, TypeVar

import numpy as np
from flwr.supercore import log

from fastfair.aggregators.base import FORMAT_VERSION


class _FromNode(Protocol):
    node_id: int


Reply = TypeVar("Reply", bound=_FromNode)


class NodeNumbering:
    """Client ids of Flower nodes in order of first reply, at most ``num_clients`` K of them.

    A round asks for its ids (:meth:`client_ids`) before it knows it will commit; the numbers
    it adds are committed (:meth:`commit`) only once the rule accepts the round."""

    def __init__(self, num_clients: int) -> None:
        self.num_clients = num_clients
        self._index: Dict[int, int] = {}

    def node_ids(self) -> List[int]:
        """The numbered node ids, client id 0 first (a checkpoint's ``node_ids``)."""
        return [int(n) for n in sorted(self._index, key=self._index.__getitem__)]

    def restore(self, node_ids: Sequence[int]) -> None:
        """Numbers ``node_ids`` (from :func:`checked_node_ids`) ``0, 1, ...`` in order."""
        self._index = {n: i for i, n in enumerate(node_ids)}

    def commit(self, new: Dict[int, int]) -> None:
        """Adds the numbers ``{node id: client id}`` a committed round gave new nodes."""
        self._index.update(new)

    def drop_unnumbered(self, usable: List[Reply]) -> List[Reply]:
        """The replies less those of new nodes beyond the ``num_clients`` K that the node
        numbering can take, each dropped with a log line that says how to fix it: one node too
        many must not end the run."""
        room = self.num_clients - len(self._index)
        kept: List[Reply] = []
        new: Set[int] = set()
        for r in usable:
            known = r.node_id in self._index or r.node_id in new
            if known or len(new) < room:
                if not known:
                    new.add(r.node_id)
                kept.append(r)
            else:
                log(WARNING, "aggregate_train: dropping the reply of node %d: %d distinct nodes "
                    "are numbered already, num_clients = %d; build the aggregator with "
                    "num_clients >= the number of nodes, or pass client_id_key", r.node_id,
                    len(self._index) + len(new), self.num_clients)
        return kept

    def client_ids(self, usable: List[Reply]) -> Tuple[np.ndarray, Dict[int, int]]:
        """``[n]`` client ids of the replies :meth:`drop_unnumbered` kept, and the numbers
        ``{node id: client id}`` they would add (for :meth:`commit`)."""
        new: Dict[int, int] = {}
        ids = []
        for r in usable:
            idx = self._index.get(r.node_id, new.get(r.node_id))
            if idx is None:  # at most num_clients in all (drop_unnumbered)
                idx = len(self._index) + len(new)
                new[r.node_id] = idx
            ids.append(idx)
        return np.array(ids, dtype=np.int64), new


def checked_node_ids(state_dict: Any, num_clients: int) -> List[int]:
    """The node ids of a :meth:`FastFairStrategy.state_dict` (its header checked: its keys and
    format version) as a list of ints; anything but a list of at most ``num_clients`` distinct
    Flower node ids (integers in ``[0, 2**64)``, not bools) is refused naming the entry."""
    if not isinstance(state_dict, dict) or set(state_dict) != {"format_version", "rule",
                                                               "optimizer", "node_ids"}:
        raise ValueError("state_dict must come from FastFairStrategy.state_dict()")
    # Version 3 changed only the rule's per-client vectors, which the rule's load upgrades.
    if state_dict["format_version"] not in (2, FORMAT_VERSION):
        raise ValueError(f"state_dict has format_version {state_dict['format_version']!r}; "
                         f"this fastfair reads versions 2 and {FORMAT_VERSION}")
    nodes = state_dict["node_ids"]
    bad = [] if not isinstance(nodes, (list, tuple)) else [
        i for i, n in enumerate(nodes) if isinstance(n, (bool, np.bool_))
        or not isinstance(n, (int, np.integer)) or not 0 <= n < 2 ** 64]
    if not isinstance(nodes, (list, tuple)) or bad:
        raise ValueError("state_dict['node_ids'] must be a list of Flower node ids "
                         "(integers in [0, 2**64)); got " + (f"{nodes[bad[0]]!r} at "
                         f"position {bad[0]}" if bad else type(nodes).__name__))
    ids = [int(n) for n in nodes]
    if len(set(ids)) != len(ids) or len(ids) > num_clients:
        raise ValueError("state_dict['node_ids'] must be distinct and at most num_clients")
    return ids
