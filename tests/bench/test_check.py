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


def _tree(root, name, core=True):
    """A folder holding packages ``fastfair`` (with a submodule, and a stand-in ``_C`` for the
    compiled core where ``core``) and ``bench``, whose __main__ prints where each came from."""
    for package in ("fastfair", "bench"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(f"TREE = {name!r}\n")
    for module in ("ops", "_C") if core else ("ops",):
        (root / "fastfair" / f"{module}.py").write_text(f"TREE = {name!r}\n")
    (root / "bench" / "__main__.py").write_text(
        "import sys\nimport fastfair, fastfair.ops, fastfair._C, bench\n"
        "print(fastfair.TREE, fastfair.ops.TREE, fastfair._C.TREE, bench.TREE, *sys.argv[1:])\n")


def test_each_tree_is_imported_even_beside_an_editable_install(tmp_path):
    import os
    import subprocess
    import sys

    _tree(tmp_path / "base", "base")
    _tree(tmp_path / "work", "work", core=False)      # a fresh clone: its core is installed
    _tree(tmp_path / "installed", "installed")
    # What an editable install does: a finder ahead of every path entry, answering for the
    # package's modules, and for the compiled core by its file wherever the package came from.
    hook = tmp_path / "hook"
    hook.mkdir()
    installed = str(tmp_path / "installed")
    (hook / "sitecustomize.py").write_text(
        "import importlib.machinery, importlib.util, sys\n"
        "class Editable:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'fastfair._C':\n"
        "            return importlib.util.spec_from_file_location(\n"
        f"                name, {installed!r} + '/fastfair/_C.py')\n"
        "        if name.partition('.')[0] != 'fastfair':\n"
        "            return None\n"
        "        return importlib.machinery.PathFinder.find_spec(\n"
        f"            name, [{installed!r}] if path is None else path)\n"
        "sys.meta_path.insert(0, Editable)\n")

    def run(command, tree):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(hook)])}
        return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout.split()

    plain = run([sys.executable, "-m", "bench", "x"], tmp_path / "base")
    assert plain[:3] == ["installed"] * 3                      # PYTHONPATH alone loses
    base = run(check.in_tree(tmp_path / "base", "bench", ["run", "-k", "a b"]), tmp_path / "base")
    assert base == ["base"] * 4 + ["run", "-k", "a", "b"]      # its own core, built by check
    work = run(check.in_tree(tmp_path / "work", "bench", ["run"]), tmp_path / "work")
    assert work == ["work", "work", "installed", "work", "run"]   # a core it lacks: installed
