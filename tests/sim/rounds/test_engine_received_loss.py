"""The received model's loss in the engine's rounds: computed only where the rule weighs by losses
or the configuration asks for the record's ``train_loss``, in one pass a round."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair.sim import ArrayDataset, ModuleModel, Simulation, SimulationConfig
from fastfair.sim.rounds import engine


def _run(rule, monkeypatch, **config):
    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(20, 4)), rng.integers(0, 3, 20)) for _ in range(6)]
    passes = []
    real = engine.evaluate_clients

    def counted(model, params, batch, chunk=None, accuracy=True):
        passes.append((params.shape, accuracy))
        return real(model, params, batch, chunk, accuracy)

    monkeypatch.setattr(engine, "evaluate_clients", counted)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    sim = Simulation(SimulationConfig(rule=rule, clients=6, per_round=3, rounds=2, eval_every=5,
                                      **config),
                     dataset=ArrayDataset(clients, num_classes=3), model=ModuleModel(net))
    records = [sim.step(), sim.step()]
    return records, [p for p in passes if not p[1]]  # the round passes, not evaluation


def test_fedavg_rounds_run_no_loss_pass(monkeypatch):
    records, passes = _run("fedavg", monkeypatch)
    assert passes == [] and all("train_loss" not in r for r in records)
    records, passes = _run("fedavg", monkeypatch, train_loss=True)
    assert len(passes) == 2 and all(np.isfinite(r["train_loss"]) for r in records)


@pytest.mark.parametrize("rule", ["qfedavg", "afl"])
def test_rules_that_weigh_by_losses_get_them_from_one_inference_pass_a_round(rule, monkeypatch):
    records, passes = _run(rule, monkeypatch)
    assert [p[0] for p in passes] == [torch.Size([1, 67])] * 2  # one pass, the one model
    assert all(np.isfinite(r["train_loss"]) for r in records)
