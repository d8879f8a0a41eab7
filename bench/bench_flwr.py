"""Aggregation inside a Flower strategy: fastfair's strategy against Flower's own FedAvg and
QFedAvg on the same replies (100 clients x a ResNet-18-like model, 11.5M float32 parameters).

Run: ``python -m pytest bench/bench_flwr.py -q -s`` (needs ``fastfair[flower]``; builds 4.5 GB of
replies). Each figure is one ``aggregate_train`` call on replies already received: reading the
client arrays, the rule's coefficients, the server step and serialising the new global model.
"""

from __future__ import annotations

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("flwr")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg  # noqa: E402
from flwr.serverapp.strategy import QFedAvg as FlowerQFedAvg  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from bench.bench_weighted_average import list_shapes  # noqa: E402
from bench.conftest import sizes  # noqa: E402
from fastfair import aggregators as agg  # noqa: E402
from fastfair.integrations.flwr import RECEIVED_LOSS_KEY, FastFairStrategy  # noqa: E402

N_CLIENTS = sizes(100, 4)
CLIENT_LR = 0.1  # q-FedAvg's L = 1 / client lr, on both sides


class _Grid:
    def __init__(self, nodes):
        self.nodes = nodes

    def get_node_ids(self):
        return self.nodes


@pytest.fixture(scope="module")
def round_data():
    """The global model, 100 replies (arrays near it, count, loss of the global model) and the
    Array objects of each reply (Flower's QFedAvg pops them out of the replies it reads)."""
    rng = np.random.default_rng(0)
    shapes = list_shapes()
    global_arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    keys = [f"p{k}" for k in range(len(shapes))]
    replies, stored = [], []
    for node in range(N_CLIENTS):
        arrays = {k: Array(g + np.float32(0.01) * rng.standard_normal(g.shape, dtype=np.float32))
                  for k, g in zip(keys, global_arrays)}
        loss = float(rng.uniform(0.5, 2.5))  # of the global model: fastfair's key and Flower's
        metrics = MetricRecord({"num-examples": int(rng.integers(10, 1000)),
                                RECEIVED_LOSS_KEY: loss, "train_loss": loss})
        meta = Metadata(run_id=1, message_id="", src_node_id=node, dst_node_id=0,
                        reply_to_message_id="", group_id="", created_at=0.0, ttl=60.0,
                        message_type=MessageType.TRAIN)
        replies.append(Message(content=RecordDict({"arrays": ArrayRecord(arrays),
                                                   "metrics": metrics}), metadata=meta))
        stored.append(arrays)
    total = sum(int(np.prod(s)) for s in shapes)
    return ArrayRecord(dict(zip(keys, (Array(g) for g in global_arrays)))), replies, stored, total


def _restore(replies, stored):
    for msg, arrays in zip(replies, stored):
        record = msg.content["arrays"]
        for k, a in arrays.items():
            record[k] = a


# impl -> (strategy factory, the kind of server step it computes: the case it is timed in).
STRATEGIES = {
    "fastfair FedAvg": (lambda: FastFairStrategy(agg.FedAvg(N_CLIENTS)), "weighted average"),
    "fastfair FedMABA": (lambda: FastFairStrategy(agg.FedMABA(N_CLIENTS)), "weighted average"),
    "fastfair AAggFF-D": (lambda: FastFairStrategy(agg.AAggFFD(N_CLIENTS)), "weighted average"),
    "fastfair q-FedAvg": (lambda: FastFairStrategy(
        agg.QFedAvg(N_CLIENTS, q=0.1, lipschitz=1.0 / CLIENT_LR)), "q-FedAvg"),
    "flwr FedAvg": (lambda: FlowerFedAvg(), "weighted average"),
    "flwr QFedAvg": (lambda: FlowerQFedAvg(client_learning_rate=CLIENT_LR, q=0.1), "q-FedAvg"),
}
REFERENCES = ("flwr FedAvg", "flwr QFedAvg")  # Flower's own strategy for each kind


@pytest.mark.parametrize("impl", list(STRATEGIES))
def test_aggregate_train(benchmark, floor_report, round_data, impl, monkeypatch):
    global_record, replies, stored, total = round_data
    for attr, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
        monkeypatch.setattr(TaskIdentity, attr, value)  # set by Flower in a real ServerApp
    factory, kind = STRATEGIES[impl]
    strategy = factory()
    grid = _Grid(list(range(N_CLIENTS)))

    def setup():
        # Flower's QFedAvg pops the arrays out of the model sent and of the replies it reads.
        _restore(replies, stored)
        strategy.configure_train(1, global_record, ConfigRecord(), grid)
        return (1, replies), {}

    result = {}

    def run(server_round, msgs):
        result["out"] = strategy.aggregate_train(server_round, msgs)

    benchmark.pedantic(run, setup=setup, rounds=3, warmup_rounds=1)
    arrays, _ = result["out"]
    assert arrays is not None and len(arrays) == len(stored[0])
    floor_report.add(f"aggregate_train {kind} {N_CLIENTS} x {total / 1e6:.1f}M params", impl,
                     benchmark.stats.stats.min, (N_CLIENTS + 1) * total * 4,
                     reference=impl in REFERENCES)
