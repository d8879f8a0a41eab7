"""Evaluation of the running average of the global models (``eval_average_iterates``): the
scores are those of the hand-averaged parameters, training is unchanged, a checkpoint carries
the average, and a sweep sets it per rule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fastfair.sim import Simulation, SimulationConfig
from fastfair.sim.experiments.common import point_config
from fastfair.sim.training.evaluate import evaluate_clients

CONFIG = SimulationConfig(rule="afl", clients=6, per_round=6, rounds=4, eval_every=1, seed=3,
                          rule_options={"step_size": 0.5})


def test_scores_are_those_of_the_hand_averaged_models():
    plain = Simulation(CONFIG)
    averaged = Simulation(dataclasses.replace(CONFIG, eval_average_iterates=True))
    iterates = []
    for t in range(1, CONFIG.rounds + 1):
        plain.step()
        record = averaged.step()
        # training does not depend on what is evaluated: the same global model every round
        torch.testing.assert_close(averaged.params, plain.params, rtol=0, atol=0)
        iterates.append(plain.params.double().numpy())
        hand = sum(iterates) / t                               # (w_1 + ... + w_t) / t
        batch = plain._eval_batch
        loss, acc = evaluate_clients(plain.model, torch.from_numpy(hand).float(), batch)
        counts = batch.counts
        assert record["test_loss"] == pytest.approx(float(np.dot(loss, counts) / counts.sum()),
                                                    rel=1e-5)
        assert record["acc_mean"] == pytest.approx(float(np.mean(acc)), abs=1e-12)
    # after 4 rounds the average differs from the last model (the runs' records differ)
    assert not np.allclose(iterates[-1], sum(iterates) / 4)
    assert plain.history[-1]["test_loss"] != pytest.approx(averaged.history[-1]["test_loss"])


def test_a_checkpoint_carries_the_average():
    config = dataclasses.replace(CONFIG, eval_average_iterates=True)
    whole = Simulation(config)
    for _ in range(4):
        whole.step()
    first = Simulation(config)
    for _ in range(2):
        first.step()
    resumed = Simulation(config)
    resumed.load_state_dict(first.state_dict())
    for _ in range(2):
        resumed.step()
    torch.testing.assert_close(resumed.eval_params, whole.eval_params)
    assert resumed.history[-1]["test_loss"] == whole.history[-1]["test_loss"]


def test_a_sweep_point_sets_it_for_its_rule_only():
    afl = point_config(CONFIG, "afl", 1, {"step_size": 0.1, "eval_average_iterates": True})
    assert afl.eval_average_iterates and afl.rule_options == {"step_size": 0.1}
    fedavg = point_config(CONFIG, "fedavg", 1, {})
    assert not fedavg.eval_average_iterates and fedavg.rule_options == {}


@pytest.mark.parametrize("rule,why", [("fedevg", "moves a synthetic set, not a model"),
                                      ("superfed-mm", "evaluates its personalised mixtures")])
def test_methods_without_one_global_model_refuse_it(rule, why):
    from fastfair.sim.rounds.registry import make_runner

    config = SimulationConfig(rule=rule, dataset="digits", clients=4, per_round=2, rounds=1,
                              eval_average_iterates=True)
    with pytest.raises(ValueError, match=f"does not use eval_average_iterates .*{why}"):
        make_runner(config)
