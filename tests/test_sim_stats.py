"""A sweep's statistics by hand: Student-t intervals, pairing on seeds, selection on the
validation split only, and the files and table of the report."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from fastfair.sim.stats import (SweepRun, lower_is_better, mean_ci, paired_difference,
                                point_label, select, summarize)
from fastfair.sim.sweep_report import sweep_table, write_sweep


def _run(rule, seed, options=None, **last):
    """A run whose evaluation rounds 5 and 10 end at the given metric values."""
    first = {k: v / 2 for k, v in last.items()}
    history = [{"round": 5, **first}, {"round": 10, **last}]
    return SweepRun(rule, dict(options or {}), seed, history, np.array([0.5, 0.7]), 1.0)


def test_mean_ci_is_the_student_t_interval():
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)  # t(2, .975) * s / sqrt(n)
    assert math.isnan(mean_ci([4.0])[1])
    with pytest.raises(ValueError, match="values is empty"):
        mean_ci([])
    with pytest.raises(ValueError, match="finite"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        mean_ci([1.0, 2.0], confidence=1.5)


def test_pairing_on_seeds_removes_the_seed_offsets():
    offsets = {0: 0.1, 1: 0.6, 2: 0.3, 3: 0.9}  # most of the spread comes from the seed
    base = {s: o for s, o in offsets.items()}
    rule = {s: o + 0.05 + 0.01 * s for s, o in offsets.items()}
    diff, half, n = paired_difference(rule, base)
    assert n == 4 and diff == pytest.approx(0.065)
    unpaired = mean_ci(list(rule.values()))[1] + mean_ci(list(base.values()))[1]
    assert half < unpaired / 20
    assert paired_difference({0: 1.0, 5: 2.0}, {5: 1.5, 7: 0.0})[2] == 1
    with pytest.raises(ValueError, match="share no seed"):
        paired_difference({0: 1.0}, {1: 1.0})


def test_selection_reads_the_validation_metric_only():
    runs = []
    for seed in (0, 1):
        # tilt 1 is better on validation, tilt 10 on test: the choice must be tilt 1.
        runs.append(_run("term", seed, {"tilt": 1}, val_acc_mean=0.8, acc_mean=0.1))
        runs.append(_run("term", seed, {"tilt": 10}, val_acc_mean=0.6, acc_mean=0.9))
        runs.append(_run("fedavg", seed, acc_mean=0.5))
    assert select(runs) == {"term": {"tilt": 1}, "fedavg": {}}
    # Lower is better for Gini: the smaller validation Gini wins.
    gini = [_run("term", 0, {"tilt": t}, val_acc_gini=g) for t, g in ((1, 0.3), (10, 0.2))]
    assert select(gini, "acc_gini") == {"term": {"tilt": 10}}
    assert lower_is_better("val_acc_gini") and not lower_is_better("acc_worst10")
    with pytest.raises(ValueError, match="validation split"):
        select([_run("term", 0, {"tilt": 1}, acc_mean=0.5),
                _run("term", 0, {"tilt": 2}, acc_mean=0.6)])


def test_summary_rows_pair_against_the_chosen_baseline_point():
    runs = [_run("fedavg", s, acc_mean=0.5 + 0.1 * s) for s in (0, 1, 2)]
    runs += [_run("afl", s, acc_mean=0.6 + 0.1 * s) for s in (0, 1, 2)]
    rows = summarize(runs, ["acc_mean"], baseline="fedavg")
    assert [r.point for r in rows] == ["fedavg", "afl"]
    assert rows[0].differences == {}
    diff, half = rows[1].differences["acc_mean"]
    assert diff == pytest.approx(0.1) and half == pytest.approx(0.0, abs=1e-12)
    assert rows[1].values["acc_mean"][0] == pytest.approx(0.7)
    two = runs + [_run("fedavg", 0, {"x": 1}, acc_mean=0.1)]
    with pytest.raises(ValueError, match="2 grid points"):
        summarize(two, ["acc_mean"], baseline="fedavg")
    with pytest.raises(ValueError, match="no runs"):
        summarize(runs, ["acc_mean"], baseline="term")


def test_run_accessors_and_labels():
    run = _run("term", 3, {"tilt": 0.5, "a": "x"}, acc_mean=0.4)
    assert run.point == point_label("term", {"a": "x", "tilt": 0.5}) == "term(a=x,tilt=0.5)"
    rounds, values = run.curve("acc_mean")
    assert rounds.tolist() == [5, 10] and values.tolist() == [0.2, 0.4]
    with pytest.raises(KeyError, match="acc_gini"):
        run.last("acc_gini")


def test_report_writes_the_table_files_and_plots(tmp_path):
    metrics = ["acc_mean", "acc_worst10", "acc_gini"]
    runs = []
    for seed in (0, 1):
        for tilt, v in ((1, 0.7), (10, 0.6)):
            runs.append(_run("term", seed, {"tilt": tilt}, acc_mean=0.5 + seed / 10,
                             acc_worst10=0.1, acc_gini=0.2, val_acc_mean=v))
        runs.append(_run("fedavg", seed, acc_mean=0.4 + seed / 10, acc_worst10=0.0,
                         acc_gini=0.3))
    selection = select(runs)
    rows = summarize(runs, metrics, "fedavg", selection)
    table = sweep_table(rows, metrics, "fedavg")
    assert "*term(tilt=1)" in table and " term(tilt=10)" in table and "+10.00" in table
    paths = write_sweep(tmp_path, runs, rows, selection, metrics, "fedavg")
    assert {p.name for p in paths} == {"sweep_summary.csv", "sweep_summary.json",
                                       "sweep_runs.csv", "tradeoff.png", "curves.png"}
    with open(tmp_path / "sweep_summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert [r["point"] for r in summary] == ["term(tilt=1)", "term(tilt=10)", "fedavg"]
    assert float(summary[0]["acc_mean_diff"]) == pytest.approx(0.1)
    saved = json.loads((tmp_path / "sweep_summary.json").read_text())
    assert saved["selection"] == {"term": {"tilt": 1}, "fedavg": {}}
    with open(tmp_path / "sweep_runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 6
    for name in ("tradeoff.png", "curves.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
