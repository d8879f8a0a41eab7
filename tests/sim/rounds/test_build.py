"""What a configuration builds: the client objective as an axis apart from the rule, checked
against a hand-built round."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fastfair.aggregators import AAggFFD, FedProx
from fastfair.sim import ArrayDataset, Simulation, SimulationConfig
from fastfair.sim.rounds.build import build_server_optimizer, server_lr


def _data(seed=0, features=3, classes=3, sizes=(6, 5, 7, 4)):
    rng = np.random.default_rng(seed)
    clients = [(rng.normal(size=(n, features)).astype(np.float32), rng.integers(0, classes, n))
               for n in sizes]
    return ArrayDataset(clients, test=clients, num_classes=classes), clients


def _loss(params, x, y, features, classes):
    W = params[:features * classes].reshape(features, classes)
    b = params[features * classes:]
    return torch.nn.functional.cross_entropy(x @ W + b, y)


def test_proximal_objective_under_aaggff_d_is_the_proximal_step_mixed_by_its_coefficients():
    """Reference: each client takes full-batch steps of grad F_k + mu (w - w^t) (FedProx's
    proximal_gradient), and the server steps by AAggFF-D's coefficients of the received
    losses."""
    (data, clients), mu, lr, steps, rounds = _data(), 0.5, 0.3, 3, 3
    config = SimulationConfig(rule="aaggff-d", objective="proximal", objective_options={"mu": mu},
                              clients=4, per_round=4, rounds=rounds, batch_size=8,
                              local_steps=steps, lr=lr, model="logreg", eval_every=rounds)
    sim = Simulation(config, dataset=data)
    prox, rule = FedProx(4, mu=mu), AAggFFD(4)
    w = sim.params.detach().double().clone()
    for t in range(1, rounds + 1):
        ids = sim.availability.sample(t)
        sim.step()
        losses, updates = [], []
        for k in ids:
            x = torch.as_tensor(clients[k][0], dtype=torch.float64)
            y = torch.as_tensor(clients[k][1], dtype=torch.int64)
            losses.append(float(_loss(w, x, y, 3, 3)))
            wk = w.clone()
            for _ in range(steps):
                p = wk.clone().requires_grad_(True)
                (grad,) = torch.autograd.grad(_loss(p, x, y, 3, 3), p)
                wk = wk - lr * prox.proximal_gradient(grad, wk, w)
            updates.append(w - wk)
        counts = np.array([len(clients[k][1]) for k in ids], dtype=np.float64)
        coef = rule.weights(ids, np.array(losses), num_samples=counts)
        w = w - sum(float(c) * u for c, u in zip(coef, updates))
        torch.testing.assert_close(sim.params.double(), w, rtol=1e-5, atol=1e-5)
    plain = Simulation(dataclasses.replace(config, objective=None, objective_options={}),
                       dataset=data)
    for _ in range(rounds):
        plain.step()
    assert not torch.allclose(plain.params, sim.params, atol=1e-4)  # the term changed the run


@pytest.mark.parametrize("preset,rule_options,objective,objective_options", [
    ("fedprox", {"mu": 0.2}, "proximal", {"mu": 0.2}),
    ("propfair", {"M": 3.0}, "propfair", {"M": 3.0}),
])
def test_a_preset_is_fedavg_with_its_objective_bit_for_bit(preset, rule_options, objective,
                                                           objective_options):
    base = SimulationConfig(clients=12, per_round=4, rounds=4, eval_every=2, eval_clients=12,
                            model="mlp", hidden=8)
    named = Simulation(dataclasses.replace(base, rule=preset, rule_options=rule_options))
    composed = Simulation(dataclasses.replace(base, rule="fedavg", objective=objective,
                                              objective_options=objective_options))
    for _ in range(base.rounds):
        named.step()
        composed.step()
    assert torch.equal(named.params, composed.params)


def test_a_combination_without_meaning_is_refused_before_any_data_are_read():
    config = SimulationConfig(rule="fedcvar", objective="proximal")
    with pytest.raises(ValueError, match="objective 'proximal' with rule 'fedcvar'"):
        Simulation.validate(config)
    with pytest.raises(ValueError, match="objective options need an objective"):
        SimulationConfig(objective_options={"mu": 0.1})
    with pytest.raises(ValueError, match="unknown objective 'prox'"):
        SimulationConfig(objective="prox")
    over_groups = SimulationConfig(rule="fedprox", objective="plain", dataset="grouped",
                                   fair_over="groups")
    with pytest.raises(ValueError, match="fedprox is the proximal objective"):
        Simulation.validate(over_groups)


@pytest.mark.parametrize("name,documented", [("sgd", 1.0), ("fedavgm", 1.0), ("fedadam", 0.01),
                                             ("fedyogi", 0.01), ("fedadagrad", 0.01)])
def test_each_server_optimizer_steps_at_its_documented_rate_unless_server_lr_is_given(name,
                                                                                     documented):
    assert build_server_optimizer(SimulationConfig(server_optimizer=name)).lr == documented
    assert server_lr(SimulationConfig(server_optimizer=name)) == documented
    given = SimulationConfig(server_optimizer=name, server_lr=0.5)
    assert build_server_optimizer(given).lr == 0.5 == server_lr(given)


def test_the_server_learning_rate_is_server_lr_alone():
    config = SimulationConfig(server_optimizer="fedadam", server_options={"lr": 0.3})
    with pytest.raises(ValueError, match=r"must not set lr.*give --server-lr 0\.3"):
        Simulation.validate(config)
    with pytest.raises(ValueError, match=r"server_lr \(--server-lr\) must be > 0"):
        SimulationConfig(server_lr=0.0)
