"""``python -m bench run`` and ``python -m bench compare``: the records and where they come from
(commit, dirty tree, build id of the core), the refusal of a core built from other sources, a
failing benchmark that costs only its own figures, the regression gate, missing cases, and
baselines picked by CPU model and GPU."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fastfair
from bench import provenance, tracking

ROOT = Path(tracking.__file__).resolve().parents[1]


def _run(seconds_by_impl, smoke=False, threads=1, cpu="test", gpu=None, failed=()):
    records = []
    for (case, impl), seconds in seconds_by_impl.items():
        records.append({"case": case, "impl": impl, "device": "cpu", "seconds": seconds,
                        "floor_seconds": 1e-3, "floor_kind": "copy",
                        "ratio_to_floor": seconds / 1e-3, "reference": "torch",
                        "ratio_to_reference": seconds / seconds_by_impl[(case, "torch")],
                        "fastfair": impl.startswith("fastfair"), "copy_bandwidth": 2e10})
    machine = {"cpu": cpu, "threads": threads}
    if gpu:
        machine["gpu"] = gpu
    machine["key"] = provenance.machine_key(machine)
    return {"schema": tracking.SCHEMA, "smoke": smoke, "machine": machine,
            "tests": {"passed": len(records), "failed": list(failed), "skipped": []},
            "records": records}


BASE = {("softmax K=1e6", "fastfair"): 2e-3, ("softmax K=1e6", "torch"): 4e-3,
        ("eg_step K=1e6", "fastfair"): 3e-3, ("eg_step K=1e6", "torch"): 3e-3}


def test_a_run_compared_with_itself_passes():
    lines, regressions, missing = tracking.compare(_run(BASE), [_run(BASE)])
    assert regressions == [] and missing == []
    assert any("softmax K=1e6" in line and "1.00x" in line for line in lines)


def test_a_twice_slower_fastfair_case_fails_and_is_named():
    slow = dict(BASE)
    slow[("eg_step K=1e6", "fastfair")] *= 2
    _, regressions, _ = tracking.compare(_run(BASE), [_run(slow)])
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
    lines, regressions, _ = tracking.compare(_run(BASE), [_run(outlier), _run(BASE)])
    assert regressions == [] and lines[0] == "new: the per-case minimum of 2 runs"


def test_ratio_to_reference_gates_on_the_case_reference():
    new = {k: v * 3 for k, v in BASE.items()}  # a machine three times slower: ratios unchanged
    assert tracking.compare(_run(BASE), [_run(new)], metric="ratio_to_reference")[1] == []
    assert tracking.compare(_run(BASE), [_run(new)], metric="seconds")[1] != []


def test_cases_missing_on_either_side_are_reported():
    """A renamed case is missing from both sides: nothing was compared for it, and compare says
    so (its exit status: test_main_fails_on_a_missing_case_unless_allowed)."""
    new = {k: v for k, v in BASE.items() if k[0] != "eg_step K=1e6"}
    new[("logsumexp K=1e6", "fastfair")], new[("logsumexp K=1e6", "torch")] = 1e-3, 1e-3
    lines, regressions, missing = tracking.compare(_run(BASE, threads=2), [_run(new)])
    assert regressions == []
    assert missing == ["missing from the new run: cpu eg_step K=1e6 / fastfair",
                       "missing from the baseline: cpu logsumexp K=1e6 / fastfair"]
    assert set(missing) <= set(lines)
    assert "note: threads differs: 2 vs 1" in lines


def test_a_case_without_the_metric_on_one_side_is_not_compared_nor_missing():
    base, new = _run(BASE), _run(BASE)
    for record in base["records"]:
        if record["case"] == "softmax K=1e6":
            record["ratio_to_reference"] = None  # the reference did not run there
    lines, regressions, missing = tracking.compare(base, [new], metric="ratio_to_reference")
    assert regressions == [] and missing == []
    assert "not compared (no ratio_to_reference on one side): cpu softmax K=1e6 / fastfair" in lines


def test_a_failed_benchmark_of_the_new_run_counts_as_missing():
    failure = {"test": "bench/bench_x.py::test_y", "when": "call", "message": "boom"}
    _, _, missing = tracking.compare(_run(BASE), [_run(BASE, failed=[failure])])
    assert missing == ["failed in the new run: bench/bench_x.py::test_y (call): boom"]


def test_main_fails_on_a_missing_case_unless_allowed(tmp_path, capsys):
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(_run(BASE)))
    renamed = {(case.replace("eg_step", "eg step"), impl): v for (case, impl), v in BASE.items()}
    new.write_text(json.dumps(_run(renamed)))
    assert tracking.main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert "missing from the new run: cpu eg_step K=1e6 / fastfair" in out
    assert "2 fastfair case(s) missing on one side" in out
    assert tracking.main(["compare", str(base), str(new), "--allow-missing"]) == 0
    assert "(2 missing, allowed)" in capsys.readouterr().out


def test_main_exit_code_and_bad_input(tmp_path, capsys):
    base, slow = tmp_path / "base.json", tmp_path / "slow.json"
    base.write_text(json.dumps(_run(BASE)))
    doubled = dict(BASE)
    doubled[("softmax K=1e6", "fastfair")] *= 2
    slow.write_text(json.dumps(_run(doubled)))
    assert tracking.main(["compare", str(base), str(base)]) == 0
    assert tracking.main(["compare", str(base), str(slow)]) == 1
    assert "cpu softmax K=1e6 / fastfair: 2.00x" in capsys.readouterr().out
    with pytest.raises(ValueError, match="band must be a finite number > 1"):
        tracking.compare(_run(BASE), [_run(BASE)], band=1.0)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": 0, "records": []}))
    with pytest.raises(ValueError, match="schema 0"):
        tracking.load(old)
    first = tmp_path / "schema1.json"  # a run from before records carried their provenance
    first.write_text(json.dumps({**_run(BASE), "schema": 1, "machine": {"cpu": "test"}}))
    assert tracking.load(first)["machine"]["key"] == "cpu=test | gpu=none"


# ------------------------------------------------------------------ baselines by machine


def test_compare_picks_the_baseline_of_the_new_runs_machine(tmp_path, capsys):
    folder = tmp_path / "baselines"
    folder.mkdir()
    slow_cpu = {k: v * 3 for k, v in BASE.items()}
    for doc in (_run(slow_cpu, cpu="Slow CPU"), _run(BASE, cpu="Fast CPU"),
                _run(slow_cpu, cpu="Fast CPU", gpu="Some GPU")):
        (folder / provenance.baseline_name(doc["machine"])).write_text(json.dumps(doc))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(_run(BASE, cpu="Fast CPU")))
    assert tracking.main(["compare", str(folder), str(new)]) == 0
    assert f"baseline: {folder / 'cpu-fast-cpu.json'}" in capsys.readouterr().out
    on_gpu = tmp_path / "gpu.json"
    on_gpu.write_text(json.dumps(_run(slow_cpu, cpu="Fast CPU", gpu="Some GPU")))
    assert tracking.main(["compare", str(folder), str(on_gpu)]) == 0
    assert "cpu-fast-cpu--gpu-some-gpu.json" in capsys.readouterr().out
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_run(BASE, cpu="Other CPU")))
    assert tracking.main(["compare", str(folder), str(elsewhere)]) == 2
    err = capsys.readouterr().err
    assert "no baseline in" in err and "cpu=Other CPU | gpu=none" in err
    assert "cpu-slow-cpu.json: cpu=Slow CPU | gpu=none" in err
    assert "bench run --out" in err and "cpu-other-cpu.json" in err


def test_a_baseline_file_from_another_machine_is_refused_for_seconds(tmp_path, capsys):
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(_run({k: v / 3 for k, v in BASE.items()}, cpu="Other CPU")))
    new.write_text(json.dumps(_run(BASE)))
    assert tracking.main(["compare", str(base), str(new)]) == 2
    assert "recorded on another machine" in capsys.readouterr().err
    # Ratios of one run carry across machines; so does an explicit override.
    assert tracking.main(["compare", str(base), str(new), "--metric", "ratio_to_reference"]) == 0
    assert tracking.main(["compare", str(base), str(new), "--allow-other-machine"]) == 1


def test_the_cpu_model_names_family_and_model_where_proc_cpuinfo_has_them():
    from fastfair._machine import cpu_info, cpu_model

    info = cpu_info()
    model = cpu_model()
    if "cpu family" in info and "model" in info:
        assert model.endswith(f"(family {info['cpu family']}, model {info['model']})")
    assert model


# ------------------------------------------------------------------ provenance and the core


def _tree(root: Path) -> None:
    files = {"CMakeLists.txt": "project(x)\n", "cmake/A.cmake": "# a\n", "cmake/notes.txt": "x",
             "csrc/cpu/a.cpp": "int a;\n", "csrc/cpu/B.h": "#pragma once\n",
             "csrc/cpu/simd/c.cu": "__global__ void c() {}\n", "csrc/x_y.h": "",
             "csrc/x/y.cuh": "// y\n", "csrc/.hidden/z.hpp": "// z\n", "csrc/README.md": "no",
             "csrc/cpu/a.cpp.orig": "ignored"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_the_python_build_id_is_the_one_cmake_compiles_in(tmp_path):
    """bench/tracking.py and cmake/FastfairSourceHash.cmake hash the same files the same way."""
    _tree(tmp_path)
    script = ROOT / "cmake" / "FastfairSourceHash.cmake"

    def cmake_id() -> str:
        done = subprocess.run(["cmake", f"-DROOT={tmp_path}", "-P", str(script)],
                              capture_output=True, text=True, check=True)
        return done.stdout.strip()

    assert provenance.source_files(tmp_path) == [
        "CMakeLists.txt", "cmake/A.cmake", "csrc/.hidden/z.hpp", "csrc/cpu/B.h",
        "csrc/cpu/a.cpp", "csrc/cpu/simd/c.cu", "csrc/x/y.cuh", "csrc/x_y.h"]
    first = provenance.source_build_id(tmp_path)
    assert len(first) == 16 and cmake_id() == first
    (tmp_path / "csrc/cpu/simd/c.cu").write_text("__global__ void c() { }\n")
    assert provenance.source_build_id(tmp_path) != first
    assert cmake_id() == provenance.source_build_id(tmp_path)
    (tmp_path / "csrc/README.md").write_text("not a source")
    assert cmake_id() == provenance.source_build_id(tmp_path)


def test_the_compiled_core_was_built_from_this_tree():
    """The build id the core reports is this tree's: the build compiles it in, and a core left
    from older sources (csrc/ edited, not rebuilt) fails here as `bench run` refuses it."""
    if not (ROOT / "csrc").is_dir():
        pytest.skip("no sources beside the tests (an installed copy)")
    built = fastfair.build_info().get("build_id")
    assert built == provenance.source_build_id(ROOT), (
        f"fastfair._C ({fastfair._C.__file__}) was built from other sources than this tree's "
        f"(build id {built!r}): rebuild it with pip install -c constraints.txt -e '.[test]'")


def test_core_mismatch_names_what_differs(tmp_path):
    here = provenance.source_build_id(ROOT)
    package = ROOT / "fastfair"
    assert provenance.core_mismatch(ROOT, {"build_id": here}, package) is None
    stale = provenance.core_mismatch(ROOT, {"build_id": "0123456789abcdef"}, package)
    assert "built from other sources (build id '0123456789abcdef'" in stale
    assert "--allow-other-build" in stale
    other = provenance.core_mismatch(ROOT, {"build_id": here}, tmp_path / "fastfair")
    assert f"imported from {tmp_path / 'fastfair'}" in other


def test_run_refuses_a_core_built_from_other_sources(tmp_path, monkeypatch, capsys):
    for name in tracking.THREAD_VARIABLES:  # run() sets them; restore them afterwards
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    monkeypatch.setattr(fastfair, "build_info", lambda: {"build_id": "0123456789abcdef"})
    out = tmp_path / "out.json"
    assert tracking.run(out, smoke=True, threads=1, keyword=None, files=[str(tmp_path)]) == 2
    assert not out.exists()
    assert "built from other sources" in capsys.readouterr().err


def test_git_state_reads_commit_and_dirty(tmp_path):
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}
    if shutil.which("git") is None:
        pytest.skip("needs git")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.txt").write_text("1")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    state = provenance.git_state(tmp_path)
    assert len(state["commit"]) == 40 and state["dirty"] is False
    (tmp_path / "untracked.txt").write_text("not part of the tree")
    assert provenance.git_state(tmp_path)["dirty"] is False
    (tmp_path / "a.txt").write_text("2")
    assert provenance.git_state(tmp_path)["dirty"] is True


BENCH_FILE = """
    import pytest

    from bench.conftest import floor_report  # noqa: F401  (the fixture)


    def test_kept(floor_report):
        floor_report.add("kept case", "fastfair", 1e-3, 1000)


    def test_fails(floor_report):
        floor_report.add("half-done case", "fastfair", 2e-3, 1000)
        raise RuntimeError("this benchmark broke")


    def test_skipped():
        pytest.importorskip("a_module_that_is_not_installed")
