"""bench/check.py: the pieces of `python -m bench check` that need no build (the whole command
builds a commit and is shown in docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from bench import check
from bench.tracking import compare


def _document(seconds, floor=1.0):
    return {"schema": 2, "smoke": False, "machine": {"cpu": "x", "threads": 1, "gpu": None},
            "tests": {"failed": []},
            "records": [{"device": "cpu", "case": "c", "impl": "fastfair", "fastfair": True,
                         "seconds": seconds, "ratio_to_floor": seconds / floor,
                         "ratio_to_reference": None}]}


def test_a_ref_that_names_no_commit_is_refused_naming_it():
    with pytest.raises(ValueError, match="BASE_REF 'no-such-branch' names no commit"):
        check.resolve("no-such-branch")
    assert len(check.resolve("HEAD")) == 40


def test_interleaved_runs_keep_each_sides_minimum():
    base = check.merged([_document(3.0), _document(1.0)])
    lines, regressions, missing = compare(base, [_document(2.5), _document(1.2)])
    assert regressions == [] and missing == []              # 1.2 / 1.0, within the band
    _, regressions, _ = compare(base, [_document(2.5), _document(1.6)])
    assert regressions == ["cpu c / fastfair: 1.60x"]


@pytest.mark.parametrize("argv, message", [
    (["HEAD", "--repeats", "0"], "--repeats must be >= 1; got 0"),
    (["HEAD", "--band", "1"], "--band: must be a finite number > 1; got '1'"),
    (["HEAD", "--band", "nan"], "--band: must be a finite number > 1; got 'nan'"),
    (["HEAD", "--band", "inf"], "--band: must be a finite number > 1; got 'inf'"),
])
def test_bad_options_are_refused_before_anything_is_built(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        check.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_an_unknown_base_exits_2_with_one_line(capsys):
    assert check.main(["no-such-branch"]) == 2
    assert "bench check: error: BASE_REF 'no-such-branch'" in capsys.readouterr().err
