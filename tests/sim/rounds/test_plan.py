"""The rule settings resolve once: a run builds its rule and its server optimiser once (its
validation's are the run's), a resume once more, and the client lr schedule is read once."""

from __future__ import annotations

from collections import Counter

import pytest

from fastfair.aggregators import registry
from fastfair.sim import Experiment, SimulationConfig, Sweep
from fastfair.sim.rounds import build
from fastfair.sim.rounds.engine import Simulation
from fastfair.sim.training import settings

CONFIG = dict(clients=20, per_round=4, rounds=2, eval_every=1)


@pytest.fixture
def builds(monkeypatch):
    """Counts the rules and server optimisers built, by name."""
    made: Counter = Counter()
    rule, optimizer = registry.build, registry.build_server_optimizer

    def count_rule(name, *args, **kwargs):
        made[name] += 1
        return rule(name, *args, **kwargs)

    def count_optimizer(name, *args, **kwargs):
        made["optimizer " + name] += 1
        return optimizer(name, *args, **kwargs)

    monkeypatch.setattr(build.registry, "build", count_rule)
    monkeypatch.setattr(build.registry, "build_server_optimizer", count_optimizer)
    return made


def test_an_experiment_builds_each_rule_and_optimizer_once(builds):
    Experiment(SimulationConfig(**CONFIG), ["fedavg", "aaggff-d"]).run()
    assert builds == {"fedavg": 1, "aaggff-d": 1, "optimizer sgd": 2}


def test_a_sweep_builds_each_runs_rule_once(builds):
    Sweep(SimulationConfig(**CONFIG), ["fedavg", "fedmaba"], seeds=[0, 1]).run()
    assert builds == {"fedavg": 2, "fedmaba": 2, "optimizer sgd": 4}


def test_a_resume_builds_the_rule_once_more(builds):
    config = SimulationConfig(rule="fedmaba", **CONFIG)
    run = Simulation(config)
    run.step()
    again = Simulation(config)
    again.load_state_dict(run.state_dict())
    assert builds == {"fedmaba": 3, "optimizer sgd": 3}


def test_the_lr_schedule_is_read_once(monkeypatch):
    config = SimulationConfig(lr_schedule="cosine:min=0.01", **CONFIG)
    monkeypatch.setattr(settings, "parse_lr_schedule", None)  # a second read would fail
    assert config.client_lr(1) == config.lr > config.client_lr(2) > 0.01
