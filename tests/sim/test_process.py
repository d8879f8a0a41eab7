"""Threads of a simulation: work items one thread each (results in order, errors raised, torch's
thread count restored), and runs whose every number is the same on any thread count."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch import nn

from fastfair.sim import ArrayDataset, ModuleModel, Simulation, SimulationConfig
from fastfair.sim.models.flat import MLP
from fastfair.sim.process import one_thread_each, torch_threads
from fastfair.sim.seeding import CohortKeys
from fastfair.sim.training.lanes import Lane
from fastfair.sim.training.local import train_lanes
from fastfair.sim.training.schedule import LocalTrainingConfig


def test_items_run_one_thread_each_in_order_and_errors_surface():
    seen = []
    together = threading.Barrier(3, timeout=30)  # items 0-2 wait for each other: 3 at once

    def work(i):
        seen.append((threading.get_ident(), torch.get_num_threads()))
        if i < 3:
            together.wait()
        return i * i

    with torch_threads(3):
        assert one_thread_each(work, list(range(7))) == [i * i for i in range(7)]
        assert torch.get_num_threads() == 3
        assert {t for _, t in seen} == {1} and len({i for i, _ in seen}) == 3

        def fail(i):
            if i == 2:
                raise ValueError("item 2")
            return i

        with pytest.raises(ValueError, match="item 2"):
            one_thread_each(fail, range(4))
        assert torch.get_num_threads() == 3


def _run(threads, cohort):
    rng = np.random.default_rng(0)
    clients = []
    for _ in range(6):
        n = int(rng.integers(12, 30))
        clients.append((rng.random((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, n)))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Dropout(0.2), nn.Linear(4 * 4 * 4, 3))
    config = SimulationConfig(rule="qfedavg", clients=6, per_round=4, rounds=3, eval_every=3,
                              batch_size=5, lr=0.1)
    with torch_threads(threads):
        sim = Simulation(config, dataset=ArrayDataset(clients, num_classes=3),
                         model=ModuleModel(net, cohort=cohort))
        records = [sim.step() for _ in range(3)]
    return sim.params, [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.mark.parametrize("cohort", ["alone", "vmap"])
def test_a_run_is_the_same_to_the_bit_on_any_thread_count(cohort):
    params, records = _run(1, cohort)
    for threads in (2, 3):
        other_params, other_records = _run(threads, cohort)
        assert torch.equal(params, other_params)
        assert other_records == records  # losses, q-FedAvg's weights, evaluation metrics
    assert "train_loss" in records[0] and "acc_mean" in records[-1]


def test_vmap_chunks_train_concurrently_with_the_same_bits():
    rng = np.random.default_rng(1)
    counts = rng.integers(5, 40, 9)
    n = int(counts.sum())
    batch = type("B", (), dict(x=torch.from_numpy(rng.random((n, 12)).astype(np.float32)),
                              y=torch.from_numpy(rng.integers(0, 4, n)),
                              offsets=np.concatenate([[0], np.cumsum(counts)]), counts=counts))
    model = MLP(12, 4, hidden=16)
    lane = Lane(model.init(torch.Generator().manual_seed(3)), np.arange(9))
    keys = CohortKeys.of(4, np.arange(9), torch.device("cpu"))
    config = LocalTrainingConfig(epochs=2, batch_size=8, lr=0.1)
    runs = []
    for threads in (1, 2, 3):
        with torch_threads(threads):
            (updates, _), = train_lanes(model, batch, keys, [lane], config, chunk=2)
        runs.append(updates)
    assert all(torch.equal(runs[0], r) for r in runs[1:]) and runs[0].abs().sum() > 0
