"""Per-round hooks: every round of every rule reaches the callbacks in order, the CSV, TensorBoard
and (faked) Weights & Biases loggers hold what the histories hold, and the command line's --log,
--log-level and --quiet do what they say."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
import types
from collections import defaultdict

import pytest

from fastfair.cli import main
from fastfair.sim import Experiment, SimulationConfig
from fastfair.sim.reporting.callbacks import (
    CSVLogger,
    RoundCallback,
    TensorBoardLogger,
    WandbLogger,
    build_callbacks,
    folder_name,
)

CONFIG = SimulationConfig(rounds=3, eval_every=1, clients=20, per_round=5)
RULES = ["fedavg", "term"]
TINY = ["--compare", ",".join(RULES), "--rounds", "3", "--eval-every", "1", "--clients", "20",
        "--per-round", "5"]


class Recorder(RoundCallback):
    """Every hook call as (hook, run, argument); raises in on_round at round ``fail_at`` of the
    run ``fail_run``."""

    def __init__(self, fail_run=None, fail_at=None):
        self.calls = []
        self.fail = (fail_run, fail_at)

    def on_run_start(self, run, config):
        self.calls.append(("start", run, config))

    def on_round(self, run, record):
        self.calls.append(("round", run, record))
        if (run, record["round"]) == self.fail:
            raise RuntimeError("callback failed on purpose")

    def on_run_end(self, run, summary):
        self.calls.append(("end", run, summary))

    def close(self):
        self.calls.append(("close", None, {}))


def _read_csv(path):
    """{(run, round): {metric: value}} of a CSVLogger file, and its row count."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    records = defaultdict(dict)
    for row in rows:
        records[row["run"], int(row["round"])][row["metric"]] = float(row["value"])
    return records, len(rows)


def test_callbacks_see_every_round_of_every_rule_in_order():
    rec = Recorder()
    experiment = Experiment(CONFIG, RULES, callbacks=[rec])
    result = experiment.run()
    expected = []
    for rule in RULES:
        expected += [("start", rule, experiment.configs[rule].to_dict())]
        expected += [("round", rule, r) for r in result.histories[rule]]
        expected += [("end", rule, result.summary[rule])]
    assert rec.calls == expected + [("close", None, {})]
    assert [r["round"] for r in result.histories["term"]] == [1, 2, 3]
    assert rec.calls[0][2]["rule"] == "fedavg" and rec.calls[5][2]["rule"] == "term"


def test_a_failing_round_still_closes_and_resume_calls_for_new_rounds_only(tmp_path):
    out = tmp_path / "run"
    crash = Recorder(fail_run="term", fail_at=2)
    with pytest.raises(RuntimeError, match="on purpose"):
        Experiment(CONFIG, RULES, out=out, checkpoint_every=1,
                   callbacks=[CSVLogger(out / "rounds.csv"), crash]).run()
    assert crash.calls[-1][0] == "close"
    records, _ = _read_csv(out / "rounds.csv")   # flushed and closed by the failing run
    assert sorted(records) == [("fedavg", 1), ("fedavg", 2), ("fedavg", 3), ("term", 1),
                               ("term", 2)]

    # The checkpoint holds term after round 1: the resumed run plays (and reports) 2 and 3.
    rec = Recorder()
    result = Experiment.resume(out, callbacks=[CSVLogger(out / "rounds.csv"), rec]).run()
    assert [(c[0], c[1], c[2].get("round")) for c in rec.calls] == [
        ("start", "term", None), ("round", "term", 2), ("round", "term", 3), ("end", "term", None),
        ("close", None, None)]
    assert rec.calls[-2][2] == result.summary["term"]
    records, rows = _read_csv(out / "rounds.csv")  # appended to: round 2 of term twice
    assert records["term", 3]["acc_mean"] == result.histories["term"][2]["acc_mean"]
    per_round = len(result.histories["term"][0]) - 1
    assert rows == 7 * per_round

    # Logging options are no run options: --resume takes them (nothing is left to play here).
    assert main(["simulate", "--resume", str(out), "--log", "csv", "--quiet"]) == 0
    assert _read_csv(out / "rounds.csv")[1] == rows


def test_csv_rows_read_back_equal_the_histories(tmp_path):
    path = tmp_path / "deep" / "rounds.csv"

    class Peek(RoundCallback):  # what is on disk after each round, while the file is open
        seen = []

        def on_round(self, run, record):
            self.seen.append(max(t for r, t in _read_csv(path)[0] if r == run))

    result = Experiment(CONFIG, RULES, callbacks=[CSVLogger(path), Peek()]).run()
    assert Peek.seen == [1, 2, 3, 1, 2, 3]
    with open(path, newline="") as f:
        assert next(csv.reader(f)) == ["run", "round", "metric", "value"]
    records, _ = _read_csv(path)
    assert records == {(rule, r["round"]): {k: float(v) for k, v in r.items() if k != "round"}
                       for rule, hist in result.histories.items() for r in hist}


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = Experiment(CONFIG, RULES, callbacks=[TensorBoardLogger(tmp_path / "tb")]).run()
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == sorted(RULES)
    for rule, hist in result.histories.items():
        events = EventAccumulator(str(tmp_path / "tb" / rule)).Reload()
        text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
        assert f'"rule": "{rule}"' in text  # the config, as JSON text
        for metric in ("acc_mean", "acc_worst10", "train_loss", "participants"):
            scalars = events.Scalars(metric)
            assert [s.step for s in scalars] == [1, 2, 3]
            assert [s.value for s in scalars] == pytest.approx([r[metric] for r in hist],
                                                               rel=1e-6)  # stored as float32