"""


def test_a_failing_benchmark_is_recorded_and_the_others_kept(tmp_path):
    pytest.importorskip("torch")  # bench/conftest.py measures the copy bandwidth with torch
    bench_file = tmp_path / "bench_two.py"
    bench_file.write_text(textwrap.dedent(BENCH_FILE))
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--smoke", "--allow-other-build", "--out", str(out),
         str(bench_file)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 benchmark(s) failed" in done.stderr
    doc = json.loads(out.read_text())
    assert [r["case"] for r in doc["records"]] == ["kept case", "half-done case"]
    [failure] = doc["tests"]["failed"]
    assert failure["test"].endswith("bench_two.py::test_fails") and failure["when"] == "call"
    assert "this benchmark broke" in failure["message"]
    [skip] = doc["tests"]["skipped"]
    assert "a_module_that_is_not_installed" in skip["reason"]
    assert doc["tests"]["passed"] == 1
    prov = doc["provenance"]
    assert prov["tree_build_id"] == provenance.source_build_id(ROOT)
    assert prov["build_id"] == fastfair.build_info().get("build_id")
    for record in doc["records"]:
        assert record["commit"] == prov["commit"] and record["dirty"] == prov["dirty"]
        assert record["build_id"] == prov["build_id"]
    if shutil.which("git") and (ROOT / ".git").exists():
        assert len(prov["commit"]) == 40 and isinstance(prov["dirty"], bool)
    assert doc["machine"]["key"] == provenance.machine_key(doc["machine"])


# ------------------------------------------------------------------ the [bench] extra


def _requirement_names(requirements):
    import re
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_bench_extra_installs_what_bench_run_imports():
    """`pip install ".[bench]"` is enough for `python -m bench run`: the simulator's runtime (the
    sim extra), the test tools and every module a benchmark file needs, except the optional
    solver baselines of bench_ons.py (skipped, with no fastfair case of their own) and CuPy
    (the GPU cases, the [cuda] extra)."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    bench = _requirement_names(extras["bench"])
    assert _requirement_names(extras["sim"]) <= bench
    assert {"pytest", "pytest-benchmark", "numba", "flwr", "tqdm"} <= bench
    import re
    optional = {"cvxpy", "osqp", "clarabel", "cupy"}
    for path in sorted((ROOT / "bench").glob("*.py")):
        for module in re.findall(r"importorskip\(\"([\w.]+)\"", path.read_text()):
            top = module.split(".")[0]
            if top not in optional:
                assert top in bench, f"{path.name} needs {top}, which the bench extra lacks"


