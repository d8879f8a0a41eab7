"""The ServerApp: each rule of the run config as a fastfair Flower strategy
(:class:`fastfair.integrations.flwr.FastFairStrategy`) for ``num-server-rounds`` rounds on
every node of the federation, then the final model of each rule evaluated on every client's
held-out data; prints the table."""

from __future__ import annotations

import time
from typing import List

import numpy as np
from flwr.app import ArrayRecord, Context, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp

from fairness_digits.task import (
    RULES,
    client_accuracies,
    new_model,
    partitions,
    quiet_flower,
    setting,
    table,
)
from fastfair.integrations.flwr import FastFairStrategy, average_metrics

#: The reply metric holding the client's id: read by the strategy, never averaged.
CLIENT_ID_KEY = "partition-id"

app = ServerApp()


def train_metrics(records: List[RecordDict], weighted_by_key: str) -> MetricRecord:
    """The replies' metrics averaged by example count (:func:`average_metrics`), less the
    client id: an average of partition ids means nothing."""
    averaged = average_metrics(records, weighted_by_key)
    return MetricRecord({k: v for k, v in averaged.items() if k != CLIENT_ID_KEY})


def rule_names(text: str) -> List[str]:
    """The comma-separated rule names of the run config's ``rules``; ValueError naming the key
    for an unknown or repeated one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in RULES]
    if not names or unknown or len(set(names)) != len(names):
        raise ValueError(f"run config 'rules' must name distinct rules from {', '.join(RULES)}; "
                         f"got {text!r}")
    return names


def num_nodes(grid: Grid, wait: float = 30.0) -> int:
    """The number of nodes of the federation (the clients K), waiting up to ``wait`` seconds
    for them to connect until their count stays the same for a second."""
    deadline, last, stable_since = time.monotonic() + wait, -1, time.monotonic()
    while True:
        count = len(list(grid.get_node_ids()))
        now = time.monotonic()
        if count != last:
            last, stable_since = count, now
        if (count and now - stable_since >= 1.0) or now > deadline:
            return count
        time.sleep(0.2)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Trains every rule of the run config in turn and prints the result table."""
    run = context.run_config
    quiet_flower(setting(run, "verbose", bool))
    names = rule_names(setting(run, "rules", str))
    rounds, per_round = setting(run, "num-server-rounds", int), setting(run, "per-round", int)
    alpha, seed, lr = setting(run, "alpha", float), setting(run, "seed", int), \
        setting(run, "lr", float)
    if rounds < 1:
        raise ValueError(f"run config 'num-server-rounds' must be >= 1; got {rounds}")
    k = num_nodes(grid)
    if not 1 <= per_round <= k:
        raise ValueError(f"run config 'per-round' is {per_round}, but the federation has {k} "
                         "nodes (clients): pass --run-config \"per-round=N\" with N <= "
                         f"{k}, or more nodes with --federation-config \"num-supernodes=K\"")
    parts = partitions(k, alpha, seed)
    rows = []
    for name in names:
        strategy = FastFairStrategy(
            RULES[name](k, lr), client_id_key=CLIENT_ID_KEY, fraction_train=per_round / k,
            min_train_nodes=per_round, min_available_nodes=k, fraction_evaluate=0.0,
            train_metrics_aggr_fn=train_metrics)
        start = time.perf_counter()
        result = strategy.start(grid, ArrayRecord(new_model(seed).state_dict()),
                                num_rounds=rounds)
        model = new_model(seed)
        model.load_state_dict(result.arrays.to_torch_state_dict())
        acc = client_accuracies(model, parts)
        worst10 = np.sort(acc)[:max(1, k // 10)].mean()
        rows.append((name, acc.mean(), acc.min(), worst10, time.perf_counter() - start))
    print(table(rows, k, rounds, per_round), flush=True)
