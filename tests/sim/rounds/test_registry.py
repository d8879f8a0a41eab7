"""Every rule and method name has its round runner, the methods' made from their table."""

from __future__ import annotations

import pytest

from fastfair._table import Table
from fastfair.aggregators.registry import RULES
from fastfair.methods import METHODS
from fastfair.sim.rounds.ditto import DittoSimulation
from fastfair.sim.rounds.engine import Simulation
from fastfair.sim.rounds.registry import RUNNERS, runner_class, runners_of
from fastfair.sim.rounds.superfed import SuperFedSimulation


def test_every_method_runs_in_the_runner_of_its_options_class():
    assert list(RUNNERS) == list(METHODS)
    assert all(runner_class(name) is RUNNERS[name] for name in METHODS)
    assert not any(runner_class(name).plays_batched for name in METHODS)
    assert runner_class("superfed-mm") is runner_class("superfed-lm") is SuperFedSimulation


def test_a_method_added_to_the_method_table_gets_its_runner_by_its_options():
    methods = Table("method", targets={"ditto-2": "fastfair.methods.ditto:DittoOptions"})
    assert dict(runners_of(methods)) == {"ditto-2": DittoSimulation}
    orphan = Table("method", targets={"new": "fastfair.methods.new:NewOptions"})
    with pytest.raises(ValueError, match="'new' has options 'fastfair.methods.new:NewOptions'"):
        runners_of(orphan)


def test_every_rule_runs_in_the_batched_engine():
    assert all(runner_class(rule) is Simulation for rule in RULES)
    assert Simulation.plays_batched


def test_an_unknown_name_lists_them_all():
    with pytest.raises(ValueError, match="fedevg"):
        runner_class("fedavgg")
