"""Rounds of one aggregator from several threads: every round either commits or raises; none is
lost (the round counter equals the commits), and a round proposed before another committed is
refused without changing the state."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fastfair.aggregators import registry


@pytest.mark.parametrize("rule", ["aaggff-d", "fedmaba", "afl", "fedavg"])
def test_concurrent_rounds_are_committed_or_refused_never_lost(rule):
    agg = registry.build(rule, 1000)
    barrier = threading.Barrier(8)
    done, refused = [], []

    def work(seed):
        rng = np.random.default_rng(seed)
        barrier.wait()
        for _ in range(40):
            ids = rng.choice(1000, 20, replace=False)
            try:
                agg.weights(ids, rng.uniform(0.1, 2.0, 20), num_samples=np.full(20, 10.0))
                done.append(1)
            except RuntimeError as exc:
                assert "one round at a time" in str(exc)
                refused.append(1)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(done) + len(refused) == 320
    assert agg.round == len(done)


def test_a_stale_round_is_refused_and_changes_nothing():
    agg = registry.build("aaggff-d", 10)
    ids, losses = np.arange(3), np.array([1.0, 2.0, 3.0])
    _, stale = agg.propose(ids, losses)
    agg.weights(ids, losses)
    before = agg.state_dict()
    with pytest.raises(RuntimeError, match="one round at a time"):
        stale()
    after = agg.state_dict()
    assert after["state"]["round"] == before["state"]["round"] == 1
    for key, value in before["state"].items():
        np.testing.assert_array_equal(after["state"][key], value)
    _, stale = agg.propose(ids, losses)
    agg.load_state_dict(before)  # loading a state also makes a proposed round stale
    with pytest.raises(RuntimeError, match="one round at a time"):
        stale()
