"""The simulation engine and the ``fastfair simulate`` command, end to end at tiny sizes."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from fastfair.cli import main
from fastfair.sim import ArrayDataset, ModuleModel, Simulation, SimulationConfig
from fastfair.sim import checkpoint as checkpoint_module
from fastfair.sim.data.synthetic import SyntheticDataset
from fastfair.sim.data.validation import ValidationSplit
from fastfair.sim.experiments.sweep import Sweep
from fastfair.sim.models.flat import MLP, LogisticRegression
from tests.helpers import ROOT
from tests.helpers.runs import assert_two_processes_match_one

TINY = ["--clients", "60", "--per-round", "6", "--eval-every", "2", "--quiet"]


def _without_times(history):
    return [{k: v for k, v in rec.items() if k != "seconds"} for rec in history]


@pytest.mark.parametrize("rule,extra", [("fedavg", {}), ("fedmaba", {}), ("fedcvar", {}),
                                        ("qfedavg", {}), ("fedmgda", {}), ("propfair", {}),
                                        ("fedprox", {"mu": 0.5}), ("aaggff-d", {"cdf": "gumbel"}),
                                        ("afl", {"step_size": 0.5}), ("aaggff-s", {})])
def test_state_dict_continues_exactly(rule, extra):
    per_round = 12 if rule == "aaggff-s" else 5   # cross-silo: every client every round
    config = SimulationConfig(rule=rule, rule_options=extra, clients=12 if rule == "aaggff-s"
                              else 40, per_round=per_round, rounds=6,
                              eval_every=2, eval_clients=20, server_optimizer="fedadam",
                              server_lr=0.01)
    straight = Simulation(config)
    for _ in range(6):
        straight.step()
    first = Simulation(config)
    for _ in range(3):
        first.step()
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)      # plain values: torch.load's default reads them
    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = Simulation(config)
    resumed.load_state_dict(saved)
    for _ in range(3):
        resumed.step()
    assert torch.equal(resumed.params, straight.params)
    assert _without_times(resumed.history) == _without_times(straight.history)


def test_training_improves_digits_accuracy():
    config = SimulationConfig(dataset="digits", clients=20, per_round=10, rounds=15, eval_every=15,
                              eval_clients=20, lr=0.5, epochs=2, partition="iid")
    sim = Simulation(config)
    before = float(np.mean(sim.evaluate()[0]))
    for _ in range(15):
        sim.step()
    after = sim.history[-1]["acc_mean"]
    assert before < 0.3 and after > 0.8


def test_own_arrays_and_module():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 4)) * 3
    clients = []
    for _ in range(8):
        y = rng.integers(0, 3, 40)
        clients.append((centers[y] + rng.normal(size=(40, 4)), y))
    data = ArrayDataset(clients, num_classes=3)
    torch.manual_seed(0)  # the module's initial weights must not depend on the tests run before
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    config = SimulationConfig(clients=8, per_round=4, rounds=20, eval_every=20, lr=0.2)
    sim = Simulation(config, dataset=data, model=ModuleModel(net))
    for _ in range(20):
        sim.step()
    assert sim.history[-1]["acc_mean"] > 0.9
    with pytest.raises(ValueError, match="config.clients is 9 but the dataset has 8"):
        Simulation(SimulationConfig(clients=9, per_round=4), dataset=data)


@pytest.mark.parametrize("model, message", [
    (lambda: ModuleModel(torch.nn.Linear(5, 9)), r"returns shape \[1, 1, 9\]"),
    (lambda: ModuleModel(torch.nn.Linear(5, 11)),
     r"returns shape \[1, 1, 11\] \(if some classes are absent"),
    (lambda: ModuleModel(torch.nn.Linear(6, 10)), r"on one sample \[1, 1, 5\] it fails: "),
    (lambda: LogisticRegression(6, 10), r"on one sample \[1, 1, 5\] it fails: "),
    (lambda: MLP(5, 9), r"returns shape \[1, 1, 9\]"),
])
def test_model_that_does_not_fit_the_data_is_refused_at_construction(model, message):
    rng = np.random.default_rng(0)
    data = ArrayDataset([(rng.random((20, 5)), rng.integers(0, 10, 20)) for _ in range(8)],
                        num_classes=10)
    config = SimulationConfig(clients=8, per_round=4, rounds=2, eval_every=2)
    with pytest.raises(ValueError, match=r"the model must map inputs \[m, B, F\] to logits "
                       r"\[m, B, C\] with F = 5 features and C = 10 classes.*" + message):
        Simulation(config, dataset=data, model=model())


def test_cli_writes_metrics_plots_and_table(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["simulate", "--compare", "fedavg,fairavg", "--rounds", "4", "--out", str(out),
                 *TINY])
    assert code == 0
    printed = capsys.readouterr().out
    assert "worst 10%" in printed and "fairavg" in printed and "ACF(1)" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"fedavg", "fairavg"}
    assert -1.0 <= summary["fedavg"]["acc_mean_acf1"] <= 1.0
    for name in ("config.json", "metrics.csv", "metrics.json", "summary.json", "final_accuracy.csv",
                 "fairness.png", "final_accuracy.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "fairness.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics) == ["fedavg", "fairavg"]
    assert [r["round"] for r in metrics["fedavg"]] == [1, 2, 3, 4]
    assert "acc_worst10" in metrics["fedavg"][1] and "acc_worst10" not in metrics["fedavg"][0]
    rows = (out / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 8


def test_cli_digits_with_clients_lacking_test_data(tmp_path):
    out = tmp_path / "digits"
    assert main(["simulate", "--rule", "fedavg", "--dataset", "digits", "--clients", "300",
                 "--per-round", "20", "--rounds", "2", "--dirichlet-alpha", "0.05", "--out",
                 str(out), "--quiet"]) == 0
    rows = (out / "final_accuracy.csv").read_text().strip().splitlines()
    assert 1 < len(rows) <= 301


def test_cli_rejects_bad_input(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("")
    assert main(["simulate", "--rule", "fedavg", "--out", str(tmp_path / "x"), *TINY]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert main(["simulate", "--rule", "fedavg", "--compare", "fairavg", *TINY]) == 2
    assert main(["simulate", "--rule", "fedmaba", "--rule-option", "nonsense=1", "--out",
                 str(tmp_path / "y"), *TINY]) == 2
    assert "rule 'fedmaba'" in capsys.readouterr().err
    assert main(["simulate", "--compare", "fedavg,no-such-rule", "--out", str(tmp_path / "z"),
                 *TINY]) == 2
    assert "unknown rule 'no-such-rule'" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()
    with pytest.raises(SystemExit):
        main(["simulate", "--rule", "no-such-rule"])


def _run(args, **kwargs):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "fastfair", "simulate", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def _finish(proc):
    """Waits for ``proc``, draining and closing its pipes; returns (exit code, stderr)."""
    _, err = proc.communicate()
    return proc.returncode, err.decode()


def test_resume_after_kill_reproduces_the_run(tmp_path):
    args = ["--compare", "fedavg,fedmaba", "--rounds", "40", "--checkpoint-every", "2", *TINY]
    straight = _run([*args, "--out", str(tmp_path / "straight")])
    killed = _run([*args, "--out", str(tmp_path / "killed")])
    checkpoint = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.time() + 120
    while not checkpoint.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    killed.send_signal(signal.SIGKILL)
    _finish(killed)
    state = checkpoint_module.load(checkpoint)
    assert state["current_rule"] == "fedavg", "the kill should land inside the first rule"
    code, err = _finish(straight)
    assert code == 0, err
    code, err = _finish(_run(["--resume", str(tmp_path / "killed"), "--quiet"]))
    assert code == 0, err
    a = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    b = json.loads((tmp_path / "killed" / "metrics.json").read_text())
    assert ({k: _without_times(v) for k, v in a.items()}
            == {k: _without_times(v) for k, v in b.items()})
    assert ((tmp_path / "straight" / "final_accuracy.csv").read_text()
            == (tmp_path / "killed" / "final_accuracy.csv").read_text())


@pytest.mark.parametrize("args", [
    ["--compare", "fedavg,qfedavg", "--rounds", "6", *TINY],
    # A sweep's batched program under torchrun: two seeds, rules with client objectives.
    ["--compare", "fedavg,fedprox,fedcvar", "--seeds", "0,1", "--rounds", "4", *TINY],
    # One client a round: the second process trains none.
    ["--rule", "fedavg", "--clients", "10", "--per-round", "1", "--rounds", "2", "--quiet"],
], ids=["simulate", "sweep", "a-process-without-clients"])
def test_two_processes_match_one(tmp_path, args):
    assert_two_processes_match_one(tmp_path, args)


def test_cross_silo_rule_needs_every_client():
    with pytest.raises(ValueError, match="needs every client every round"):
        Simulation(SimulationConfig(rule="aaggff-s", clients=12, per_round=5, rounds=2))


# ---------------------------------------------------------------------------------------------
# A cohort that repeats from one round to the next trains on the batch it had.

class CountingSynthetic(SyntheticDataset):
    """Synthetic data that records the ids of every training batch it makes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_calls = []

    def client_data(self, ids, split="train", device=None):
        if split == "train":
            self.train_calls.append(np.array(ids, copy=True))
        return super().client_data(ids, split, device)


