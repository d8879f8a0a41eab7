"""``python -m bench compare``: the table and the regression gate over two runs' records."""

from __future__ import annotations

import json

import pytest

from bench import tracking


def _run(seconds_by_impl, smoke=False, threads=1):
    records = []
    for (case, impl), seconds in seconds_by_impl.items():
        records.append({"case": case, "impl": impl, "device": "cpu", "seconds": seconds,
                        "floor_seconds": 1e-3, "floor_kind": "copy",
                        "ratio_to_floor": seconds / 1e-3, "reference": "torch",
                        "ratio_to_reference": seconds / seconds_by_impl[(case, "torch")],
                        "fastfair": impl.startswith("fastfair"), "copy_bandwidth": 2e10})
    return {"schema": tracking.SCHEMA, "smoke": smoke,
            "machine": {"cpu": "test", "threads": threads}, "records": records}


BASE = {("softmax K=1e6", "fastfair"): 2e-3, ("softmax K=1e6", "torch"): 4e-3,
        ("eg_step K=1e6", "fastfair"): 3e-3, ("eg_step K=1e6", "torch"): 3e-3}


def test_a_run_compared_with_itself_passes():
    lines, regressions = tracking.compare(_run(BASE), [_run(BASE)])
    assert regressions == []
    assert any("softmax K=1e6" in line and "1.00x" in line for line in lines)


def test_a_twice_slower_fastfair_case_fails_and_is_named():
    slow = dict(BASE)
    slow[("eg_step K=1e6", "fastfair")] *= 2
    _, regressions = tracking.compare(_run(BASE), [_run(slow)])
    assert len(regressions) == 1 and regressions[0].startswith("cpu eg_step K=1e6 / fastfair")


def test_growth_within_the_band_and_slower_references_pass():
    new = dict(BASE)
    new[("eg_step K=1e6", "fastfair")] *= 0.9 * tracking.DEFAULT_BAND
    new[("softmax K=1e6", "torch")] *= 5
    assert tracking.compare(_run(BASE), [_run(new)])[1] == []


def test_several_new_runs_are_reduced_to_their_per_case_minimum():
    outlier = dict(BASE)
    outlier[("softmax K=1e6", "fastfair")] *= 8  # one run disturbed by another job
    assert tracking.compare(_run(BASE), [_run(outlier)])[1] != []
    lines, regressions = tracking.compare(_run(BASE), [_run(outlier), _run(BASE)])
    assert regressions == [] and lines[0] == "new: the per-case minimum of 2 runs"


def test_ratio_to_reference_gates_on_the_case_reference():
    new = {k: v * 3 for k, v in BASE.items()}  # a machine three times slower: ratios unchanged
    assert tracking.compare(_run(BASE), [_run(new)], metric="ratio_to_reference")[1] == []
    assert tracking.compare(_run(BASE), [_run(new)], metric="seconds")[1] != []


def test_cases_in_one_run_only_are_listed_not_failed():
    new = {k: v for k, v in BASE.items() if k[0] != "eg_step K=1e6"}
    new[("logsumexp K=1e6", "fastfair")], new[("logsumexp K=1e6", "torch")] = 1e-3, 1e-3
    lines, regressions = tracking.compare(_run(BASE, threads=2), [_run(new)])
    assert regressions == []
    assert "only in the baseline: cpu eg_step K=1e6 / fastfair" in lines
    assert "only in the new run: cpu logsumexp K=1e6 / fastfair" in lines
    assert "note: threads differs: 2 vs 1" in lines


def test_main_exit_code_and_bad_input(tmp_path, capsys):
    base, slow = tmp_path / "base.json", tmp_path / "slow.json"
    base.write_text(json.dumps(_run(BASE)))
    doubled = dict(BASE)
    doubled[("softmax K=1e6", "fastfair")] *= 2
    slow.write_text(json.dumps(_run(doubled)))
    assert tracking.main(["compare", str(base), str(base)]) == 0
    assert tracking.main(["compare", str(base), str(slow)]) == 1
    assert "cpu softmax K=1e6 / fastfair: 2.00x" in capsys.readouterr().out
    with pytest.raises(ValueError, match="band must be > 1"):
        tracking.compare(_run(BASE), [_run(BASE)], band=1.0)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": 0, "records": []}))
    with pytest.raises(ValueError, match="schema 0"):
        tracking.load(old)
