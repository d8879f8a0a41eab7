"""What a sweep writes, from hand-made runs: the terminal table's cells, the summary and per-run
CSV/JSON read back, and the plots (valid PNGs holding the numbers of the summary)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from fastfair.sim.reporting.stats import SweepRun, select, summarize
from fastfair.sim.reporting.sweep_report import (
    bounded,
    clipped_errors,
    column_blocks,
    curve_band,
    label,
    plot_curves,
    plot_tradeoff,
    sweep_table,
    write_sweep,
)

T2 = 12.706205  # t(1, .975): the interval of two seeds
T3 = 4.302653   # t(2, .975)
PNG = b"\x89PNG\r\n\x1a\n"


def _run(rule, seed, options=None, rounds=(5, 10), **last):
    """A run whose evaluation rounds end at the given values (earlier rounds at fractions of
    them), with a training-only round between."""
    history = [{"round": t, "participants": 4, "seconds": 0.1,
                **{k: v * t / rounds[-1] for k, v in last.items()}} for t in rounds]
    history.insert(1, {"round": rounds[0] + 1, "participants": 4, "train_loss": 0.5})
    return SweepRun(rule, dict(options or {}), seed, history, np.array([0.5, 0.7]), 2.0)


def _sweep(seeds=(0, 1)):
    """fedavg and term (two tilts, tilt 1 better on validation, tilt 10 on test)."""
    runs = []
    for seed in seeds:
        for tilt, val, acc in ((1, 0.7, 0.5), (10, 0.6, 0.9)):
            runs.append(_run("term", seed, {"tilt": tilt}, acc_mean=acc + seed / 10,
                             acc_worst10=0.2, acc_gini=0.2, acc_variance=0.001,
                             val_acc_mean=val))
        runs.append(_run("fedavg", seed, acc_mean=0.4 + seed / 10, acc_worst10=0.1 * seed,
                         acc_gini=0.3, acc_variance=0.002 + 0.001 * seed))
    return runs


METRICS = ["acc_mean", "acc_worst10", "acc_gini", "acc_variance"]


def test_bounded_metrics_and_labels():
    assert all(bounded(m) for m in ("acc_mean", "val_acc_worst10", "acc_gini", "acc_parity_gap"))
    assert not any(bounded(m) for m in ("acc_variance", "test_loss", "val_loss"))
    assert label("acc_worst10") == "worst 10%" and label("val_acc_worst10") == "val worst 10%"
    assert label("max_share") == "max_share"


def test_error_bars_are_clipped_to_the_range_of_the_metric():
    assert clipped_errors(0.1, 0.3) == ([pytest.approx(0.1)], [pytest.approx(0.3)])
    assert clipped_errors(0.9, 0.3) == ([pytest.approx(0.3)], [pytest.approx(0.1)])
    assert clipped_errors(0.5, float("nan")) is None


def test_table_cells_are_hand_computed():
    runs = _sweep()
    rows = summarize(runs, METRICS, "fedavg", select(runs))
    table = sweep_table(rows, METRICS, "fedavg")
    lines = table.splitlines()
    assert lines[0].split() == ["point", "n", "mean", "acc", "worst", "10%", "Gini", "variance",
                                "Δ", "mean", "acc", "Δ", "worst", "10%", "Δ", "Gini", "Δ",
                                "variance"]
    term1, term10, fedavg = (next(line for line in lines if line.startswith(p))
                             for p in ("*term(tilt=1)", " term(tilt=10)", "*fedavg"))
    # term(tilt=1): acc 0.5, 0.6 -> 0.550 ± T2 * 0.05; worst 0.2; Gini 0.2 exactly;
    # variance 0.001; paired on fedavg (0.4, 0.5): +0.100 ± 0. Fractions, as recorded.
    half = f"{T2 * 0.05:.3f}"
    assert f"0.550 ± {half}" in term1 and "0.200 ± 0.000" in term1
    assert "0.0010 ± 0.0000" in term1
    assert "+0.100 ± 0.000" in term1 and "-0.100 ± 0.000" in term1
    # Δ worst 10 %: 0.2 - (0, 0.1) = 0.2, 0.1 -> +0.150 ± T2 * 0.05
    assert f"+0.150 ± {half}" in term1
    # fedavg variance 0.002, 0.003 -> 0.0025 ± T2 * 0.0005; it is the baseline.
    assert f"0.0025 ± {T2 * 0.0005:.4f}" in fedavg and fedavg.count("baseline") == 4
    assert "95% Student-t" in table and "paired on seeds" in table
    assert "accuracies as fractions in [0, 1]" in table
    assert "chosen on the validation split" in table
    assert "+0.500" in term10  # tilt 10's test accuracy 0.9, 1.0 against fedavg's 0.4, 0.5


def test_table_without_a_choice_or_a_baseline_or_a_second_seed():
    runs = [_run("fedavg", 0, acc_mean=0.5), _run("afl", 0, acc_mean=0.25)]
    table = sweep_table(summarize(runs, ["acc_mean"], None, select(runs)), ["acc_mean"], None)
    assert "*" not in table and "Δ" not in table and "validation" not in table
    assert " fedavg" in table and "0.500" in table and "±" not in table.splitlines()[2]
    with pytest.raises(ValueError, match="rows is empty"):
        sweep_table([], ["acc_mean"], None)


def _read(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def test_write_sweep_writes_the_summary_the_runs_and_the_plots(tmp_path):
    runs = _sweep()
    selection = select(runs)
    rows = summarize(runs, METRICS, "fedavg", selection)
    paths = write_sweep(tmp_path, runs, rows, selection, METRICS, "fedavg", "acc_mean")
    assert [p.name for p in paths] == ["sweep_summary.csv", "sweep_summary.json",
                                       "sweep_runs.csv", "tradeoff.png", "curves.png"]
    assert all(p.parent == tmp_path for p in paths)

    columns, summary = _read(tmp_path / "sweep_summary.csv")
    assert columns == (["point", "rule", "options", "n", "selected"]
                       + [f"{m}_{s}" for m in METRICS for s in ("mean", "ci")]
                       + [f"{m}_{s}" for m in METRICS for s in ("diff", "diff_ci")])
    assert [(r["point"], r["rule"], json.loads(r["options"]), r["n"], r["selected"])
            for r in summary] == [("term(tilt=1)", "term", {"tilt": 1}, "2", "True"),
                                  ("term(tilt=10)", "term", {"tilt": 10}, "2", "False"),
                                  ("fedavg", "fedavg", {}, "2", "True")]
    term1, _, fedavg = summary
    assert float(term1["acc_mean_mean"]) == pytest.approx(0.55)
    assert float(term1["acc_mean_ci"]) == pytest.approx(T2 * 0.05, rel=1e-6)
    assert float(term1["acc_mean_diff"]) == pytest.approx(0.1)
    assert float(term1["acc_worst10_diff"]) == pytest.approx(0.15)
    assert float(term1["acc_worst10_diff_ci"]) == pytest.approx(T2 * 0.05, rel=1e-6)
    assert fedavg["acc_mean_diff"] == fedavg["acc_mean_diff_ci"] == ""  # the baseline

    text = (tmp_path / "sweep_summary.json").read_text()
    saved = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert saved["selection"] == {"term": {"tilt": 1}, "fedavg": {}}
    assert (saved["baseline"], saved["select"], saved["select_on"]) == ("fedavg", "acc_mean",
                                                                        "val_acc_mean")
    assert saved["metrics"] == METRICS and saved["confidence"] == 0.95
    assert [p["options"] for p in saved["points"]] == [{"tilt": 1}, {"tilt": 10}, {}]
    assert saved["points"][0]["acc_gini_diff"] == pytest.approx(-0.1)
    assert saved["points"][2]["acc_gini_diff"] is None

    columns, per_run = _read(tmp_path / "sweep_runs.csv")
    assert columns == ["rule", "point", "options", "seed", "seconds", "acc_mean", "acc_worst10",
                       "acc_gini", "acc_variance", "val_acc_mean", "train_loss"]
    assert len(per_run) == len(runs) == 6
    assert [(r["point"], r["seed"]) for r in per_run] == [(run.point, str(run.seed))
                                                          for run in runs]
    first = per_run[0]
    assert (float(first["acc_mean"]), float(first["val_acc_mean"]), first["seconds"]) == (
        0.5, 0.7, "2.000")
    assert per_run[2]["val_acc_mean"] == "" and float(per_run[2]["train_loss"]) == 0.5

    import matplotlib.image

    for name in ("tradeoff.png", "curves.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
        height, width, _ = matplotlib.image.imread(tmp_path / name).shape
        assert height > 300 and width > 800


def test_write_sweep_writes_null_for_the_interval_of_one_seed(tmp_path):
    runs = [_run("fedavg", 0, acc_mean=0.5, acc_worst10=0.1, acc_gini=0.2),
            _run("afl", 0, acc_mean=0.4, acc_worst10=0.2, acc_gini=0.1)]
    metrics = ["acc_mean"]
    rows = summarize(runs, metrics, "fedavg")
    write_sweep(tmp_path, runs, rows, select(runs), metrics, "fedavg")
    _, summary = _read(tmp_path / "sweep_summary.csv")
    assert summary[1]["acc_mean_ci"] == ""
    assert float(summary[1]["acc_mean_diff"]) == pytest.approx(-0.1)
    saved = json.loads((tmp_path / "sweep_summary.json").read_text(),
                       parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert saved["points"][1]["acc_mean_diff_ci"] is None


@pytest.fixture
def figures(monkeypatch):
    """The figures saved while a test runs (they stay readable after plt.close)."""
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_tradeoff_plots_the_selected_points_at_their_means(tmp_path, figures):
    runs = _sweep()
    selection = select(runs)
    write_sweep(tmp_path, runs, summarize(runs, METRICS, None, selection), selection, METRICS,
                None)
    tradeoff, curves = figures
    left, right = tradeoff.axes
    # One marker per selected point: term(tilt=1) (0.55, 0.2), fedavg (0.45, 0.05), named
    # in one legend beside the panels, never by labels over the markers.
    markers = [c.lines[0].get_xydata()[0].tolist() for c in left.containers]
    assert markers == [pytest.approx([0.55, 0.2]), pytest.approx([0.45, 0.05])]
    assert len(left.texts) == 0 and left.get_legend() is None
    assert [t.get_text() for t in tradeoff.legends[0].get_texts()] == ["term(tilt=1)", "fedavg"]
    assert [c.lines[0].get_xydata()[0].tolist() for c in right.containers] == [
        pytest.approx([0.55, 0.2]), pytest.approx([0.45, 0.3])]
    assert "CI" in tradeoff.get_suptitle() and "clipped to [0, 1]" in tradeoff.get_suptitle()
    # Two seeds: the curves' band is the range, and the title says so.
    assert "min-max" in curves.get_suptitle()
    assert [line.get_label() for line in curves.axes[0].lines] == ["term(tilt=1)", "fedavg"]
    assert curves.axes[0].lines[0].get_xydata().tolist() == [[5, 0.275], [10, 0.55]]


def test_tradeoff_error_bars_stop_at_zero_for_a_close_result(tmp_path, figures):
    # Two seeds far apart: the t interval (t = 12.7) of the worst 10 % runs below 0.
    runs = [_run("fedavg", s, acc_mean=0.5, acc_worst10=0.02 + 0.04 * s, acc_gini=0.2)
            for s in (0, 1)]
    plot_tradeoff(tmp_path / "tradeoff.png", runs)
    (fig,) = figures
    bars = fig.axes[0].containers[0].lines[2]   # x bars, then y bars
    low = min(float(seg[:, 1].min()) for seg in bars[1].get_segments())
    assert low == pytest.approx(0.0)


def test_curves_band_is_the_ci_from_three_seeds_on_the_shared_rounds(tmp_path, figures):
    runs = [_run("fedavg", s, acc_mean=0.3 + 0.1 * s, acc_worst10=0.1) for s in (0, 1)]
    runs.append(_run("fedavg", 2, rounds=(2, 5, 10), acc_mean=0.5, acc_worst10=0.1))
    plot_curves(tmp_path / "curves.png", runs)
    (fig,) = figures
    assert "95% Student-t CI" in fig.get_suptitle() and "min-max" not in fig.get_suptitle()
    line = fig.axes[0].lines[0]
    # Round 2 is only in seed 2's run: the curve keeps rounds 5 and 10.
    assert line.get_xydata() == pytest.approx(np.array([[5, 0.2], [10, 0.4]]))
    band = fig.axes[0].collections[0].get_paths()[0].vertices
    assert band[:, 1].max() == pytest.approx(0.4 + T3 * 0.1 / math.sqrt(3), rel=1e-6)


def test_curve_band_is_hand_computed_and_clipped_to_zero_and_one():
    values = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.9]])
    mean, low, high = curve_band(values, "CI")
    assert mean.tolist() == pytest.approx([0.3, 0.5])
    # Column 0: s = 0.2; column 1: deviations -0.3, -0.1, 0.4 -> s = sqrt(0.13).
    half = T3 * np.array([0.2, math.sqrt(0.13)]) / math.sqrt(3)
    assert high == pytest.approx(np.minimum(mean + half, 1.0), rel=1e-6)
    assert low == pytest.approx(np.maximum(mean - half, 0.0), rel=1e-6)
    assert low[0] == 0.0 and high[1] == 1.0                 # both ends reached the bounds
    values = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]])
    mean, low, high = curve_band(values[:2], "min-max")
    assert (mean.tolist(), low.tolist(), high.tolist()) == ([2, 3], [1, 2], [3, 4])
    with pytest.raises(ValueError, match="kind"):
        curve_band(values, "sd")
    with pytest.raises(ValueError, match=r"values must be \[seeds, rounds\]"):
        curve_band(np.zeros(3), "CI")


def test_a_wide_table_splits_into_blocks_that_fit_the_width():
    runs = _sweep()
    rows = summarize(runs, METRICS, "fedavg", select(runs))
    whole = sweep_table(rows, METRICS, "fedavg").splitlines()
    assert len(whole[0]) > 80
    split = sweep_table(rows, METRICS, "fedavg", width=80).splitlines()
    assert max(map(len, split)) <= 80                 # the notes wrapped too
    table = split[:split.index(next(line for line in split if line.startswith("(mean")))]
    headers = [line for line in table if line.startswith("point")]
    assert len(headers) >= 2                      # every block repeats the point and n
    names = [h.split(None, 2)[2] for h in headers]
    assert " ".join(names).split() == whole[0].split()[2:]   # every column once, in order
    assert sum(line.startswith("*term(tilt=1)") for line in table) == len(headers)


def test_column_blocks_keep_order_and_put_a_too_wide_column_alone():
    assert column_blocks([10, 10, 10], 5, None) == [[0, 1, 2]]
    assert column_blocks([10, 10, 10], 5, 25) == [[0, 1], [2]]
    assert column_blocks([50, 10], 5, 25) == [[0], [1]]


def test_plots_leave_pyplots_backend_and_figures_alone(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    plt.switch_backend("svg")            # a notebook's or a user's own choice, not Agg
    try:
        opened = plt.get_fignums()
        runs = _sweep()
        plot_tradeoff(tmp_path / "t.png", runs)
        plot_curves(tmp_path / "c.png", runs)
        assert (tmp_path / "t.png").read_bytes().startswith(PNG)
        assert (tmp_path / "c.png").read_bytes().startswith(PNG)
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == opened
    finally:
        plt.switch_backend(before)
