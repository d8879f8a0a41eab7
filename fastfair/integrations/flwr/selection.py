"""The simulator's selection policies (:mod:`fastfair.sim.population.selection`) applied to
live replies: keep the first ``keep_first`` to reply (over-selection, when Flower samples more
nodes than that) and only those that replied within ``deadline`` seconds of the round's start.

A live server knows neither a node's speed nor its bandwidth nor when it will be online; it
knows only when each reply was made. A reply's time is its ``metadata.created_at`` (seconds since
the epoch, set where the reply was made, so on the node's clock) less the moment the strategy
configured the round (the server's clock): skew between the two clocks shifts every reply alike
only when the clocks agree, which they need not.
"""

from __future__ import annotations

import math
import time
from typing import List, Optional, Sequence, Tuple

from flwr.app import Message


def check_policy(keep_first: Optional[int], deadline: Optional[float]
                 ) -> Tuple[Optional[int], Optional[float]]:
    """``(keep_first, deadline)``; ValueError naming the argument unless ``keep_first`` is None
    or >= 1 and ``deadline`` None or a positive number of seconds."""
    if keep_first is not None and (isinstance(keep_first, bool) or not isinstance(
            keep_first, int) or keep_first < 1):
        raise ValueError(f"keep_first must be an integer >= 1 or None; got {keep_first!r}")
    if deadline is not None and not (isinstance(deadline, (int, float))
                                     and math.isfinite(deadline) and deadline > 0):
        raise ValueError(f"deadline must be a positive number of seconds or None; got "
                         f"{deadline!r}")
    return keep_first, deadline


def select_replies(replies: Sequence[Message], started: float, keep_first: Optional[int],
                   deadline: Optional[float]) -> Tuple[List[Message], List[Message]]:
    """``(kept, late)``: the replies made within ``deadline`` seconds of ``started`` (a
    ``time.time()``), in order of reply time (ties by node id), the first ``keep_first`` of
    them; ``late`` holds the rest. Without a policy every reply is kept, in its order."""
    if keep_first is None and deadline is None:
        return list(replies), []
    order = sorted(replies, key=lambda m: (m.metadata.created_at, m.metadata.src_node_id))
    limit = math.inf if deadline is None else started + deadline
    on_time = [m for m in order if m.metadata.created_at <= limit]
    kept = on_time if keep_first is None else on_time[:keep_first]
    chosen = {id(m) for m in kept}
    return kept, [m for m in order if id(m) not in chosen]


class ReplySelection:
    """The selection policy a strategy owns: the round's start, stamped by :meth:`start` when
    the strategy configures a round, and the replies :meth:`select` keeps.

    ``keep_first``: aggregate the first ``keep_first`` replies by reply time (over-selection:
    let Flower sample ``ceil(m (1 + f))`` nodes through ``fraction_train`` /
    ``min_train_nodes`` and keep m); ``deadline``: only those made within that many seconds of
    the round's start. None (the default): every reply. Checked by :func:`check_policy`."""

    def __init__(self, keep_first: Optional[int] = None,
                 deadline: Optional[float] = None) -> None:
        self.keep_first, self.deadline = check_policy(keep_first, deadline)
        #: When the round began (``time.time()``), 0.0 before the first round.
        self.started = 0.0

    def start(self) -> None:
        """Stamps the round's start: now."""
        self.started = time.time()

    def select(self, replies: Sequence[Message]) -> Tuple[List[Message], List[Message]]:
        """``(kept, late)``: :func:`select_replies` of the round begun at :meth:`start`."""
        return select_replies(replies, self.started, self.keep_first, self.deadline)
