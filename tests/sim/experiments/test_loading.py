"""fastfair.sim.load_run: a finished or checkpointed run folder read back as the result its run
returned, and the results' tidy records, pandas frames and short representations."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.sim import Experiment, SimulationConfig, Sweep, load_run
from fastfair.sim.reporting.tidy import KINDS

TINY = SimulationConfig(clients=12, per_round=4, rounds=3, eval_every=1)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    out = tmp_path_factory.mktemp("experiment") / "run"
    return Experiment(TINY, rules=["fedavg", "term"], out=out, checkpoint_every=1).run()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "run"
    return Sweep(TINY, ["fedavg", "afl"], seeds=[0, 1], baseline="fedavg", out=out).run()


def _same_clients(a, b):
    assert [{k: v for k, v in r.items() if k != "accuracy"} for r in a] == \
        [{k: v for k, v in r.items() if k != "accuracy"} for r in b]
    assert [r["accuracy"] for r in a] == pytest.approx([r["accuracy"] for r in b], abs=1e-6)


def test_a_finished_experiment_reads_back_as_it_ran(experiment):
    loaded = load_run(experiment.out)
    assert loaded.to_records() == experiment.to_records()
    _same_clients(loaded.to_records("clients"), experiment.to_records("clients"))
    assert loaded.table() == experiment.table()
    assert set(loaded.models) == {"fedavg", "term"}


def test_a_checkpointed_experiment_reads_back_from_its_checkpoint(experiment, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(experiment.out, copy)
    for name in ("metrics.json", "metrics.csv", "final_accuracy.csv", "summary.json"):
        (copy / name).unlink()
    loaded = load_run(copy)
    assert loaded.to_records() == experiment.to_records()
    _same_clients(loaded.to_records("clients"), experiment.to_records("clients"))


def test_a_folder_without_outputs_or_checkpoint_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds neither metrics.json .* nor checkpoint.pt"):
        load_run(tmp_path)
    with pytest.raises(ValueError, match="holds no config.json"):
        load_run(tmp_path / "absent")


def test_a_finished_sweep_reads_back_as_it_ran(sweep):
    loaded = load_run(sweep.out)
    assert loaded.to_records() == sweep.to_records()
    _same_clients(loaded.to_records("clients"), sweep.to_records("clients"))
    assert loaded.table() == sweep.table()
    assert sorted(loaded.models) == sorted(sweep.models)


def test_tidy_records_have_one_row_per_run_round_and_metric(sweep):
    rows = sweep.to_records()
    keys = [(r["run"], r["round"], r["metric"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {r["run"] for r in rows} == {"fedavg/seed0", "fedavg/seed1", "afl/seed0", "afl/seed1"}
    last = [r["value"] for r in rows if r["run"] == "afl/seed1" and r["metric"] == "acc_mean"]
    assert last[-1] == sweep.runs[-1].last("acc_mean") and 0.0 <= last[-1] <= 1.0
    clients = sweep.to_records("clients")
    assert len(clients) == sum(run.final.size for run in sweep.runs)
    assert set(clients[0]) == {"run", "rule", "point", "seed", "client", "accuracy"}
    with pytest.raises(ValueError, match=f"kind must be one of {KINDS[0]!r}"):
        sweep.to_records("round")


def test_reprs_are_short_and_notebooks_get_a_table(experiment, sweep):
    assert repr(experiment) == (f"ExperimentResult(rules=['fedavg', 'term'], rounds=3, "
                                f"eval_clients=12, out={str(experiment.out)!r})")
    assert repr(sweep).startswith("SweepResult(runs=4, rules=['fedavg', 'afl'], seeds=[0, 1], "
                                  "baseline='fedavg'")
    assert len(repr(sweep)) < 200 and "history" not in repr(sweep)
    for result in (experiment, sweep):
        page = result._repr_html_()
        assert page.startswith("<table>") and page.count("<tr>") == 1 + len(
            getattr(result, "rows", None) or result.summary)


def test_to_pandas_is_the_records_as_a_frame(sweep):
    pandas = pytest.importorskip("pandas", reason="pandas is optional (pip install pandas)")
    frame = sweep.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert frame.to_dict("records") == sweep.to_records()


def test_to_pandas_without_pandas_says_how_to_install_it(sweep, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)   # an import of it raises
    with pytest.raises(ModuleNotFoundError, match="needs pandas.*pip install pandas"):
        sweep.to_pandas()


def test_finals_are_fractions(experiment):
    assert all(np.all((f >= 0) & (f <= 1)) for f in experiment.finals.values())


def _copy(result, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(result.out, copy)
    return copy


def _edit(path, change):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(change(lines)))


@pytest.mark.parametrize("file, change, message", [
    ("final_accuracy.csv", lambda lines: lines[:1], r"final_accuracy.csv holds a header and no "
                                                     r"rows"),
    ("final_accuracy.csv", lambda lines: [lines[0], lines[1].replace(",", ",abc,", 1)[:-1]
                                          .rsplit(",", 1)[0] + "\n", *lines[2:]],
     r"final_accuracy.csv row 2: fedavg must be a number; got 'abc'"),
    ("final_accuracy.csv", lambda lines: [lines[0].replace("term", "afl"), *lines[1:]],
     r"final_accuracy.csv: its header .* is not client and rules of metrics.json"),
    ("models.pt", lambda lines: ["not a checkpoint\n"], r"models.pt is not a readable"),
])
def test_a_tampered_experiment_folder_names_the_file_and_row(experiment, tmp_path, file, change,
                                                               message):
    copy = _copy(experiment, tmp_path)
    (copy / "checkpoint.pt").unlink(missing_ok=True)
    if file == "models.pt":
        (copy / file).write_bytes(b"not a checkpoint")
    else:
        _edit(copy / file, change)
    with pytest.raises(ValueError, match=message):
        load_run(copy)


@pytest.mark.parametrize("file, change, message", [
    ("metrics.json", None, r"metrics.json disagrees with .*sweep.json: it lacks afl/seed1"),
    ("sweep_runs.csv", lambda lines: lines[:-1], r"sweep_runs.csv disagrees with .*sweep.json"),
    ("sweep_runs.csv", lambda lines: [lines[0], lines[1].replace(",0,", ",zero,", 1),
                                      *lines[2:]], r"sweep_runs.csv row 2: seed must be an "
                                                   r"integer; got 'zero'"),
    ("sweep_final_accuracy.csv", lambda lines: lines[:1],
     r"sweep_final_accuracy.csv disagrees with .*sweep.json: it lacks"),
    ("sweep_final_accuracy.csv", lambda lines: [lines[0], *[line.rsplit(",", 1)[0] + ",high\n"
                                                           for line in lines[1:]]],
     r"sweep_final_accuracy.csv row 2: accuracy must be a number; got 'high'"),
])
def test_a_tampered_sweep_folder_names_the_file_and_row(sweep, tmp_path, file, change, message):
    import json

    copy = _copy(sweep, tmp_path)
    if file == "metrics.json":
        histories = json.loads((copy / file).read_text())
        del histories["afl/seed1"]
        (copy / file).write_text(json.dumps(histories))
    else:
        _edit(copy / file, change)
    with pytest.raises(ValueError, match=message):
        load_run(copy)


def test_an_experiment_whose_metrics_lack_a_rule_of_its_record_is_refused(experiment, tmp_path):
    import json

    copy = _copy(experiment, tmp_path)
    histories = json.loads((copy / "metrics.json").read_text())
    del histories["term"]
    (copy / "metrics.json").write_text(json.dumps(histories))
    with pytest.raises(ValueError, match=r"metrics.json disagrees with .*config.json: it lacks "
                                         r"term"):
        load_run(copy)


def test_a_named_pipe_among_the_outputs_is_refused(experiment, tmp_path):
    import os

    copy = _copy(experiment, tmp_path)
    (copy / "final_accuracy.csv").unlink()
    os.mkfifo(copy / "final_accuracy.csv")
    with pytest.raises(ValueError, match="final_accuracy.csv is not a regular file"):
        load_run(copy)
