"""Sweep checkpoints: a sweep killed after a checkpoint and resumed gives what the uninterrupted
sweep gives, bit for bit (but wall times), for the batched rules and for a method run alone; a
folder it cannot continue is refused."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest

from fastfair.sim import ArrayDataset, Experiment, SimulationConfig
from fastfair.sim.experiments.sweep import Sweep

SMALL = SimulationConfig(clients=30, per_round=6, rounds=6, eval_every=2, validation=0.2)
DIGITS = SimulationConfig(dataset="digits", clients=12, per_round=3, rounds=4, eval_every=1)
TINY_FEDEVG = {"fedevg": {"spc": 2, "local_epochs": 1, "eval_epochs": 2, "hidden": 16}}


class Crash(Exception):
    pass


class _CrashAt:
    """Raises after round ``at`` of the run whose name starts with ``run`` (the kill); records
    what it saw."""

    def __init__(self, run=None, at=None):
        self.run, self.at, self.rounds, self.closed = run, at, [], False

    def on_run_start(self, run, config):
        pass

    def on_round(self, run, record):
        self.rounds.append((run, record["round"]))
        if self.run is not None and run.startswith(self.run) and record["round"] == self.at:
            raise Crash

    def on_run_end(self, run, summary):
        pass

    def close(self):
        self.closed = True


def _without_seconds(history):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in history]


def _csv_without_seconds(path):
    with open(path) as f:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(f)]


def _assert_same(a, b, out_a, out_b):
    assert [(r.rule, r.options, r.seed) for r in a.runs] == [(r.rule, r.options, r.seed)
                                                            for r in b.runs]
    for x, y in zip(a.runs, b.runs):
        assert _without_seconds(x.history) == _without_seconds(y.history), x.point
        np.testing.assert_array_equal(x.final, y.final)
        assert x.final.dtype == y.final.dtype
    assert a.selection == b.selection and a.metrics == b.metrics
    for name in ("sweep_summary.csv", "sweep_summary.json"):
        assert (out_a / name).read_text() == (out_b / name).read_text(), name
    for name in ("sweep_runs.csv", "metrics.csv"):
        assert _csv_without_seconds(out_a / name) == _csv_without_seconds(out_b / name), name


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-at-a-time"])
def test_resumed_sweep_of_rules_is_the_uninterrupted_sweep(tmp_path, batched):
    kwargs = dict(seeds=[0, 2], grid={"term": {"tilt": [0.1, 5.0]}}, baseline="fedavg",
                  batched=batched)
    rules = ["fedavg", "aaggff-d", "term"]
    whole = Sweep(SMALL, rules, **kwargs, out=tmp_path / "whole").run()

    out = tmp_path / "killed"
    crash = _CrashAt("term(tilt=5.0)/seed0", 5)  # after the checkpoint of round 4
    with pytest.raises(Crash):
        Sweep(SMALL, rules, **kwargs, out=out, checkpoint_every=2, callbacks=[crash]).run()
    assert crash.closed and (out / "checkpoint.pt").is_file()
    assert not (out / "sweep_runs.csv").exists()

    seen = _CrashAt()
    resumed = Sweep.resume(out, callbacks=[seen]).run()
    _assert_same(whole, resumed, tmp_path / "whole", out)
    # The callbacks see the rounds played from the checkpoint on.
    if batched:
        assert sorted({t for _, t in seen.rounds}) == [5, 6]
    else:
        assert ("term(tilt=5.0)/seed0", 4) not in seen.rounds
        assert ("term(tilt=5.0)/seed0", 5) in seen.rounds
        assert not any(run.startswith("fedavg") for run, _ in seen.rounds)


def test_resumed_sweep_with_a_method_is_the_uninterrupted_sweep(tmp_path):
    rules = ["fedavg", "fedevg"]
    whole = Sweep(DIGITS, rules, seeds=[1], rule_options=TINY_FEDEVG,
                  out=tmp_path / "whole").run()
    out = tmp_path / "killed"
    with pytest.raises(Crash):
        Sweep(DIGITS, rules, seeds=[1], rule_options=TINY_FEDEVG, out=out, checkpoint_every=2,
              callbacks=[_CrashAt("fedevg", 3)]).run()
    seen = _CrashAt()
    resumed = Sweep.resume(out, callbacks=[seen]).run()
    _assert_same(whole, resumed, tmp_path / "whole", out)
    # The batched rules had finished: only the method's rounds after its checkpoint are played.
    assert [(run.split("(")[0], t) for run, t in seen.rounds] == [("fedevg", 3), ("fedevg", 4)]


def test_resume_refuses_a_changed_or_foreign_folder(tmp_path):
    base = dataclasses.replace(SMALL, rounds=4, validation=0.0)
    out = tmp_path / "sweep"
    with pytest.raises(Crash):
        Sweep(base, ["fedavg", "term"], seeds=[0], out=out, checkpoint_every=2,
              callbacks=[_CrashAt("term/seed0", 3)]).run()
    saved = json.loads((out / "sweep.json").read_text())
    changed = {**saved, "config": {**saved["config"], "lr": 0.3}}
    (out / "sweep.json").write_text(json.dumps(changed))
    with pytest.raises(ValueError, match="changed since the checkpoint"):
        Sweep.resume(out)
    (out / "sweep.json").write_text(json.dumps({**saved, "seeds": [0, 1]}))
    with pytest.raises(ValueError, match="changed since the checkpoint"):
        Sweep.resume(out)
    (out / "sweep.json").write_text(json.dumps(saved))
    Sweep.resume(out)  # restored: accepted

    experiment = tmp_path / "experiment"
    Experiment(base, out=experiment, checkpoint_every=2).run()
    with pytest.raises(ValueError, match="holds no sweep.json"):
        Sweep.resume(experiment)
    with pytest.raises(ValueError, match="holds no config.json"):
        Experiment.resume(out)
    with pytest.raises(ValueError, match="holds no sweep.json"):
        Sweep.resume(tmp_path / "missing")

    plain = tmp_path / "plain"
    Sweep(base, ["fedavg"], seeds=[0], out=plain).run()
    with pytest.raises(ValueError, match="saved no checkpoint"):
        Sweep.resume(plain)
    (out / "sweep.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"sweep.json \(run configuration\) is not valid JSON"):
        Sweep.resume(out)
    (out / "sweep.json").write_text(json.dumps(saved))
    (out / "checkpoint.pt").write_bytes(b"\x80\x02 not a checkpoint")
    with pytest.raises(ValueError, match="not a readable fastfair checkpoint"):
        Sweep.resume(out)


@pytest.mark.parametrize("kwargs, message", [
    (dict(checkpoint_every=2), r"checkpoint_every \(--checkpoint-every\) needs an output "
                               r"folder: pass out= \(--out\)"),
    (dict(checkpoint_every=-1, out="x"), r"checkpoint_every \(--checkpoint-every\) must be"),
    (dict(checkpoint_every=True, out="x"), r"checkpoint_every \(--checkpoint-every\) must"),
    (dict(threads=0), r"threads \(--threads\) must be an integer in \[1, 4096\]"),
    (dict(threads=10**6), r"threads \(--threads\) must be an integer in \[1, 4096\] or "
                          r"None; got 10"),
    (dict(rule_options={"afl": {}}), "rule_options names 'afl', which is not run"),
])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, monkeypatch, kwargs,
                                                             message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message):
        Sweep(SMALL, ["fedavg"], **kwargs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["sweep", "experiment"])
def test_a_run_refused_when_its_runner_is_built_leaves_no_folder(tmp_path, kind):
    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(5, 4)).astype(np.float32), rng.integers(0, 2, 5))
               for _ in range(3)]
    data = ArrayDataset(clients, test=clients)  # 3 clients where the configuration says 30
    out = tmp_path / "run"
    run = (Sweep(SMALL, ["fedavg"], out=out, dataset=data) if kind == "sweep"
           else Experiment(SMALL, out=out, dataset=data))
    with pytest.raises(ValueError, match="config.clients is 30 but the dataset has 3 clients"):
        run.run()
    assert not out.exists()
