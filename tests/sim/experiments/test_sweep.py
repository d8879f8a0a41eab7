"""Sweeps: every run of a batched sweep equals the same run alone, runs of a seed are paired, grid
points are chosen on the validation split, and bad sweeps are refused before anything runs."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest
import torch

from fastfair.sim import ArrayDataset, ModuleModel, Simulation, SimulationConfig
from fastfair.sim.experiments.sweep import Sweep, grid_points
from fastfair.sim.process import torch_threads
from fastfair.sim.reporting.stats import LOWER_IS_BETTER

SMALL = SimulationConfig(clients=30, per_round=6, rounds=6, eval_every=2)


def _records(history):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in history]


def _alone(config, dataset=None, model=None):
    sim = Simulation(config, dataset=dataset, model=model)
    while sim.round < config.rounds:
        sim.step()
    return sim


@pytest.mark.parametrize("base", [
    dataclasses.replace(SMALL, validation=0.2),
    dataclasses.replace(SMALL, batch_size=7, dataset="digits", clients=20, per_round=5,
                        model="mlp", hidden=16),
], ids=["synthetic-validation", "digits-mlp-odd-batch"])
def test_every_run_of_a_batched_sweep_is_the_run_alone(base):
    rules = ["fedavg", "fedprox", "fedcvar", "term", "aaggff-d", "qfedavg", "fedmgda"]
    grid = {"term": {"tilt": [0.1, 5.0]}} if base.validation else {}
    result = Sweep(base, rules, seeds=[0, 3], grid=grid).run()
    assert len(result.runs) == (len(rules) + (1 if grid else 0)) * 2
    for run in result.runs:
        config = dataclasses.replace(base, rule=run.rule, seed=run.seed, rule_options=run.options)
        sim = _alone(config)
        # Bit for bit: the same records and the same final per-client accuracy.
        assert _records(run.history) == _records(sim.history), run.point
        np.testing.assert_array_equal(run.final, sim.evaluate()[0])


@pytest.mark.parametrize("conv", [False, True], ids=["dense-dropout", "conv"])
@pytest.mark.parametrize("big", [False, True], ids=["batched", "one-at-a-time"])
def test_module_model_runs_in_a_sweep_as_alone(conv, big, monkeypatch):
    if big:  # a model too big to batch on the CPU: plain module calls, in any company
        monkeypatch.setattr("fastfair.sim.models.flat.CPU_PASS_BYTES", 1)
    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(n, 36)).astype(np.float32), rng.integers(0, 3, n))
               for n in (9, 14, 5, 11, 7, 13)]
    data = ArrayDataset(clients, test=clients)

    def model():
        torch.manual_seed(0)
        layers = ([torch.nn.Unflatten(1, (1, 6, 6)), torch.nn.Conv2d(1, 3, 3), torch.nn.Flatten()]
                  if conv else [torch.nn.Linear(36, 48)])
        net = torch.nn.Sequential(*layers, torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                  torch.nn.Linear(48, 3))
        return ModuleModel(net)

    base = SimulationConfig(clients=6, per_round=3, rounds=4, eval_every=2, batch_size=5)
    result = Sweep(base, ["fedavg", "term", "fedprox"], seeds=[0, 1], dataset=data,
                   model=model()).run()
    for run in result.runs:
        config = dataclasses.replace(base, rule=run.rule, seed=run.seed)
        with torch_threads(1):  # the sweep's own thread count: oneDNN's convolutions split
            # their sums by threads, so a conv net's bits depend on the count (not on company)
            alone = _records(_alone(config, data, model()).history)
        if big or not conv:
            assert _records(run.history) == alone
            continue
        # vmap runs the cohort's convolutions as one grouped convolution, whose kernels round
        # a group's sums differently at different places in the group (docs/sweeps.md): the
        # same run to float32 rounding, not to the bit.
        for got, want in zip(_records(run.history), alone):
            assert got.keys() == want.keys()
            for key in got:
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key


def test_sweep_one_after_another_gives_the_same_runs():
    base = dataclasses.replace(SMALL, rounds=4)
    together = Sweep(base, ["fedavg", "afl", "propfair"], seeds=[1, 2]).run()
    apart = Sweep(base, ["fedavg", "afl", "propfair"], seeds=[1, 2], batched=False).run()
    for a, b in zip(together.runs, apart.runs):
        assert (a.rule, a.seed) == (b.rule, b.seed)
        assert _records(a.history) == _records(b.history)


def test_runs_of_a_seed_are_paired_and_differences_are_per_seed():
    base = dataclasses.replace(SMALL, rounds=4)
    result = Sweep(base, ["fedavg", "term"], seeds=[0, 1, 2], baseline="fedavg",
                   rule_options={"term": {"tilt": 5.0}}).run()
    runs = {(r.rule, r.seed): r for r in result.runs}
    for seed in (0, 1, 2):
        # Same cohort sizes every round, same evaluation clients: the pairing is real.
        a, b = runs["fedavg", seed], runs["term", seed]
        assert [r["participants"] for r in a.history] == [r["participants"] for r in b.history]
        assert a.final.shape == b.final.shape
    row = next(r for r in result.rows if r.rule == "term")
    diffs = [runs["term", s].last("acc_worst10") - runs["fedavg", s].last("acc_worst10")
             for s in (0, 1, 2)]
    assert row.differences["acc_worst10"][0] == pytest.approx(np.mean(diffs))


def test_grid_points_are_chosen_on_the_validation_split():
    base = dataclasses.replace(SMALL, validation=0.25, rounds=4)
    result = Sweep(base, ["fedavg", "term"], seeds=[0, 1],
                   grid={"term": {"tilt": [0.01, 3.0, 30.0]}}, select="acc_worst10").run()
    points = {}
    for run in result.runs:
        if run.rule == "term":
            points.setdefault(run.options["tilt"], []).append(run.last("val_acc_worst10"))
    best = max(points, key=lambda tilt: np.mean(points[tilt]))
    assert result.selection["term"] == {"tilt": best}
    assert result.selection["fedavg"] == {}
    assert "acc_worst10" not in LOWER_IS_BETTER


def test_sweep_writes_its_outputs(tmp_path):
    base = dataclasses.replace(SMALL, rounds=2, eval_every=1)
    out = tmp_path / "sweep"
    result = Sweep(base, ["fedavg", "fairavg"], seeds=[0, 1], baseline="fedavg", out=out).run()
    names = {p.name for p in out.iterdir()}
    assert {"sweep.json", "metrics.csv", "sweep_summary.csv", "sweep_summary.json",
            "sweep_runs.csv", "tradeoff.png", "curves.png"} <= names
    with open(out / "sweep_runs.csv") as f:
        assert len(list(csv.DictReader(f))) == len(result.runs) == 4
    assert "fairavg" in result.table()


class _Recorder:
    def __init__(self):
        self.events = []

    def on_run_start(self, run, config):
        self.events.append(("start", run, config["seed"]))

    def on_round(self, run, record):
        self.events.append(("round", run, record["round"]))

    def on_run_end(self, run, summary):
        self.events.append(("end", run, summary["acc_mean"]))

    def close(self):
        self.events.append(("close",))


def test_callbacks_see_every_run_by_name():
    base = dataclasses.replace(SMALL, rounds=2, eval_every=1)
    recorder = _Recorder()
    Sweep(base, ["fedavg", "term"], seeds=[4], rule_options={"term": {"tilt": 1.0}},
          callbacks=[recorder]).run()
    rounds = [e for e in recorder.events if e[0] == "round"]
    assert sorted({e[1] for e in rounds}) == ["fedavg/seed4", "term(tilt=1.0)/seed4"]
    assert len(rounds) == 4
    assert recorder.events[-1] == ("close",)
    assert [e[2] for e in recorder.events if e[0] == "start"] == [4, 4]


def test_methods_run_beside_the_batched_rules():
    base = SimulationConfig(dataset="digits", clients=10, per_round=5, rounds=2, eval_every=1)
    result = Sweep(base, ["fedavg", "superfed-mm"], seeds=[0]).run()
    assert [r.rule for r in result.runs] == ["fedavg", "superfed-mm"]
    assert all(len(r.history) == 2 for r in result.runs)


def test_one_rule_and_one_seed_may_be_given_bare():
    sweep = Sweep(SMALL, "fedavg", seeds=0)
    assert sweep.rules == ["fedavg"] and sweep.seeds == [0]


def test_grid_points_combine_every_value():
    assert grid_points("term", {"x": 1}, {"tilt": [0.1, 1], "y": [2, 3]}) == [
        {"x": 1, "tilt": 0.1, "y": 2}, {"x": 1, "tilt": 0.1, "y": 3},
        {"x": 1, "tilt": 1, "y": 2}, {"x": 1, "tilt": 1, "y": 3}]
    assert grid_points("fedavg", {}, {}) == [{}]


@pytest.mark.parametrize("kwargs, message", [
    (dict(grid={"term": {"tilt": [0.1, 1.0]}}), "validation"),
    (dict(grid={"qfedavg": {"q": [1.0]}}), "not run"),
    (dict(baseline="afl"), "baseline"),
    (dict(seeds=[0, 0]), "seeds"),
    (dict(seeds="0"), r"seeds \(--seeds\) must be an integer or a list of integers >= 0, "
                      r"e\.g\. \[0, 1, 2\]; got '0'"),
    (dict(grid={"term": {"tilt": []}}, ), "non-empty"),
    (dict(rule_options={"term": {"tlt": 1.0}}), "tilt"),
])
def test_bad_sweeps_are_refused_before_running(kwargs, message):
    kwargs = {"seeds": [0], **kwargs}
    with pytest.raises(ValueError, match=message):
        Sweep(SMALL, ["fedavg", "term"], **kwargs)


TINY = ["--clients", "20", "--per-round", "5", "--rounds", "2", "--eval-every", "1"]


def test_cli_sweep_runs_a_grid_and_reports_the_choice(tmp_path, capsys):
    from fastfair.cli import main

    out = tmp_path / "s"
    assert main(["sweep", "--compare", "fedavg,term", "--seeds", "0,1", "--grid",
                 "term:tilt=0.1,2", "--validation", "0.2", "--select", "acc_worst10", *TINY,
                 "--out", str(out), "--quiet", "--log", "csv"]) == 0
    printed = capsys.readouterr().out
    assert "term(tilt=0.1)" in printed and "term(tilt=2)" in printed and "Δ worst 10%" in printed
    saved = (out / "sweep_summary.json").read_text()
    assert '"select": "acc_worst10"' in saved
    with open(out / "rounds.csv") as f:  # the callbacks of --log saw every run
        runs = {row["run"] for row in csv.DictReader(f)}
    assert runs == {"fedavg/seed0", "fedavg/seed1", "term(tilt=0.1)/seed0",
                    "term(tilt=0.1)/seed1", "term(tilt=2)/seed0", "term(tilt=2)/seed1"}


@pytest.mark.parametrize("argv, message", [
    (["sweep", "--grid", "term:tilt=1,2"], "not run"),
    (["sweep", "--compare", "fedavg,term", "--grid", "term:tilt"], "RULE:KEY=V1,V2"),
    (["sweep", "--compare", "fedavg,term", "--grid", "term:tilt=1,2"], "validation"),
    (["sweep", "--seeds", "0,x"], "comma-separated integers"),
    (["simulate", "--seed", "1", "--seeds", "1,2"], "--seed or --seeds"),
])
def test_cli_refuses_bad_sweeps(tmp_path, caplog, argv, message):
    from fastfair.cli import main

    assert main([*argv, *TINY, "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert message in caplog.text
    assert not (tmp_path / "x").exists()


def test_simulate_with_several_seeds_is_a_sweep(tmp_path, capsys):
    from fastfair.cli import main

    assert main(["simulate", "--compare", "fedavg,fairavg", "--seeds", "0,1", *TINY, "--out",
                 str(tmp_path / "x"), "--quiet"]) == 0
    assert "Δ mean acc" in capsys.readouterr().out
    assert (tmp_path / "x" / "sweep_summary.csv").is_file()


def test_a_grid_spans_the_client_objective_and_each_run_is_the_run_alone():
    base = SimulationConfig(clients=8, per_round=4, rounds=3, eval_every=3, eval_clients=8,
                            model="mlp", hidden=4, validation=0.25, objective="proximal")
    grid = {"aaggff-d": {"objective.mu": [0.001, 0.5]}, "fedavg": {"objective": ["plain",
                                                                                 "proximal"]}}
    result = Sweep(base, ["fedavg", "aaggff-d"], seeds=[0], grid=grid).run()
    assert len(result.runs) == 4
    for run in result.runs:
        options = dict(run.options)
        config = dataclasses.replace(
            base, rule=run.rule, objective=options.get("objective", "proximal"),
            objective_options={"mu": options["objective.mu"]} if "objective.mu" in options
            else {})
        alone = Simulation(config)
        for _ in range(base.rounds):
            alone.step()
        assert [{k: v for k, v in r.items() if k != "seconds"} for r in run.history] == [
            {k: v for k, v in r.items() if k != "seconds"} for r in alone.history], run.point
    with pytest.raises(ValueError, match="objective 'propfair' with rule 'fedprox'"):
        Sweep(base, ["fedprox"], grid={"fedprox": {"objective": ["propfair", "proximal"]}})


def test_a_metric_no_run_records_is_named_not_a_key_error():
    config = SimulationConfig(clients=6, per_round=2, rounds=2, eval_every=1)
    with pytest.raises(ValueError, match=r"metrics: run fedavg seed 0 recorded no "
                                         r"'acc_worst_group'"):
        Sweep(config, ["fedavg"], seeds=[0], metrics=("acc_mean", "acc_worst_group")).run()
