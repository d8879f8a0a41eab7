"""The Flower strategy fair over groups: an OverGroups rule with its group map, or
with the groups the clients report in their ``fastfair-group`` metric; a reply without a valid
group is dropped and the round equals the rule's own on the same replies."""

import numpy as np
import pytest

pytest.importorskip("flwr")

from fastfair import aggregators as agg  # noqa: E402
from fastfair.integrations.flwr import FastFairStrategy  # noqa: E402
from fastfair.integrations.flwr.replies import GROUP_KEY  # noqa: E402
from tests.integrations.flwr.test_strategy import (  # noqa: E402, F401
    K,
    check_round,
    client_replies,
    configure,
    model,
    reply,
    server_identity,
)


def _with_groups(replies, groups):
    """The replies with metric ``fastfair-group`` set to ``groups[node]`` (None: left out)."""
    out = []
    for msg in replies:
        node = msg.metadata.src_node_id
        arrays = next(iter(msg.content.array_records.values())).to_numpy_ndarrays()
        metrics = dict(next(iter(msg.content.metric_records.values())))
        if groups[node] is not None:
            metrics[GROUP_KEY] = groups[node]
        out.append(reply(node, arrays, metrics))
    return out


def test_a_rule_over_a_group_map_equals_its_own_round():
    rng = np.random.default_rng(0)
    rule = agg.OverGroups("aaggff-d", np.arange(K) % 3)
    strategy = FastFairStrategy(rule, client_id_key="partition-id")
    for r in range(3):
        params = model(rng)
        configure(strategy, params, range(K))
        check_round(strategy, params, client_replies(rng, rule, params, range(K), r), r + 1)
    assert strategy.aggregator.rule.round == 3


def test_reported_groups_are_read_from_the_replies_and_bad_ones_dropped(caplog):
    rng = np.random.default_rng(1)
    strategy = FastFairStrategy(agg.OverGroups("afl", agg.ReportedGroups(3), num_clients=K),
                                client_id_key="partition-id")
    params = model(rng)
    configure(strategy, params, range(K))
    groups = [k % 3 for k in range(K)]
    groups[4], groups[7] = None, 5  # no group, and one outside [0, 3)
    replies = _with_groups(client_replies(rng, strategy.aggregator, params, range(K), 0), groups)
    strategy.aggregate_train(1, replies)
    used = [int(i) for i in strategy.last_round["client_ids"]]
    assert 4 not in used and 7 not in used and len(used) == K - 2
    assert "metric 'fastfair-group'" in caplog.text
    # The rule saw each client in its reported group: AFL over groups of the used clients.
    weights = strategy.aggregator.last_group_weights
    assert weights.shape == (3,) and weights.sum() == pytest.approx(1.0)
    coef = np.asarray(strategy.last_round["coefficients"])
    by_group = np.bincount([groups[i] for i in used], weights=coef, minlength=3)
    np.testing.assert_allclose(by_group, weights, rtol=1e-12)
    sd = strategy.state_dict()
    assert sd["rule"]["config"]["map_checksum"] == "reported:3"


def test_reported_groups_map_answers_only_for_the_round():
    groups = agg.ReportedGroups(2)
    groups.report([3, 5], [1, 0])
    assert list(groups(np.array([5, 3]))) == [0, 1]
    with pytest.raises(ValueError, match="client 4 reported no group"):
        groups(np.array([4]))
    over = agg.OverGroups("fedavg", groups, num_clients=10)
    assert over.num_groups == 2
    with pytest.raises(ValueError, match="reported no group"):
        over.weights([1, 2], num_samples=[1, 1])
