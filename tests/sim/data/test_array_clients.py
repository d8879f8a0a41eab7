"""A data set given to a run sets its number of clients: ``config.clients`` left at its default
is taken from the data set (``SimulationConfig.with_clients_of``), by a simulation, an
experiment and a sweep alike; a ``clients`` set to another number is still refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastfair.sim import ArrayDataset, Experiment, Simulation, SimulationConfig, Sweep

#: clients left at its default (100); the data set has 6.
CONFIG = SimulationConfig(per_round=3, rounds=2, eval_every=1)


def _six_clients() -> ArrayDataset:
    rng = np.random.default_rng(0)
    return ArrayDataset([(rng.random((10, 1, 3, 3)).astype(np.float32), rng.integers(0, 3, 10))
                         for _ in range(6)], num_classes=3)


def test_with_clients_of_takes_the_data_sets_clients_unless_set():
    data = _six_clients()
    assert CONFIG.with_clients_of(data).clients == 6
    assert CONFIG.with_clients_of(None) is CONFIG
    mine = SimulationConfig(clients=9, per_round=3)
    assert mine.with_clients_of(data) is mine               # the runner refuses it
    with pytest.raises(ValueError, match=r"the data set given has 6 clients, fewer than "
                       r"per_round \(10\): set per_round \(--per-round\) to at most 6"):
        SimulationConfig().with_clients_of(data)


def test_a_simulation_takes_its_clients_from_the_data_set():
    sim = Simulation(CONFIG, dataset=_six_clients())
    assert sim.config.clients == 6
    assert sim.step()["participants"] == 3
    with pytest.raises(ValueError, match="config.clients is 9 but the dataset has 6 clients"):
        Simulation(SimulationConfig(clients=9, per_round=3), dataset=_six_clients())


def test_an_experiment_takes_its_clients_from_the_data_set(tmp_path):
    result = Experiment(CONFIG, ["fedavg", "qfedavg"], dataset=_six_clients(),
                        out=tmp_path / "run").run()
    assert set(result.finals) == {"fedavg", "qfedavg"}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["clients"] == 6


def test_a_sweep_takes_its_clients_from_the_data_set():
    sweep = Sweep(CONFIG, ["fedavg"], seeds=[0, 1], dataset=_six_clients())
    assert sweep.base.clients == 6
    result = sweep.run()
    assert len(result.runs) == 2
