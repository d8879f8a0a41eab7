"""Large dense layers stepped inside their weight gradient's product (alone training): close to
the gradient-then-update step, the same bits on any threads and in any company, and the plain
step wherever the fused one would be wrong (an objective, autocast, a layer called twice)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fastfair.aggregators.objectives import ProximalObjective
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.models.zoo import Dense
from fastfair.sim.process import torch_threads
from fastfair.sim.seeding import CohortKeys
from fastfair.sim.training import fused_sgd
from fastfair.sim.training.fused_sgd import FusedDenseSGD
from fastfair.sim.training.lanes import Lane
from fastfair.sim.training.local import train_clients, train_lanes
from fastfair.sim.training.schedule import LocalTrainingConfig
from tests.helpers.cohorts import image_cohort

CONFIG = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1)


class Twice(nn.Module):
    """A dense layer applied twice in one pass (its input is not one matrix)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Dense(12, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(torch.relu(self.inner(x)))


def _net(twice=False):
    """Dense weights of 432, 144 and 36 elements; with ``twice``, the first layer an nn.Linear
    (never fused) and the 144 applied twice."""
    torch.manual_seed(0)
    if twice:
        return nn.Sequential(nn.Flatten(), nn.Linear(36, 12), nn.ReLU(), Twice(), nn.ReLU(),
                             Dense(12, 3))
    return nn.Sequential(nn.Flatten(), Dense(36, 12), nn.ReLU(), Dense(12, 12), nn.ReLU(),
                         Dense(12, 3))


def _train(monkeypatch, fused_min, net=None, config=CONFIG, threads=1, counts=(7, 3, 12, 5)):
    monkeypatch.setattr(fused_sgd, "FUSED_MIN", fused_min)
    batch = image_cohort(list(counts))
    model = ModuleModel(net or _net(), cohort="alone", init="given")
    theta = model.init(torch.Generator().manual_seed(2))
    with torch_threads(threads):
        return train_clients(model, theta, batch, config, np.arange(len(counts)), seed=5)[0]


def test_the_layers_fused_are_the_large_dense_weights(monkeypatch):
    net = _net()
    model = ModuleModel(net, cohort="alone", init="given")
    leaves = [p.detach() for p in net.parameters()]
    fused = FusedDenseSGD(net, model.param_names, leaves)
    assert fused._layers == []  # 432 and 144 weights: below FUSED_MIN
    with FusedDenseSGD(net, model.param_names, leaves, enabled=False) as off:
        assert off._layers == []
    monkeypatch.setattr(fused_sgd, "FUSED_MIN", 100)
    with FusedDenseSGD(net, model.param_names, leaves) as fused:
        assert [model.param_names[i] for i, _ in fused._layers] == ["1.weight", "3.weight"]
        net(torch.rand(2, 1, 6, 6))
        plain, outputs = fused.split(leaves)
        assert len(plain) == len(leaves) - 2 and len(outputs) == 2
        assert all(out.shape == (2, 12) for out in outputs)
    assert not net[1]._forward_hooks  # removed at the exit


def test_a_fused_step_is_the_plain_step_up_to_rounding(monkeypatch):
    fused = _train(monkeypatch, 100)
    plain = _train(monkeypatch, 10 ** 12)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
    assert not torch.equal(fused, plain)  # the fused product rounds once: it did run
    assert plain.abs().sum() > 0


def test_fused_training_has_the_same_bits_on_any_threads_and_in_any_company(monkeypatch):
    runs = [_train(monkeypatch, 100, threads=t) for t in (1, 2, 3)]
    assert all(torch.equal(runs[0], other) for other in runs[1:])
    batch = image_cohort([7, 3, 12, 5])  # client 2's rows alone
    own = SimpleNamespace(x=batch.x[10:22], y=batch.y[10:22], offsets=np.array([0, 12]),
                          counts=np.array([12]))
    model = ModuleModel(_net(), cohort="alone", init="given")
    theta = model.init(torch.Generator().manual_seed(2))
    one, _ = train_clients(model, theta, own, CONFIG, np.array([2]), seed=5)
    assert torch.equal(one[0], runs[0][2])


@pytest.mark.parametrize("case", ["layer called twice", "bf16", "objective"])
def test_the_plain_step_where_fusing_would_be_wrong(monkeypatch, case):
    if case == "objective":
        batch, results = image_cohort([7, 3, 12]), []
        keys = CohortKeys.of(9, np.array([3, 77, 500]), torch.device("cpu"))
        for fused_min in (100, 10 ** 12):
            monkeypatch.setattr(fused_sgd, "FUSED_MIN", fused_min)
            model = ModuleModel(_net(), cohort="alone", init="given")
            lanes = [Lane(model.init(torch.Generator().manual_seed(2)), np.array([0, 1, 2]),
                          ProximalObjective(0.3))]
            results.append(train_lanes(model, batch, keys, lanes, CONFIG)[0][0])
        assert torch.equal(results[0], results[1])
        return
    net = (lambda: _net(twice=True)) if case == "layer called twice" else _net
    config = CONFIG if case != "bf16" else LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1,
                                                               precision="bf16")
    assert torch.equal(_train(monkeypatch, 100, net(), config),
                       _train(monkeypatch, 10 ** 12, net(), config))
