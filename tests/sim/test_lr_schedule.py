"""The client learning rate over rounds: the per-round factor, step and cosine schedules."""

from __future__ import annotations

import math

import pytest

from fastfair.sim import Simulation, SimulationConfig
from fastfair.sim.lr_schedule import LRSchedule, parse_lr_schedule, round_lr
from tests.helpers.runs import assert_resume_matches


def test_step_is_the_authors_decay_by_hand():
    schedule = parse_lr_schedule("step:gamma=0.999,every=2", 0.1, 100)
    assert schedule == LRSchedule("step", {"gamma": 0.999, "every": 2})
    by_hand = [0.1, 0.1, 0.0999, 0.0999, 0.0998001, 0.0998001]
    got = [round_lr(0.1, t, schedule=schedule) for t in range(1, 7)]
    assert got == pytest.approx(by_hand, rel=1e-12)


def test_cosine_by_hand_and_flat_after_its_rounds():
    schedule = parse_lr_schedule("cosine:min=0.01,rounds=4", 0.1, 100)
    # 0.01 + 0.045 (1 + cos(pi (t - 1) / 4)), then 0.01
    by_hand = [0.1, 0.01 + 0.045 * (1 + math.sqrt(0.5)), 0.055,
               0.01 + 0.045 * (1 - math.sqrt(0.5)), 0.01, 0.01]
    got = [round_lr(0.1, t, schedule=schedule) for t in range(1, 7)]
    assert got == pytest.approx(by_hand, rel=1e-12)
    assert parse_lr_schedule("cosine", 0.1, 30).options == {"min": 0.0, "rounds": 30}


def test_the_per_round_factor_is_unchanged():
    assert round_lr(0.2, 3, lr_decay=0.5) == 0.2 * 0.5 ** 2
    assert SimulationConfig(lr=0.2, lr_decay=0.5).client_lr(3) == 0.2 * 0.5 ** 2
    assert SimulationConfig(lr=0.2).client_lr(7) == 0.2


@pytest.mark.parametrize("text,message", [
    ("linear:gamma=0.5", r"unknown learning-rate schedule 'linear'"),
    ("step", r"step needs gamma=\.\.\."),
    ("step:gamma=0.5,every=0", r"step's every must be >= 1; got 0"),
    ("step:gamma=1.5", r"step's gamma must be in \(0, 1\]"),
    ("step:gamma=0.5,every=1.5", r"step's every must be an integer; got '1.5'"),
    ("step:gama=0.5", r"step takes gamma=\.\.\., every=\.\.\.; got 'gama=0.5'"),
    ("cosine:min=0.5", r"cosine's min must be in \[0, lr = 0.1\]"),
    ("cosine:min=x", r"cosine's min must be a number"),
])
def test_a_bad_schedule_is_refused_naming_the_option(text, message):
    with pytest.raises(ValueError, match=r"lr_schedule \(--lr-schedule\): " + message):
        SimulationConfig(lr=0.1, lr_schedule=text)


def test_a_schedule_replaces_the_per_round_factor():
    with pytest.raises(ValueError, match=r"give one \(lr_decay d is step:gamma=0.9,every=1\)"):
        SimulationConfig(lr_decay=0.9, lr_schedule="step:gamma=0.9")


def test_the_rounds_train_at_the_schedule_and_resume_exactly(monkeypatch):
    import fastfair.sim.rounds.engine as engine

    rates = []
    train_lanes = engine.train_lanes

    def spy(model, batch, keys, lanes, config, *args, **kwargs):
        rates.append(config.lr)
        return train_lanes(model, batch, keys, lanes, config, *args, **kwargs)

    monkeypatch.setattr(engine, "train_lanes", spy)
    config = SimulationConfig(clients=10, per_round=3, rounds=5, eval_every=5, eval_clients=10,
                              lr=0.2, lr_schedule="cosine:min=0.02", model="mlp", hidden=4)
    straight = Simulation(config)
    for _ in range(5):
        straight.step()
    assert rates == [config.client_lr(t) for t in range(1, 6)]
    assert rates[0] == 0.2
    assert rates[2] == pytest.approx(0.02 + 0.09 * (1 + math.cos(0.4 * math.pi)))
    assert_resume_matches(config, straight, 2, 3)


@pytest.mark.parametrize("text", ["step:gamma=0.5,gamma=0.9", "cosine:min=0.001,rounds=5,min=0"])
def test_an_option_given_twice_is_refused_not_dropped(text):
    with pytest.raises(ValueError, match=r"lr_schedule \(--lr-schedule\): .* is given twice"):
        parse_lr_schedule(text, 0.1, 10)
