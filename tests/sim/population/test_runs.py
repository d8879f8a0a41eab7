"""A population in whole runs: from the command line, a configuration file and the Python API;
bit-identical over thread counts and on resume; the tiers as groups of the rules over groups."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastfair.cli import main
from fastfair.sim import Experiment, Simulation, SimulationConfig, Sweep
from fastfair.sim.population import time_to_accuracy
from tests.helpers.runs import assert_resume_matches

TINY = dict(clients=40, per_round=5, rounds=4, eval_every=2, population="devices",
            population_options={"process": "diurnal", "track_participation": True},
            policy="deadline", over_select=0.4, deadline=6.0)


def _without_times(metrics):
    return {rule: [{k: v for k, v in r.items() if k != "seconds"} for r in hist]
            for rule, hist in metrics.items()}


def test_command_line_and_config_file_run_the_population(tmp_path):
    argv = ["simulate", "--clients", "40", "--per-round", "5", "--rounds", "4", "--eval-every",
            "2", "--population", "devices", "--population-option", "process=diurnal",
            "--population-option", "track_participation=true", "--policy", "deadline",
            "--over-select", "0.4", "--deadline", "6", "--rule", "fedavg", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "cli")]) == 0
    metrics = json.loads((tmp_path / "cli" / "metrics.json").read_text())["fedavg"]
    times = [r["virtual_time"] for r in metrics]
    assert times == sorted(times) and times[-1] <= 4 * 6.0 and "acc_group2" in metrics[-1]
    participation = (tmp_path / "cli" / "participation_fedavg.csv").read_text().splitlines()
    assert participation[0] == "client,tier,rounds"
    assert sum(int(row.split(",")[2]) for row in participation[1:]) == \
        sum(r["participants"] for r in metrics)
    # the run folder's config.json runs the same run again
    assert main(["simulate", "--config", str(tmp_path / "cli" / "config.json"), "--quiet",
                 "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert _without_times(again) == _without_times({"fedavg": metrics})


def test_a_sweep_reports_the_tiers_over_seeds():
    config = SimulationConfig(**{**TINY, "population_options": {"process": "diurnal"}})
    result = Sweep(config, ["fedavg", "afl"], [0, 1], baseline="fedavg").run()
    for g in range(3):
        assert f"participation_tier{g}" in result.metrics and f"acc_group{g}" in result.metrics
    assert "virtual_time" in result.table() and "wasted_share" in result.metrics


def test_threads_do_not_change_a_run(tmp_path):
    config = SimulationConfig(**TINY)
    one = Experiment(config, ["fedavg", "afl"], threads=1).run()
    two = Experiment(config, ["fedavg", "afl"], threads=2).run()
    assert _without_times(one.histories) == _without_times(two.histories)


def test_a_resumed_run_is_the_uninterrupted_run():
    config = SimulationConfig(**{**TINY, "rounds": 6})
    straight = Simulation(config)
    for _ in range(6):
        straight.step()
    resumed = assert_resume_matches(config, straight, 3, 3)
    assert _without_times({"r": resumed.history}) == _without_times({"r": straight.history})
    assert resumed.availability.clock == straight.availability.clock
    # a checkpoint without a clock does not fit a population run, and changes nothing
    plain = Simulation(SimulationConfig(clients=40, per_round=5, rounds=6)).state_dict()
    with pytest.raises(ValueError, match="population"):
        Simulation(config).load_state_dict(plain)


def test_rules_over_the_tiers_and_time_to_accuracy():
    config = SimulationConfig(**{**TINY, "fair_over": "groups", "rule": "afl"})
    sim = Simulation(config)
    for _ in range(4):
        sim.step()
    groups = sim.rule.last_group_weights
    assert groups.shape == (3,) and np.isclose(groups.sum(), 1.0)
    history = sim.history
    target = history[-1]["acc_mean"]
    assert time_to_accuracy(history, target) <= history[-1]["virtual_time"]
    assert time_to_accuracy(history, 2.0) == float("inf")


def test_tiers_may_be_the_data_sets_groups():
    config = SimulationConfig(dataset="grouped", groups=3, clients=30, per_round=5, rounds=2,
                              eval_every=2, population="devices",
                              population_options={"tier_by_group": True})
    sim = Simulation(config)
    ids = np.arange(30)
    np.testing.assert_array_equal(sim.availability.population.tier(ids), sim.dataset.groups(ids))
    np.testing.assert_allclose(sim.availability.population.shares(),
                               np.bincount(sim.dataset.groups(ids), minlength=3) / 30)
    sim.step()
    try:
        Simulation(SimulationConfig(**{**TINY, "population_options": {"tier_by_group": True}}))
    except ValueError as e:
        assert "needs a data set with groups" in str(e)
    else:
        raise AssertionError("tier_by_group without groups was accepted")


def test_two_processes_match_one(tmp_path):
    from tests.helpers.runs import assert_two_processes_match_one

    args = ["--rule", "fedavg", "--rounds", "4", "--clients", "60", "--per-round", "6",
            "--eval-every", "2", "--quiet", "--population", "devices", "--population-option",
            "process=sessions", "--policy", "overselect", "--over-select", "0.5"]
    assert_two_processes_match_one(tmp_path, args)
