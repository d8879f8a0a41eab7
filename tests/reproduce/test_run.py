"""The table machinery: the verdict rule, and one tiny run of a table end to end (2 rounds,
2 seeds of Synthetic) with the columns of its outputs."""

from __future__ import annotations

import csv
import json
import math

import pytest

from fastfair.reproduce.run import (
    FIELDS,
    NOT_CONVERGED,
    column_rows,
    convergence,
    run_table,
    verdict,
)
from fastfair.reproduce.table import load_table


@pytest.mark.parametrize("paper, diff, half, expected", [
    (8.3, 5.0, 2.0, "reproduced"),          # interval (3, 7) on the paper's side
    (8.3, 1.0, 2.0, "within noise"),        # (-1, 3) holds 0
    (8.3, -5.0, 2.0, "not reproduced"),     # (-7, -3): the other side
    (-0.6, -3.0, 1.0, "reproduced"),
    (-0.6, 3.0, 1.0, "not reproduced"),
    (0.0, 0.1, 0.3, "reproduced"),          # no difference, bounded by the tie
    (0.0, 0.1, 2.0, "within noise"),        # no difference, too wide to bound
    (0.2, 3.0, 1.0, "not reproduced"),      # a difference where the paper has none
    (8.3, 5.0, math.nan, "within noise"),   # one seed
    (8.3, 0.2, 0.1, "not reproduced"),      # (0.1, 0.3) within the tie: no difference
    (-0.6, 0.0, 0.4, "not reproduced"),     # (-0.4, 0.4) likewise
    (None, 5.0, 1.0, "no paper number"),
])
def test_verdict_rule(paper, diff, half, expected):
    word, why = verdict(paper, diff, half, tie=0.5)
    assert word == expected
    assert why


@pytest.mark.parametrize("direction, diff, expected", [
    (1, 3.0, "reproduced"), (1, 0.5, "within noise"), (1, -3.0, "not reproduced"),
    (-1, -3.0, "reproduced"), (-1, 3.0, "not reproduced"), (1, 0.3, "not reproduced")])
def test_a_claimed_sign_without_a_number_is_judged_as_a_difference(direction, diff, expected):
    word, why = verdict(None, diff, 0.1 if abs(diff) < 0.5 else 1.0, tie=0.5, direction=direction)
    assert word == expected and "no number here" in why


TABLE = """
[table]
title = "tiny"
paper = "a paper"
source = "Table 9"
metric = "acc_weighted_mean"
metric_label = "pooled accuracy"
baseline = "fedavg"
seeds = [0, 1]
reduced = "2 rounds"
unstated = ["nothing"]
also = {acc_mean = "mean client accuracy"}

[run]
rules = ["fedavg", "fairavg"]
clients = 10
per_round = 2
rounds = 2
eval_every = 2

[[column]]
name = "Synthetic, K' = 2"
paper = {fedavg = 75.9, fairavg = 76.4}
"""