def test_compare_of_a_missing_or_unreadable_file_is_one_error_line(tmp_path, capsys):
    from bench import tracking

    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    for base in (tmp_path / "absent.json", garbled):
        assert tracking.main(["compare", str(base), str(base)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bench compare: error: ") and str(base) in err, err
        assert len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ unreadable input


def _edited(edit):
    doc = _run(BASE)
    edit(doc)
    return doc


UNREADABLE = {
    "nan-new": ("new", lambda d: d["records"][0].update(seconds=float("nan"))),
    "nan-baseline": ("base", lambda d: d["records"][0].update(seconds=float("nan"))),
    "negative": ("new", lambda d: d["records"][0].update(seconds=-1e-3)),
    "zero": ("base", lambda d: d["records"][0].update(seconds=0.0)),
    "infinite": ("new", lambda d: d["records"][0].update(ratio_to_reference=float("inf"))),
    "string-timing": ("new", lambda d: d["records"][0].update(seconds="2e-3")),
    "boolean-timing": ("base", lambda d: d["records"][0].update(seconds=True)),
    "no-device": ("new", lambda d: d["records"][0].pop("device")),
    "fastfair-not-bool": ("new", lambda d: d["records"][0].update(fastfair="yes")),
    "machine-not-object": ("new", lambda d: d.update(machine="fast")),
    "records-not-list": ("base", lambda d: d.update(records={"a": 1})),
    "record-not-object": ("new", lambda d: d["records"].append(3)),
    "failed-not-objects": ("new", lambda d: d["tests"].update(failed=["x"])),
    "400-digit-timing": ("new", lambda d: d["records"][0].update(seconds=10 ** 400)),
    "no-seconds": ("new", lambda d: d["records"][0].pop("seconds")),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_compare_fails_loudly_on_a_file_it_cannot_trust(tmp_path, capsys, name):
    side, edit = UNREADABLE[name]
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(_edited(edit) if side == "base" else _run(BASE)))
    new.write_text(json.dumps(_edited(edit) if side == "new" else _run(BASE)))
    assert tracking.main(["compare", str(base), str(new)]) == 2
    err = capsys.readouterr().err
    bad = base if side == "base" else new
    assert err.startswith(f"bench compare: error: {bad}: ") and len(err.splitlines()) == 1, err


def test_a_named_pipe_among_the_inputs_is_refused_not_waited_on(tmp_path, capsys):
    base, pipe = tmp_path / "base.json", tmp_path / "pipe.json"
    base.write_text(json.dumps(_run(BASE)))
    os.mkfifo(pipe)
    assert tracking.main(["compare", str(base), str(pipe)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bench compare: error: {pipe} is not a regular file"), err


def test_a_top_level_list_is_refused(tmp_path, capsys):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([_run(BASE)]))
    assert tracking.main(["compare", str(path), str(path)]) == 2
    assert "a bench run is a JSON object at the top; got list" in capsys.readouterr().err


@pytest.mark.parametrize("band", ["nan", "inf", "1", "0.5", "x"])
def test_a_band_that_cannot_gate_is_refused(tmp_path, capsys, band):
    base, slow = tmp_path / "base.json", tmp_path / "slow.json"
    base.write_text(json.dumps(_run(BASE)))
    slow.write_text(json.dumps(_run({k: v * 50 for k, v in BASE.items()})))
    with pytest.raises(SystemExit) as exit_:
        tracking.main(["compare", str(base), str(slow), "--band", band])
    assert exit_.value.code == 2
    assert "--band: must be" in capsys.readouterr().err


def test_a_stray_file_in_the_baselines_folder_is_named_and_skipped(tmp_path, capsys):
    folder = tmp_path / "baselines"
    folder.mkdir()
    (folder / "cpu-test.json").write_text(json.dumps(_run(BASE)))
    for stray, text in (("notes.json", json.dumps(["not", "a", "run"])),
                        ("broken.json", "{"), ("other.json", json.dumps({"schema": 2}))):
        (folder / stray).write_text(text)
    new = tmp_path / "new.json"
    new.write_text(json.dumps(_run(BASE)))
    assert tracking.main(["compare", str(folder), str(new)]) == 0
    out = capsys.readouterr()
    assert f"baseline: {folder / 'cpu-test.json'}" in out.out
    for stray in ("notes.json", "broken.json", "other.json"):
        assert f"warning: skipping {folder / stray}, not a readable baseline" in out.err


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

_FIGURES = (st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5)
            | st.booleans() | st.text(max_size=3))
_JSON = st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=4),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)


