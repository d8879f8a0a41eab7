"""A sweep's statistics by hand: Student-t intervals, pairing on seeds, selection on the
validation split only, and the summary rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastfair.sim.reporting.stats import (
    LOWER_IS_BETTER,
    SweepRun,
    by_point,
    lower_is_better,
    mean_ci,
    options_json,
    paired_difference,
    point_label,
    select,
    summarize,
    validation_metric,
)


def _run(rule, seed, options=None, **last):
    """A run whose evaluation rounds 5 and 10 end at the given metric values (round 5 at half
    of them), with a training-only round 7 between."""
    first = {k: v / 2 for k, v in last.items()}
    history = [{"round": 5, **first}, {"round": 7, "train_loss": 1.0}, {"round": 10, **last}]
    return SweepRun(rule, dict(options or {}), seed, history, np.array([0.5, 0.7]), 1.0)


# -------------------------------------------------------------------------- intervals
def test_mean_ci_is_the_student_t_interval():
    mean, half = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)  # t(2, .975) * s / sqrt(n)
    # s = 1 again; t(2, .995) = 9.924843 and t(4, .975) = 2.776445 (tables).
    assert mean_ci([1.0, 2.0, 3.0], confidence=0.99)[1] == pytest.approx(9.924843 / math.sqrt(3),
                                                                          rel=1e-6)
    values = [0.2, 0.4, 0.1, 0.5, 0.3]  # mean 0.3, s = sqrt(0.025)
    assert mean_ci(values) == pytest.approx((0.3, 2.776445 * math.sqrt(0.025 / 5)), rel=1e-6)
    assert mean_ci([7.0, 7.0]) == (7.0, 0.0)
    mean, half = mean_ci([4.0])
    assert mean == 4.0 and math.isnan(half)


@pytest.mark.parametrize("values, confidence, message", [
    ([], 0.95, "values is empty"),
    ([1.0, float("nan")], 0.95, "values must be finite"),
    ([1.0, float("inf")], 0.95, "values must be finite"),
    ([1.0, 2.0], 1.5, "confidence"),
    ([1.0, 2.0], 0.0, "confidence"),
])
def test_mean_ci_refuses_bad_input(values, confidence, message):
    with pytest.raises(ValueError, match=message):
        mean_ci(values, confidence)


def test_pairing_on_seeds_removes_the_seed_offsets():
    offsets = {0: 0.1, 1: 0.6, 2: 0.3, 3: 0.9}  # most of the spread comes from the seed
    base = dict(offsets)
    rule = {s: o + 0.05 + 0.01 * s for s, o in offsets.items()}
    diff, half, n = paired_difference(rule, base)
    # d = 0.05, 0.06, 0.07, 0.08: mean 0.065, s = sqrt(5/3) * 0.01, t(3, .975) = 3.182446.
    assert n == 4 and diff == pytest.approx(0.065)
    assert half == pytest.approx(3.182446 * math.sqrt(5 / 3) * 0.01 / 2, rel=1e-6)
    unpaired = mean_ci(list(rule.values()))[1] + mean_ci(list(base.values()))[1]
    assert half < unpaired / 20
    assert half < 0.065 < unpaired  # the difference is clear paired, lost in noise unpaired


def test_pairing_uses_the_common_seeds_only():
    assert paired_difference({0: 1.0, 5: 2.0}, {5: 1.5, 7: 0.0})[::2] == (0.5, 1)
    mean, half, n = paired_difference({0: 1.0, 1: 3.0, 9: 100.0}, {0: 0.0, 1: 1.0, 2: -5.0})
    assert (mean, n) == (1.5, 2) and half == pytest.approx(12.706205 * 0.5, rel=1e-6)
    with pytest.raises(ValueError, match="share no seed"):
        paired_difference({0: 1.0}, {1: 1.0})
    with pytest.raises(ValueError, match="baseline must be finite"):
        paired_difference({0: 1.0, 1: 2.0}, {0: 1.0, 1: float("nan")})
    with pytest.raises(ValueError, match="values must be finite"):
        paired_difference({0: float("inf"), 1: 2.0}, {0: 1.0, 1: 1.0})


# -------------------------------------------------------------------------- runs and labels
def test_run_accessors_and_labels():
    run = _run("term", 3, {"tilt": 0.5, "a": "x"}, acc_mean=0.4)
    assert run.point == point_label("term", {"a": "x", "tilt": 0.5}) == "term(a=x,tilt=0.5)"
    assert point_label("fedavg", {}) == "fedavg"
    assert point_label("term", {"tilt": 1}) == "term(tilt=1)"
    assert point_label("q", {"q": np.float32(0.5), "on": True}) == "q(on=true,q=0.5)"
    assert options_json({"q": np.int64(2), "a": [1, "x"]}) == '{"a": [1, "x"], "q": 2}'
    assert run.last("acc_mean") == 0.4 and run.last("train_loss") == 1.0
    rounds, values = run.curve("acc_mean")
    assert rounds.tolist() == [5, 10] and values.tolist() == [0.2, 0.4]
    assert run.curve("train_loss")[0].tolist() == [7]
    with pytest.raises(KeyError, match=r"term\(a=x,tilt=0.5\) seed 3 .*'acc_gini'"):
        run.last("acc_gini")


def test_lower_is_better_covers_the_spread_and_the_losses():
    for metric in ("acc_variance", "acc_gini", "acc_parity_gap", "val_acc_variance",
                   "val_acc_gini", "val_acc_parity_gap", "test_loss", "val_loss", "train_loss"):
        assert lower_is_better(metric) and metric in LOWER_IS_BETTER
    for metric in ("acc_mean", "acc_worst10", "val_acc_worst10", "acc_best5",
                   "acc_worst_group", "val_acc_weighted_mean"):
        assert not lower_is_better(metric)
    assert validation_metric("acc_worst10") == "val_acc_worst10"
    assert validation_metric("test_loss") == "val_loss"
    assert validation_metric("val_acc_gini") == "val_acc_gini"


def test_runs_group_by_point_in_order_of_first_appearance():
    runs = [_run("term", 0, {"tilt": 2}), _run("fedavg", 0), _run("term", 1, {"tilt": 2})]
    groups = by_point(runs)
    assert list(groups) == ["term(tilt=2)", "fedavg"]
    assert [r.seed for r in groups["term(tilt=2)"]] == [0, 1]
    with pytest.raises(ValueError, match="runs is empty"):
        by_point([])


# -------------------------------------------------------------------------- selection
def test_selection_reads_the_validation_metric_only():
    runs = []
    for seed in (0, 1):
        # tilt 1 is better on validation, tilt 10 on test: the choice must be tilt 1.
        runs.append(_run("term", seed, {"tilt": 10}, val_acc_mean=0.6, acc_mean=0.9))
        runs.append(_run("term", seed, {"tilt": 1}, val_acc_mean=0.8, acc_mean=0.1))
        runs.append(_run("fedavg", seed, acc_mean=0.5))
    assert select(runs) == {"term": {"tilt": 1}, "fedavg": {}}
    # The mean over seeds decides: tilt 10 wins seed 1 by 0.1, loses seed 0 by 0.3.
    split = [_run("term", 0, {"tilt": 1}, val_acc_mean=0.8),
             _run("term", 0, {"tilt": 10}, val_acc_mean=0.5),
             _run("term", 1, {"tilt": 1}, val_acc_mean=0.5),
             _run("term", 1, {"tilt": 10}, val_acc_mean=0.6)]
    assert select(split) == {"term": {"tilt": 1}}
    # The last value counts: tilt 1 leads at round 5 and trails at round 10.
    late = [SweepRun("term", {"tilt": t}, 0, [{"round": 5, "val_acc_mean": a},
                                               {"round": 10, "val_acc_mean": b}],
                     np.zeros(2), 1.0) for t, a, b in ((1, 0.9, 0.1), (2, 0.5, 0.5))]
    assert select(late) == {"term": {"tilt": 2}}


def test_selection_minimises_the_metrics_where_lower_is_better():
    gini = [_run("term", 0, {"tilt": t}, val_acc_gini=g, acc_gini=1 - g)
            for t, g in ((1, 0.3), (10, 0.2), (100, 0.25))]
    assert select(gini, "acc_gini") == {"term": {"tilt": 10}}
    # test_loss is chosen on val_loss: the validation split's loss.
    loss = [_run("q", 0, {"q": q}, val_loss=v, test_loss=-v) for q, v in ((1, 0.9), (2, 0.4))]
    assert select(loss, "test_loss") == {"q": {"q": 2}}


def test_selection_ties_go_to_the_first_point_and_diverged_points_lose():
    tie = [_run("term", 0, {"tilt": t}, val_acc_mean=0.5) for t in (3, 1, 2)]
    assert select(tie) == {"term": {"tilt": 3}}
    diverged = [_run("term", 0, {"tilt": 1}, val_loss=float("nan")),
                _run("term", 0, {"tilt": 2}, val_loss=5.0),
                _run("term", 0, {"tilt": 3}, val_loss=float("inf"))]
    assert select(diverged, "test_loss") == {"term": {"tilt": 2}}
    assert select([diverged[0], diverged[2]], "test_loss") == {"term": {"tilt": 1}}


def test_selection_without_a_validation_metric_is_refused():
    assert select([_run("fedavg", 0, acc_mean=0.5)]) == {"fedavg": {}}  # one point: no choice
    no_split = [_run("term", 0, {"tilt": 1}, acc_mean=0.5),
                _run("term", 0, {"tilt": 2}, acc_mean=0.6)]
    with pytest.raises(ValueError, match="2 grid points of term needs 'val_acc_mean'.*"
                                         "validation split.*--validation"):
        select(no_split)
    misspelt = [_run("term", 0, {"tilt": t}, val_acc_mean=0.5) for t in (1, 2)]
    with pytest.raises(ValueError, match="'val_acc_worst_10'.*recorded val_acc_mean"):
        select(misspelt, "acc_worst_10")
    with pytest.raises(ValueError, match="runs is empty"):
        select([])


# -------------------------------------------------------------------------- summary rows
def test_summary_rows_hold_the_intervals_and_the_paired_differences():
    runs = [_run("fedavg", s, acc_mean=0.5 + 0.1 * s, acc_gini=0.3) for s in (0, 1, 2)]
    runs += [_run("afl", s, acc_mean=0.6 + 0.1 * s + 0.01 * (s == 2), acc_gini=0.2)
             for s in (0, 1, 2)]
    rows = summarize(runs, ["acc_mean", "acc_gini"], baseline="fedavg")
    assert [(r.point, r.n, r.seeds, r.selected) for r in rows] == [
        ("fedavg", 3, [0, 1, 2], True), ("afl", 3, [0, 1, 2], True)]
    assert rows[0].differences == {}
    assert rows[0].values["acc_mean"] == pytest.approx((0.6, 4.302653 * 0.1 / math.sqrt(3)))
    assert rows[1].values["acc_gini"] == pytest.approx((0.2, 0.0), abs=1e-12)
    # d = 0.1, 0.1, 0.11: mean 0.10333, s = 0.0057735.
    diff, half = rows[1].differences["acc_mean"]
    assert diff == pytest.approx(0.31 / 3)
    assert half == pytest.approx(4.302653 * 0.01 / math.sqrt(3) / math.sqrt(3), rel=1e-5)
    assert rows[1].differences["acc_gini"] == pytest.approx((-0.1, 0.0), abs=1e-12)
    assert summarize(runs, ["acc_mean"])[1].differences == {}


def test_summary_pairs_against_the_selected_baseline_point():
    runs = []
    for s in (0, 1):
        runs.append(_run("term", s, {"tilt": 1}, acc_mean=0.5, val_acc_mean=0.9))
        runs.append(_run("term", s, {"tilt": 5}, acc_mean=0.7, val_acc_mean=0.1))
        runs.append(_run("fedavg", s, acc_mean=0.6))
    selection = select(runs)
    rows = summarize(runs, ["acc_mean"], baseline="term", selection=selection)
    by = {r.point: r for r in rows}
    assert [r.point for r in rows] == ["term(tilt=1)", "term(tilt=5)", "fedavg"]
    assert by["term(tilt=1)"].selected and not by["term(tilt=5)"].selected
    assert by["term(tilt=1)"].differences == {}  # the reference point itself
    assert by["term(tilt=5)"].differences["acc_mean"][0] == pytest.approx(0.2)
    assert by["fedavg"].differences["acc_mean"][0] == pytest.approx(0.1)
    # Selection None: every point is shown as selected, and the baseline must be unique.
    assert all(r.selected for r in summarize(runs, ["acc_mean"]))
    with pytest.raises(ValueError, match="baseline 'term' has 2 grid points"):
        summarize(runs, ["acc_mean"], baseline="term")
    with pytest.raises(ValueError, match="none of its grid points"):
        summarize(runs, ["acc_mean"], baseline="term", selection={"term": {"tilt": 3}})
    with pytest.raises(ValueError, match="baseline 'afl' has no runs"):
        summarize(runs, ["acc_mean"], baseline="afl")
    with pytest.raises(KeyError, match="acc_gini"):
        summarize(runs, ["acc_gini"])


def test_summary_of_a_diverged_run_is_nan_not_an_error():
    runs = [_run("fedavg", s, test_loss=1.0 + s) for s in (0, 1)]
    runs += [_run("term", 0, test_loss=float("nan")), _run("term", 1, test_loss=2.0)]
    rows = summarize(runs, ["test_loss"], baseline="fedavg")
    assert rows[0].values["test_loss"] == pytest.approx((1.5, 12.706205 * 0.5))
    assert all(math.isnan(x) for x in rows[1].values["test_loss"])
    assert all(math.isnan(x) for x in rows[1].differences["test_loss"])
