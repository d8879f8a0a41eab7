"""Every rule and method name has its round runner."""

from __future__ import annotations

import pytest

from fastfair.aggregators.registry import RULES
from fastfair.methods import METHODS
from fastfair.sim.rounds.engine import Simulation
from fastfair.sim.rounds.registry import RUNNERS, runner_class


def test_every_method_has_a_runner_of_its_own():
    assert set(RUNNERS) == set(METHODS)
    assert all(runner_class(name) is RUNNERS[name] for name in METHODS)
    assert not any(runner_class(name).plays_batched for name in METHODS)


def test_every_rule_runs_in_the_batched_engine():
    assert all(runner_class(rule) is Simulation for rule in RULES)
    assert Simulation.plays_batched


def test_an_unknown_name_lists_them_all():
    with pytest.raises(ValueError, match="fedevg"):
        runner_class("fedavgg")