@st.composite
def _documents(draw):
    """Bench run documents, most of them near a real one, with one field replaced."""
    doc = _run({k: v * draw(st.floats(0.5, 3.0)) for k, v in BASE.items()})
    where = draw(st.sampled_from(["figure", "name", "part", "top", "none"]))
    if where == "figure":
        record = draw(st.sampled_from(doc["records"]))
        record[draw(st.sampled_from(list(tracking.METRICS)))] = draw(_FIGURES)
    elif where == "name":
        record = draw(st.sampled_from(doc["records"]))
        record[draw(st.sampled_from(["device", "case", "impl", "fastfair"]))] = draw(_JSON)
    elif where == "part":
        doc[draw(st.sampled_from(["machine", "tests", "records", "schema", "provenance"]))] = \
            draw(_JSON)
    elif where == "top":
        return draw(_JSON)
    return doc


@hypothesis.settings(max_examples=60, derandomize=True, deadline=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(base=_documents(), new=_documents())
def test_fuzz_compare_never_passes_on_what_it_cannot_read(tmp_path_factory, base, new):
    folder = tmp_path_factory.mktemp("fuzz")
    paths = {}
    for side, doc in (("base", base), ("new", new)):
        paths[side] = folder / f"{side}.json"
        paths[side].write_text(json.dumps(doc))
    readable = {}
    for side in ("base", "new"):
        try:
            tracking.check_document(json.loads(paths[side].read_text()), side)
            readable[side] = True
        except ValueError:
            readable[side] = False
    code = tracking.main(["compare", str(paths["base"]), str(paths["new"]),
                          "--allow-other-machine"])
    if not all(readable.values()):
        assert code == 2  # never 0, and never read as a regression
        hypothesis.event("refused")
    else:
        assert code in (0, 1)
        figures = [r[m] for doc in (base, new) for r in doc["records"] for m in tracking.METRICS
                   if r.get(m) is not None]
        assert all(math.isfinite(f) and f > 0 for f in figures)
        hypothesis.event("compared")