class FreshSynthetic(CountingSynthetic):
    """The same samples, declared as fresh per call: the simulator never reuses its batches."""

    fixed_data = False


def _play(config, dataset):
    sim = Simulation(config, dataset=dataset)
    made = len(dataset.train_calls)  # the validation split's batches, made at construction
    while sim.round < config.rounds:
        sim.step()
    return sim, dataset.train_calls[made:]


def test_data_set_wrappers_forward_fixed_data():
    assert SyntheticDataset(4).fixed_data
    assert ValidationSplit(SyntheticDataset(4), 0.2).fixed_data
    assert not ValidationSplit(FreshSynthetic(4), 0.2).fixed_data


@pytest.mark.parametrize("model", [{"model": "logreg"}, {"model": "mlp", "hidden": 8}],
                         ids=["logreg", "mlp"])
@pytest.mark.parametrize("validation", [0.0, 0.25])
def test_full_participation_makes_the_training_batch_once(model, validation):
    config = SimulationConfig(rule="qfedavg", clients=8, per_round=8, rounds=5, eval_every=2,
                              validation=validation, server_optimizer="fedadam", server_lr=0.01,
                              **model)
    reused, reused_calls = _play(config, CountingSynthetic(8, seed=3))
    fresh, fresh_calls = _play(config, FreshSynthetic(8, seed=3))
    assert len(reused_calls) == 1 and len(fresh_calls) == config.rounds
    assert _without_times(reused.history) == _without_times(fresh.history)
    assert torch.equal(reused.params, fresh.params)


