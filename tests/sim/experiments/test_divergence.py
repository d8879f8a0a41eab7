"""A diverged run is data: it stops at the round it diverged in, every output marks it with
that round, no summary counts it, and the other runs of a sweep go on as they would without it."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from fastfair.sim import ArrayDataset, Simulation, SimulationConfig, load_run
from fastfair.sim.experiments.experiment import Experiment
from fastfair.sim.experiments.sweep import Sweep

SMALL = SimulationConfig(clients=30, per_round=6, rounds=6, eval_every=2)
#: FedProx with an enormous proximal weight: its global model overflows in round 1, every seed.
EXPLODES = {"fedprox": {"mu": 1e30}}


@pytest.fixture(autouse=True)
def _unbounded_mu(monkeypatch):
    """Lifts the check that refuses a diverging proximal step, so that a run diverges."""
    from fastfair.aggregators.objectives import ProximalObjective

    monkeypatch.setattr(ProximalObjective, "check_step", lambda self, lr: None)


def _records(history):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in history]


def test_a_diverged_lane_stops_and_the_other_lanes_run_as_without_it(tmp_path):
    rules = ["fedavg", "term", "fedprox"]
    result = Sweep(SMALL, rules, seeds=[0, 1], rule_options=EXPLODES, baseline="fedavg",
                   out=tmp_path / "with").run()
    alone = Sweep(SMALL, ["fedavg", "term"], seeds=[0, 1], baseline="fedavg").run()
    others = {(r.rule, r.seed): r for r in alone.runs}
    for run in result.runs:
        if run.rule == "fedprox":
            assert run.diverged_round == 1 and len(run.history) == 1
            assert "not finite" in run.history[-1]["diverged"]
            assert not any(k.startswith("acc_") for k in run.history[-1])
            assert run.final.size == 0
            continue
        twin = others[(run.rule, run.seed)]  # bit for bit: records and final accuracy
        assert _records(run.history) == _records(twin.history)
        np.testing.assert_array_equal(run.final, twin.final)
    assert set(result.models) == {r.point + f"/seed{r.seed}" for r in result.runs
                                  if r.rule != "fedprox"}  # a diverged run leaves no model
    rows = {row.rule: row for row in result.rows}
    assert rows["fedprox"].diverged == {0: 1, 1: 1} and rows["fedprox"].n == 0
    assert all(math.isnan(v) for v in rows["fedprox"].values["acc_mean"])
    assert all(math.isnan(v) for v in rows["fedprox"].differences["acc_mean"])
    assert rows["term"].values == {r.rule: r for r in alone.rows}["term"].values
    assert "fedprox(mu=1e+30): seed 0 diverged at round 1, seed 1 diverged at round 1 " \
           "(0 of 2 seeds counted)" in result.table()
    with open(tmp_path / "with" / "sweep_summary.csv", newline="") as f:
        summary = {r["rule"]: r for r in csv.DictReader(f)}
    assert summary["fedprox"]["n"] == "0" and summary["fedprox"]["acc_mean_mean"] == ""
    assert "seed 1 diverged at round 1" in summary["fedprox"]["diverged"]
    with open(tmp_path / "with" / "sweep_runs.csv", newline="") as f:
        runs = [r for r in csv.DictReader(f) if r["rule"] == "fedprox"]
    assert runs[0]["acc_mean"] == "" and runs[0]["diverged"].startswith("at round 1: ")
    loaded = load_run(tmp_path / "with")
    assert [r.diverged_round for r in loaded.runs] == [r.diverged_round for r in result.runs]
    assert {r.rule: r.diverged for r in loaded.rows} == {r.rule: r.diverged for r in result.rows}


def test_a_sweep_without_divergence_writes_no_mark(tmp_path):
    Sweep(SMALL, ["fedavg", "term"], seeds=[0], out=tmp_path / "s").run()
    assert "diverged" not in (tmp_path / "s" / "sweep_summary.csv").read_text()
    assert "diverged" not in (tmp_path / "s" / "metrics.csv").read_text()


def test_some_seeds_diverged_are_left_out_of_means_and_named(tmp_path):
    from fastfair.sim.reporting.stats import SweepRun, summarize

    def run(rule, seed, acc, diverged=None):
        history = [{"round": 1, "acc_mean": acc}]
        if diverged:
            history.append({"round": diverged, "diverged": "the global model is not finite"})
        return SweepRun(rule, {}, seed, history, np.zeros(0), 0.0)

    runs = [run("fedavg", s, 0.5 + s / 10) for s in range(3)]
    runs += [run("term", 0, 0.7), run("term", 1, 0.9), run("term", 2, 0.1, diverged=354)]
    rows = summarize(runs, ["acc_mean"], baseline="fedavg")
    term = rows[1]
    assert term.n == 2 and term.diverged == {2: 354}
    assert term.values["acc_mean"][0] == pytest.approx(0.8)  # 0.1 of the diverged seed: out
    assert term.differences["acc_mean"][0] == pytest.approx(((0.7 - 0.5) + (0.9 - 0.6)) / 2)
    assert term.diverged_note() == "seed 2 diverged at round 354 (2 of 3 seeds counted)"


def test_simulate_marks_a_diverged_rule_in_every_file(tmp_path):
    result = Experiment(SMALL, ["fedavg", "fedprox"], EXPLODES, out=tmp_path / "x").run()
    assert result.summary["fedprox"]["diverged_round"] == 1
    assert "acc_mean" not in result.summary["fedprox"]
    assert "acc_mean" in result.summary["fedavg"]
    assert "fedprox" not in result.finals
    assert "diverged at round 1" in result.table()
    saved = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert saved["fedprox"]["diverged_round"] == 1
    metrics = json.loads((tmp_path / "x" / "metrics.json").read_text())
    assert [r["round"] for r in metrics["fedprox"]] == [1] and "diverged" in metrics["fedprox"][0]
    assert "fedprox" not in (tmp_path / "x" / "final_accuracy.csv").read_text()
    loaded = load_run(tmp_path / "x")
    assert loaded.summary["fedprox"]["diverged_round"] == 1
    assert set(loaded.finals) == {"fedavg"}


def test_a_rule_reading_losses_stops_at_a_non_finite_loss_naming_the_client(caplog):
    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(n, 8)).astype(np.float32), rng.integers(0, 3, n))
               for n in (9, 14, 5, 11)]
    clients[2] = (np.full((5, 8), 3e38, np.float32), clients[2][1])  # overflowing features
    data = ArrayDataset(clients, test=clients)
    config = SimulationConfig(rule="term", rule_options={"tilt": 1.0}, rounds=3, eval_every=1,
                              per_round=4, model="mlp", hidden=4).with_clients_of(data)
    sim = Simulation(config, dataset=data)
    while sim.round < config.rounds and sim.diverged is None:
        sim.step()
    assert sim.diverged == 2
    assert sim.history[-1]["diverged"].startswith("the global model's loss on client ")
    assert "term (seed 0, options {'tilt': 1.0}) diverged at round 2" in caplog.text


def test_a_checkpointed_sweep_with_a_diverged_lane_resumes_bit_for_bit(tmp_path):
    from fastfair.sim.experiments.stopping import Interrupted

    whole = Sweep(SMALL, ["fedavg", "fedprox"], seeds=[0], rule_options=EXPLODES).run()

    from fastfair.sim.reporting.callbacks import RoundCallback

    class Stop(RoundCallback):
        def on_round(self, name, record):
            if record["round"] == 3:
                raise Interrupted(2, name, 3, False)

    with pytest.raises(Interrupted):
        Sweep(SMALL, ["fedavg", "fedprox"], seeds=[0], rule_options=EXPLODES,
              out=tmp_path / "c", checkpoint_every=2, callbacks=[Stop()]).run()
    resumed = Sweep.resume(tmp_path / "c").run()
    assert [_records(r.history) for r in resumed.runs] == \
        [_records(r.history) for r in whole.runs]