def test_tensorboard_folders_of_awkward_run_names(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    for run in ("term(tilt=1)/seed1", "term(tilt=1)_seed1", "..", "a b,c=1"):
        logger.on_run_start(run, {"seed": 1})
        logger.on_round(run, {"round": 1, "acc_mean": 0.5, "note": "text is left out"})
        logger.on_run_end(run, {})
    logger.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a_b,c=1", "run", "term(tilt=1)_seed1", "term(tilt=1)_seed1-2"]
    assert folder_name("../x") == "_x" and folder_name("") == "run"


def test_wandb_logger_with_a_fake_wandb(monkeypatch):
    calls = []

    class FakeRun:
        def __init__(self, kwargs):
            self.kwargs, self.logged, self.summary, self.finished = kwargs, [], {}, 0

        def log(self, data, step):
            self.logged.append((step, data))

        def finish(self):
            self.finished += 1

    def init(**kwargs):
        calls.append(FakeRun(kwargs))
        return calls[-1]

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    result = Experiment(CONFIG, RULES, callbacks=[WandbLogger("proj", entity="me")]).run()
    assert [c.kwargs["name"] for c in calls] == RULES
    for run, rule in zip(calls, RULES):
        assert run.kwargs["project"] == "proj" and run.kwargs["entity"] == "me"
        assert run.kwargs["reinit"] == "finish_previous" and run.kwargs["config"]["rule"] == rule
        assert [step for step, _ in run.logged] == [1, 2, 3]
        assert run.logged[-1][1]["acc_mean"] == result.histories[rule][-1]["acc_mean"]
        assert "round" not in run.logged[0][1]  # it is the step
        assert run.summary == result.summary[rule] and run.finished == 1


def test_importing_the_simulator_needs_neither_tensorboard_nor_wandb():
    code = ("import sys, fastfair.sim; bad = {'tensorboard', 'torch.utils.tensorboard', 'wandb'}; "
            "print(sorted(bad & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout == "[]\n", done.stdout + done.stderr


def test_wandb_and_tensorboard_missing_and_bad_names(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(ImportError, match="pip install wandb"):
        WandbLogger()
    with pytest.raises(ValueError, match="logger 'wandb'.*pip install wandb"):
        build_callbacks(["csv", "wandb"], tmp_path)
    with pytest.raises(ValueError, match=r"unknown logger 'tensorbord' \(did you mean "
                                         r"'tensorboard'\?\); choose from csv, tensorboard, wandb"):
        build_callbacks(["tensorbord"], tmp_path)
    with pytest.raises(ValueError, match="names lists a logger twice"):
        build_callbacks(["csv", "csv"], tmp_path)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ValueError, match=r"logger 'tensorboard'.*fastfair\[sim\]"):
        build_callbacks(["tensorboard"], tmp_path)
    made = build_callbacks(["csv"], tmp_path / "out")
    assert isinstance(made[0], CSVLogger) and not (tmp_path / "out").exists()  # nothing yet


def test_cli_log_writes_rounds_csv_and_tensorboard_into_out(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["simulate", *TINY, "--out", str(out), "--log", "csv, tensorboard",
                 "--quiet"]) == 0
    records, _ = _read_csv(out / "rounds.csv")
    assert sorted(records) == [(rule, t) for rule in RULES for t in (1, 2, 3)]
    for rule in RULES:
        assert list((out / "tensorboard" / rule).glob("events.out.tfevents.*"))
    assert main(["simulate", *TINY, "--out", str(tmp_path / "bad"), "--log", "csvv"]) == 2
    assert "unknown logger 'csvv' (did you mean 'csv'?)" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_cli_messages_follow_quiet_and_log_level(tmp_path, capsys):
    assert main(["simulate", *TINY, "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "worst 10%" in printed.out and printed.err == ""

    assert main(["simulate", *TINY, "--out", str(tmp_path / "info")]) == 0
    printed = capsys.readouterr()
    assert "worst 10%" in printed.out and "fastfair simulate:" not in printed.out
    assert "fastfair simulate: fedavg, term | K=20 m=5 rounds=3" in printed.err
    assert f"wrote {tmp_path / 'info'}/" in printed.err and "round 1: mean acc" not in printed.err

    assert main(["simulate", *TINY, "--out", str(tmp_path / "debug"), "--quiet",
                 "--log-level", "debug"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": mean acc" in line]
    assert [line.split(":")[0] for line in lines] == [f"{r} round {t}" for r in RULES
                                                      for t in (1, 2, 3)]
    assert "fastfair simulate:" in err and not math.isnan(float(lines[0].split()[-1]))

    assert main(["simulate", "--compare", "fedavg,fedmabba", "--log-level", "error"]) == 2
    assert "unknown rule 'fedmabba'" in capsys.readouterr().err  # errors show at every level