def test_changing_cohort_makes_its_batch_again():
    config = SimulationConfig(rule="fedprox", rule_options={"mu": 0.1}, clients=8, per_round=3,
                              rounds=8, eval_every=4, model="mlp", hidden=8)
    reused, reused_calls = _play(config, CountingSynthetic(8, seed=1))
    fresh, _ = _play(config, FreshSynthetic(8, seed=1))
    cohorts = [reused.availability.sample(t) for t in range(1, config.rounds + 1)]
    changes = [cohorts[0]] + [b for a, b in zip(cohorts, cohorts[1:]) if not np.array_equal(a, b)]
    assert len(changes) > 1
    assert len(reused_calls) == len(changes)
    assert all(np.array_equal(a, b) for a, b in zip(reused_calls, changes))
    assert _without_times(reused.history) == _without_times(fresh.history)
    assert torch.equal(reused.params, fresh.params)


def test_full_participation_sweep_is_its_runs_alone():
    base = SimulationConfig(clients=6, per_round=6, rounds=4, eval_every=2, model="mlp", hidden=8)
    data = CountingSynthetic(6, seed=2)
    result = Sweep(base, ["fedavg", "term", "fedprox"], seeds=[0, 1], dataset=data).run()
    assert len(data.train_calls) == 2  # one batch per seed (its runs train together), ever
    for run in result.runs:
        config = dataclasses.replace(base, rule=run.rule, seed=run.seed, rule_options=run.options)
        alone, _ = _play(config, FreshSynthetic(6, seed=2))
        assert _without_times(run.history) == _without_times(alone.history), run.point
        np.testing.assert_array_equal(run.final, alone.evaluate()[0])


def test_a_module_trained_alone_sums_its_updates_as_its_clients_finish(monkeypatch):
    """A run whose rule reads no round input (FedAvg, TERM, FedProx) over a module trained alone
    weights its cohort before training and folds each update as it finishes (one update held,
    not m); a rule that reads the updates (FedMGDA) or its objective's report (Fed-CVaR-Avg), a
    clipping bound or a batched module hold them. A bound
    that never clips changes no bit: both ways sum in the order the clients are handed out."""
    import fastfair.sim.rounds.engine as engine

    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(n, 36)).astype(np.float32), rng.integers(0, 3, n))
               for n in (9, 14, 5, 11, 7, 13)]
    data = ArrayDataset(clients, test=clients)
    summed = []
    train_lanes = engine.train_lanes

    def spy(*args, **kwargs):
        summed.append(kwargs.get("summed_with") is not None)
        return train_lanes(*args, **kwargs)

    monkeypatch.setattr(engine, "train_lanes", spy)

    def run(rule, cohort="alone", **options):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(36, 16), torch.nn.ReLU(),
                                  torch.nn.Linear(16, 3))
        config = SimulationConfig(clients=6, per_round=4, rounds=3, eval_every=3, batch_size=5,
                                  rule=rule, **options)
        sim = Simulation(config, dataset=data, model=ModuleModel(net, cohort=cohort))
        summed.clear()
        while sim.round < config.rounds:
            sim.step()
        return sim, list(summed)

    folded, calls = run("fedavg")
    assert calls == [True] * 3
    held, calls = run("fedavg", max_update_norm=1e30)
    assert calls == [False] * 3
    assert torch.equal(folded.params, held.params)
    assert run("term")[1] == run("fedprox")[1] == [True] * 3
    assert run("fedmgda")[1] == run("fedcvar")[1] == [False] * 3
    assert run("fedavg", cohort="vmap")[1] == [False] * 3