def test_a_tiny_table_runs_and_writes_its_comparison(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TABLE)
    out = tmp_path / "out"
    table = run_table(load_table(path), None, out, command="fastfair reproduce tiny.toml")
    assert [(r.metric, r.rule) for r in table.rows] == [
        ("acc_weighted_mean", "fedavg"), ("acc_weighted_mean", "fairavg"),
        ("acc_mean", "fedavg"), ("acc_mean", "fairavg")]
    base, fair = table.rows[:2]
    assert base.verdict == "baseline" and base.paper == 75.9 and base.seeds == 2
    assert fair.paper_diff == pytest.approx(0.5)
    assert fair.verdict == verdict(0.5, fair.ours_diff, fair.ours_diff_half, 0.5)[0]
    assert table.rows[3].verdict == "no paper number"  # an ``also`` metric
    with open(out / "table.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == (*FIELDS, "machine") and len(rows) == 4
    assert rows[0]["machine"].endswith(", 1 thread") and rows[0]["diverged"] == ""
    record = json.loads((out / "table.json").read_text())
    assert record["seeds"] == [0, 1] and record["full"] is False
    assert record["command"] == "fastfair reproduce tiny.toml"
    assert record["machine"]["device"] == "cpu" and record["machine"]["cpu"]
    assert record["machine"]["gpu"] is None and record["unfinished"] == []
    text = (out / "table.md").read_text()
    assert "| Synthetic, K' = 2 | `acc_weighted_mean` | fairavg | 76.4 |" in text
    assert "Reduced: 2 rounds" in text and "- nothing" in text
    assert "| detectable | converged (drift / limit) |" in text and "| unchecked |" in text
    assert (out / "synthetic-k-2").is_dir()  # the column's sweep folder


def test_a_table_reading_files_needs_the_data_dir(tmp_path):
    path = tmp_path / "files.toml"
    path.write_text(TABLE.replace("[[column]]\n", "[[column]]\ndata = \"mnist\"\n")
                    .replace("clients = 10", "dataset = \"mnist\"\nclients = 10"))
    with pytest.raises(ValueError, match="--data-dir must be the folder"):
        run_table(load_table(path), None, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_a_used_out_folder_is_refused(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TABLE)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    with pytest.raises(ValueError, match="--out .* must be an empty folder"):
        run_table(load_table(path), None, tmp_path / "out")


def test_accuracies_are_shown_in_percent_and_their_variance_in_percent_squared(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TABLE)
    spec = load_table(path)
    fractions = {("fedavg", 0): 0.0072, ("fedavg", 1): 0.0070, ("fairavg", 0): 0.0062,
                 ("fairavg", 1): 0.0061}
    variance = column_rows(spec, spec.columns[0], "acc_variance", fractions,
                           ["fedavg", "fairavg"], 1.0)
    assert variance[0].ours_mean == pytest.approx(71.0)
    assert variance[1].ours_diff == pytest.approx(-9.5)
    accuracy = column_rows(spec, spec.columns[0], "acc_weighted_mean", fractions,
                           ["fedavg", "fairavg"], 1.0)
    assert accuracy[0].ours_mean == pytest.approx(0.71)
    auroc = column_rows(spec, spec.columns[0], "auroc_worst10", fractions,
                        ["fedavg", "fairavg"], 1.0)
    assert auroc[1].ours_mean == pytest.approx(0.615)


DIVERGING = TABLE.replace('rules = ["fedavg", "fairavg"]\nclients = 10\nper_round = 2',
                          'rules = ["fedavg", "fedprox"]\nclients = 30\nper_round = 6\n'
                          'rule_options = {fedprox = {mu = 1e30}}').replace("fairavg", "fedprox")


def test_diverged_runs_are_marked_and_counted_in_no_number(tmp_path, monkeypatch):
    from fastfair.aggregators.objectives import ProximalObjective

    monkeypatch.setattr(ProximalObjective, "check_step", lambda self, lr: None)  # to diverge
    path = tmp_path / "tiny.toml"
    path.write_text(DIVERGING)
    table = run_table(load_table(path), None, tmp_path / "out")
    base, prox = table.rows[:2]
    assert base.diverged == "" and base.seeds == 2
    assert prox.diverged == "seed 0 at round 1; seed 1 at round 1; 0 of 2 seeds"
    assert prox.seeds == 0 and math.isnan(prox.ours_mean) and prox.ours_diff is None
    assert prox.verdict == "diverged"
    record = json.loads((tmp_path / "out" / "table.json").read_text())
    assert record["rows"][1]["ours_mean"] is None and record["rows"][1]["verdict"] == "diverged"
    assert "diverged: seed 0 at round 1" in (tmp_path / "out" / "table.md").read_text()


def test_some_diverged_seeds_leave_the_others_counted(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TABLE)
    spec = load_table(path)
    values = {("fedavg", 0): 0.5, ("fedavg", 1): 0.6, ("fairavg", 0): 0.7}
    rows = column_rows(spec, spec.columns[0], "acc_weighted_mean", values,
                       ["fedavg", "fairavg"], 1.0, {("fairavg", 1): 354})
    assert rows[1].seeds == 1 and rows[1].ours_mean == pytest.approx(70.0)
    assert rows[1].ours_diff == pytest.approx(20.0)  # paired on seed 0 only
    assert rows[1].diverged == "seed 1 at round 354; 1 of 2 seeds"


def _tables(out):
    """A table's outputs without wall times and the machine: what a rerun must equal."""
    rows = json.loads((out / "table.json").read_text())["rows"]
    md = [line for line in (out / "table.md").read_text().splitlines() if line.startswith("| ")]
    metrics = {p.parent.name: {run: [{k: v for k, v in r.items() if k != "seconds"}
                                     for r in history]
                               for run, history in json.loads(p.read_text()).items()}
               for p in sorted(out.glob("*/metrics.json"))}
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows], md, metrics


@pytest.mark.parametrize("every", [0, 1], ids=["column-rerun", "column-from-checkpoint"])
def test_a_table_stopped_by_a_signal_is_finished_by_resume(tmp_path, monkeypatch, capsys, every):
    import os
    import signal

    from fastfair import cli
    from fastfair.reproduce import column

    path = tmp_path / "two.toml"
    path.write_text(TABLE.replace("rounds = 2", "rounds = 4") + TABLE[TABLE.index("[[column]]"):]
                    .replace("K' = 2", "K' = 3"))
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    argv = ["reproduce", str(path), "--quiet", "--checkpoint-every", str(every)]
    assert cli.main([*argv, "--out", str(whole)]) == 0
    log_column = column.log_column

    def interrupt_second(i, *args):  # Ctrl-C as the second column starts
        if i == 1:
            os.kill(os.getpid(), signal.SIGINT)
        log_column(i, *args)

    monkeypatch.setattr(column, "log_column", interrupt_second)
    capsys.readouterr()
    assert cli.main([*argv, "--out", str(stopped)]) == 130
    err = capsys.readouterr().err
    assert f"Resume with: fastfair reproduce --resume {stopped}" in err
    partial = json.loads((stopped / "table.json").read_text())
    assert partial["unfinished"] == ["Synthetic, K' = 3"] and len(partial["rows"]) == 4
    assert "**Unfinished**" in (stopped / "table.md").read_text()
    monkeypatch.setattr(column, "log_column", log_column)
    assert cli.main(["reproduce", "--resume", str(stopped), "--quiet"]) == 0
    assert _tables(stopped) == _tables(whole)
    assert json.loads((stopped / "table.json").read_text())["unfinished"] == []
    assert cli.main(["reproduce", "--resume", str(stopped), "--seeds", "1"]) == 2
    assert "drop --seeds" in capsys.readouterr().err
def test_convergence_compares_the_late_drift_with_the_spread_across_seeds():
    # 8 evaluations: the window is the last max(3, ceil(0.25 * 8)) = 3 of them.
    settled = [[50, 60, 70, 80, 81.0, 80.5, 80.8, 81.0], [40, 55, 70, 78, 79, 79.2, 79.0, 79.4]]
    ok, drift, limit = convergence(settled, tie=0.5)
    # ranges 81.0 - 80.5 = 0.5 and 79.4 - 79.0 = 0.4; sd of (81.0, 79.4) = 1.1314
    assert ok and drift == pytest.approx(0.45) and limit == pytest.approx(1.6 / math.sqrt(2))
    swinging = [[30, 80, 40, 85, 33, 87, 35, 86.0], [30, 70, 50, 80, 40, 84, 36, 83.0]]
    ok, drift, limit = convergence(swinging, tie=0.5)
    # ranges 87 - 35 = 52 and 84 - 36 = 48; sd of (86, 83) = 2.1213
    assert not ok and drift == pytest.approx(50.0) and limit == pytest.approx(3 / math.sqrt(2))
    # identical seeds: the tie is the limit
    assert convergence([[1, 2, 3.0, 3.2, 3.4]], tie=0.5) == (True, pytest.approx(0.4), 0.5)
    assert convergence([[1.0, 2.0]], tie=0.5) == (None, None, None)


def test_a_rule_or_baseline_that_has_not_converged_gets_no_verdict(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TABLE)
    spec = load_table(path)
    finals = {("fedavg", 0): 0.80, ("fedavg", 1): 0.81, ("fairavg", 0): 0.90,
              ("fairavg", 1): 0.92}
    flat = {k: [v - 0.001, v, v] for k, v in finals.items()}
    rows = column_rows(spec, spec.columns[0], "acc_weighted_mean", finals,
                       ["fedavg", "fairavg"], 1.0, curves=flat)
    assert rows[0].converged is True and rows[1].converged is True
    assert rows[1].verdict == verdict(0.5, rows[1].ours_diff, rows[1].ours_diff_half, 0.5)[0]
    swinging = {**flat, **{("fedavg", s): [0.3, 0.87, finals[("fedavg", s)]] for s in (0, 1)}}
    rows = column_rows(spec, spec.columns[0], "acc_weighted_mean", finals,
                       ["fedavg", "fairavg"], 1.0, curves=swinging)
    assert rows[0].converged is False and rows[0].drift == pytest.approx(57.0)
    assert rows[1].converged is True and rows[1].verdict == NOT_CONVERGED
    assert rows[1].why.startswith("fedavg moves 57.0 over its last evaluations")
    unchecked = column_rows(spec, spec.columns[0], "acc_weighted_mean", finals,
                            ["fedavg", "fairavg"], 1.0)
    assert unchecked[1].converged is None and "convergence unchecked" in unchecked[1].why
