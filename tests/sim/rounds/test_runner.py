"""What every runner shares: a checkpoint that does not fit (its round past the run's rounds or
out of step with its history, an array of another shape) is refused, and the refusal changes
nothing; a method that trains no flat model refuses one."""

from __future__ import annotations

import pytest
import torch

from fastfair.sim import (
    FedEvgSimulation,
    LogisticRegression,
    Simulation,
    SimulationConfig,
    SuperFedSimulation,
)

TINY = dict(clients=10, per_round=4, rounds=4, eval_every=2)


RUNNERS = {
    "fedavg": lambda: Simulation(SimulationConfig(rule="fedavg", **TINY)),
    "superfed-mm": lambda: SuperFedSimulation(SimulationConfig(rule="superfed-mm", **TINY)),
    "fedevg": lambda: FedEvgSimulation(SimulationConfig(
        rule="fedevg", dataset="digits", **TINY, rule_options={"spc": 2, "local_epochs": 1})),
}


@pytest.mark.parametrize("rule", list(RUNNERS))
@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(round=9), "round 9 with 2 round records, of a run of 4 rounds"),
    (lambda s: s.update(history=s["history"][:1]), "round 2 with 1 round records"),
    (lambda s: s.update(round=-1, history=[]), "round -1"),
])
def test_an_inconsistent_checkpoint_is_refused_and_changes_nothing(rule, edit, message):
    runner = RUNNERS[rule]()
    runner.step()
    runner.step()
    state = runner.state_dict()
    before = runner.state_dict()
    edit(state)
    with pytest.raises(ValueError, match=message):
        runner.load_state_dict(state)
    after = runner.state_dict()
    assert after["round"] == before["round"] == 2 and len(after["history"]) == 2
    for key, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, after[key]), key


def test_an_array_of_another_shape_is_refused_naming_it():
    sim = Simulation(SimulationConfig(rule="fedavg", **TINY))
    state = sim.state_dict()
    state["params"] = torch.zeros(3)
    with pytest.raises(ValueError, match=r"checkpoint params has shape \(3,\); this run's has"):
        sim.load_state_dict(state)


def test_a_method_without_a_flat_model_refuses_one():
    config = SimulationConfig(rule="fedevg", dataset="digits", **TINY)
    with pytest.raises(ValueError, match="'fedevg' trains a model of its own; it takes no model"):
        FedEvgSimulation(config, model=LogisticRegression(64, 10))
