"""Regression tracking for the benchmarks: ``python -m bench run`` and ``python -m bench compare``.

``run`` runs the pytest benchmark files (``bench/bench_*.py``) with a fixed thread count and
writes one JSON record per (case, implementation): seconds, the floor and ``ratio_to_floor``,
the case's reference and ``ratio_to_reference`` (figures of the same run, which carry across
machines better than seconds), with a description of the machine. Every record carries where it
came from: the git commit, whether the tree had uncommitted changes (``dirty``) and the build id of
the compiled core. A core built from other sources than this tree's is refused before anything
runs (``--allow-other-build`` runs anyway and says so in every record). A benchmark that fails is
listed under ``tests.failed`` and the records of the others are kept (exit status 1).

``compare BASELINE NEW [NEW ...]`` prints, for every case of fastfair's own code present in
both, how its figure changed (with several NEW runs of one tree: their per-case minimum), and
exits 1 when one grew beyond the noise band (default: ``seconds`` up by more than 1.5x; see
docs/benchmarks.md, "Regression tracking", for how the metric and the band were chosen), or
when a case of either side is missing from the other (``--allow-missing`` lists them and
passes). BASELINE may be
a folder (``bench/baselines``): the baseline recorded on the same CPU model (and GPU) as the new
run is taken from it, and when there is none compare says so and exits 2; a baseline file from
another machine is refused for ``--metric seconds`` (``--allow-other-machine``).

``compare`` never passes on what it cannot read: a file that is not a bench run, a record
without its names, a figure that is NaN, infinite, zero, negative or not a number, or a
``--band`` that is not a finite number > 1 is one error line naming it, with exit status 2
(distinct from a regression's 1); in a baselines folder, a file that is not a readable baseline
is skipped with a warning naming it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.provenance import (
    ROOT,
    baseline_name,
    core_mismatch,
    git_state,
    machine,
    machine_key,
    source_build_id,
)
from fastfair._files import read_regular_file

SCHEMA = 2
READABLE_SCHEMAS = (1, 2)  # schema 1: records without provenance, machine without a key
BENCH_DIR = Path(__file__).resolve().parent
BASELINES = BENCH_DIR / "baselines"
METRICS = ("ratio_to_floor", "seconds", "ratio_to_reference")
DEFAULT_METRIC = "seconds"
DEFAULT_BAND = 1.5
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMBA_NUM_THREADS")

# --------------------------------------------------------------------------------------------
# bench run


class _Collector:
    """pytest plugin: the benchmark figures when the session ends, and every test that failed or
    was skipped (a failing benchmark costs its own figures, not the others')."""

    def __init__(self) -> None:
        self.records: List[dict] = []
        self.failed: List[dict] = []
        self.skipped: List[dict] = []
        self.passed = 0

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            message = getattr(report.longrepr, "reprcrash", None)
            text = message.message if message is not None else str(report.longrepr)
            self.failed.append({"test": report.nodeid, "when": report.when,
                                "message": text.strip().splitlines()[0][:300] if text else ""})
        elif report.skipped and report.when in ("setup", "call"):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            self.skipped.append({"test": report.nodeid, "reason": str(reason)[:300]})
        elif report.passed and report.when == "call":
            self.passed += 1

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.failed.append({"test": report.nodeid, "when": "collect",
                                "message": str(report.longrepr).strip().splitlines()[-1][:300]})

    def pytest_sessionfinish(self, session) -> None:
        from bench import conftest

        self.records = conftest.records()


def run(out: Path, smoke: bool, threads: int, keyword: Optional[str],
        files: Sequence[str], allow_other_build: bool = False) -> int:
    """Runs the benchmark files under pytest and writes the records to ``out``.

    Refuses (exit 2, nothing run) a fastfair whose compiled core was built from other sources
    than this tree's, unless ``allow_other_build``. A benchmark that fails or errors is listed in
    the document (``tests.failed``) and the records of every other one are written: the exit
    status is then 1. Returns 0 when every benchmark passed."""
    for name in THREAD_VARIABLES:  # before torch, numba and fastfair start their thread pools
        os.environ[name] = str(threads)
    if smoke:
        os.environ["FASTFAIR_BENCH_SMOKE"] = "1"
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import pytest

    import fastfair

    info = fastfair.build_info()
    mismatch = core_mismatch(ROOT, info, Path(fastfair.__file__).parent)
    if mismatch is not None and not allow_other_build:
        print(f"bench run: {mismatch}", file=sys.stderr)
        return 2
    provenance = {**git_state(ROOT), "build_id": info.get("build_id"),
                  "tree_build_id": source_build_id(ROOT), "core_matches_tree": mismatch is None,
                  "core": str(Path(fastfair._C.__file__))}
    if mismatch is not None:
        print(f"bench run: warning: {mismatch}", file=sys.stderr)

    args = [*(files or [str(BENCH_DIR)]), "-q", "-p", "no:cacheprovider"]
    if keyword:
        args += ["-k", keyword]
    collector = _Collector()
    started = datetime.datetime.now(datetime.timezone.utc)
    code = int(pytest.main(args, plugins=[collector]))
    if code not in (0, 1) or (not collector.records and not collector.failed):
        print(f"bench run: pytest exited with {code} and no figures; {out} not written",
              file=sys.stderr)
        return code or 1
    stamp = {key: provenance[key] for key in ("commit", "dirty", "build_id")}
    records = [{**record, **stamp} for record in collector.records]
    document = {"schema": SCHEMA, "smoke": smoke, "started": started.isoformat(timespec="seconds"),
                "provenance": provenance, "machine": machine(threads, records),
                "tests": {"passed": collector.passed, "failed": collector.failed,
                          "skipped": collector.skipped},
                "records": records}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"bench run: {len(records)} records written to {out}")
    if collector.failed:
        print(f"bench run: {len(collector.failed)} benchmark(s) failed; their figures are missing, "
              "the others' kept:", file=sys.stderr)
        for failure in collector.failed:
            print(f"  {failure['test']} ({failure['when']}): {failure['message']}", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------------------------
# bench compare


#: The text fields every record names its case by.
RECORD_NAMES = ("device", "case", "impl")


def load(path: Path) -> dict:
    """The bench run document in ``path``, checked (:func:`check_document`).

    Raises
    ------
    ValueError
        Naming ``path`` and what is wrong: not UTF-8 JSON, or a document a comparison cannot
        trust (see :func:`check_document`). Nothing unreadable is ever compared.
    """
    data = read_regular_file(path, "bench run")   # a named pipe is refused, never waited on
    try:
        document = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:   # not UTF-8, not JSON, an integer too long
        raise ValueError(f"{path}: not a bench run's JSON ({type(exc).__name__}: {exc})") \
            from None
    check_document(document, str(path))
    document.setdefault("machine", {})
    document["machine"].setdefault("key", machine_key(document["machine"]))
    return document


def _figure(value: Any) -> bool:
    """Whether ``value`` is a usable figure: None (not measured) or a finite number > 0."""
    if value is None:
        return True
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value)) and value > 0
    except OverflowError:   # an integer beyond float64: no time
        return False


def check_document(document: Any, where: str) -> None:
    """Refuses a bench run document that a comparison could misread.

    Checked: an object at the top with a readable ``schema``; ``machine``, ``provenance`` and
    ``tests`` objects where present (``tests.failed`` a list of objects with text ``test``,
    ``when`` and ``message``); ``records`` a list of objects, each with text ``device``,
    ``case`` and ``impl``, a boolean ``fastfair``, ``seconds``, and every figure of
    :data:`METRICS` it holds None or a finite number > 0 (a time or a ratio of times: NaN,
    infinities, integers beyond float64, zero, negative numbers and text are refused, never
    compared). The file itself must be a regular file (a named pipe is never waited on).

    Raises
    ------
    ValueError
        ``"<where>: <what is wrong>"``, naming the record by its index and case.
    """
    if not isinstance(document, dict):
        raise ValueError(f"{where}: a bench run is a JSON object at the top; got "
                         f"{type(document).__name__}")
    if document.get("schema") not in READABLE_SCHEMAS:
        raise ValueError(f"{where}: schema {document.get('schema')!r}, expected one of "
                         f"{', '.join(map(str, READABLE_SCHEMAS))}")
    for part in ("machine", "provenance", "tests"):
        if part in document and not isinstance(document[part], dict):
            raise ValueError(f"{where}: {part} must be an object; got "
                             f"{type(document[part]).__name__}")
    failed = document.get("tests", {}).get("failed", [])
    if not isinstance(failed, list) or not all(
            isinstance(f, dict) and all(isinstance(f.get(k), str)
                                        for k in ("test", "when", "message")) for f in failed):
        raise ValueError(f"{where}: tests.failed must be a list of objects with text test, when "
                         "and message")
    records = document.get("records")
    if not isinstance(records, list):
        raise ValueError(f"{where}: records must be a list; got {type(records).__name__}")
    for k, record in enumerate(records):
        if not isinstance(record, dict):
            raise ValueError(f"{where}: records[{k}] must be an object; got "
                             f"{type(record).__name__}")
        for name in RECORD_NAMES:
            if not isinstance(record.get(name), str):
                raise ValueError(f"{where}: records[{k}] has no text {name!r} (got "
                                 f"{record.get(name)!r})")
        if not isinstance(record.get("fastfair"), bool):
            raise ValueError(f"{where}: records[{k}] ({record['case']} / {record['impl']}) "
                             f"needs fastfair true or false; got {record.get('fastfair')!r}")
        if "seconds" not in record:
            raise ValueError(f"{where}: records[{k}] ({record['case']} / {record['impl']}) has "
                             "no seconds; every record holds them (null when not measured)")
        for metric in METRICS:
            if metric in record and not _figure(record[metric]):
                raise ValueError(f"{where}: records[{k}] ({record['case']} / "
                                 f"{record['impl']}) has {metric} {record[metric]!r}; a figure "
                                 "is a finite number > 0, or null when not measured")


def pick_baseline(folder: Path, machine_desc: Dict[str, Any]) -> Tuple[Optional[Path], List[str]]:
    """The baseline in ``folder`` recorded on ``machine_desc``'s CPU model and GPU (None when
    there is none), and the keys of every baseline there."""
    key = machine_key(machine_desc)
    keys, match = [], None
    for path in sorted(Path(folder).glob("*.json")):
        try:
            stored = load(path)["machine"]["key"]
        except (OSError, ValueError) as exc:  # another file in the folder: said, then skipped
            print(f"bench compare: warning: skipping {path}, not a readable baseline: {exc}",
                  file=sys.stderr)
            continue
        keys.append(f"{path.name}: {stored}")
        if stored == key and match is None:
            match = path
    return match, keys


Key = Tuple[str, str, str]


def _fastfair_figures(documents: Sequence[dict], metric: str) -> Dict[Key, float]:
    """Per fastfair case, the smallest ``metric`` over ``documents`` (runs of one tree: noise on
    a shared machine only ever adds time)."""
    out: Dict[Key, float] = {}
    for document in documents:
        for r in document["records"]:
            key = (r["device"], r["case"], r["impl"])
            value = r.get(metric)   # absent: not measured, as null
            if r["fastfair"] and value is not None:
                out[key] = min(out.get(key, value), value)
    return out


def _fastfair_cases(documents: Sequence[dict]) -> set:
    return {(r["device"], r["case"], r["impl"]) for document in documents
            for r in document["records"] if r["fastfair"]}


def compare(base: dict, news: Sequence[dict], metric: str = DEFAULT_METRIC,
            band: float = DEFAULT_BAND) -> Tuple[List[str], List[str], List[str]]:
    """Lines of the comparison table, the regressions (the fastfair cases whose ``metric``, the
    minimum over the runs ``news``, grew by more than ``band`` times) and what is missing: each
    fastfair case of one side absent from the other, and each benchmark that failed in a new
    run."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
    if not (math.isfinite(band) and band > 1):
        raise ValueError(f"band must be a finite number > 1; got {band}")
    if not news:
        raise ValueError("compare needs at least one new run")
    a, b = _fastfair_figures([base], metric), _fastfair_figures(news, metric)
    new = news[0]
    lines = [] if len(news) == 1 else [f"new: the per-case minimum of {len(news)} runs"]
    if base.get("smoke") != new.get("smoke"):
        lines.append("note: one run is --smoke and the other is not; their cases differ")
    ma, mb = base.get("machine", {}), new.get("machine", {})
    for field in ("cpu", "threads", "gpu"):
        if ma.get(field) != mb.get(field):
            lines.append(f"note: {field} differs: {ma.get(field)!r} vs {mb.get(field)!r}")
    for document in news:
        prov = document.get("provenance", {})
        if prov and not prov.get("core_matches_tree", True):
            lines.append(f"note: a new run measured a core built from other sources "
                         f"(build id {prov.get('build_id')!r})")
    lines.append(f"{metric}: new / baseline; a fastfair case fails above {band:g}x")
    lines.append(f"{'case':<52} {'implementation':<32} {'baseline':>10} {'new':>10} "
                 f"{'change':>8}")
    regressions = []
    for key in sorted(set(a) & set(b), key=lambda k: (b[k] / a[k] if a[k] else 0), reverse=True):
        device, case, impl = key
        change = b[key] / a[key] if a[key] else float("inf")
        verdict = ""
        if change > band:
            verdict = "  SLOWER"
            regressions.append(f"{device} {case} / {impl}: {change:.2f}x")
        elif change < 1 / band:
            verdict = "  faster"
        label = case if device == "cpu" else f"[{device}] {case}"
        lines.append(f"{label:<52} {impl:<32} {a[key]:>10.4g} {b[key]:>10.4g} "
                     f"{change:>7.2f}x{verdict}")
    cases_a, cases_b = _fastfair_cases([base]), _fastfair_cases(news)
    for device, case, impl in sorted((cases_a & cases_b) - (set(a) & set(b))):
        lines.append(f"not compared (no {metric} on one side): {device} {case} / {impl}")
    missing = []
    for title, keys in (("missing from the new run", cases_a - cases_b),
                        ("missing from the baseline", cases_b - cases_a)):
        for device, case, impl in sorted(keys):
            missing.append(f"{title}: {device} {case} / {impl}")
    for document in news:
        for failure in document.get("tests", {}).get("failed", []):
            missing.append(f"failed in the new run: {failure['test']} ({failure['when']}): "
                           f"{failure['message']}")
    lines += missing
    return lines, regressions, missing


def _compare_main(args: argparse.Namespace) -> int:
    news = [load(p) for p in args.new]
    baseline_path = Path(args.baseline)
    if baseline_path.is_dir():
        picked, keys = pick_baseline(baseline_path, news[0]["machine"])
        if picked is None:
            print(f"bench compare: no baseline in {baseline_path} was recorded on this machine "
                  f"({news[0]['machine']['key']}); stored:", file=sys.stderr)
            print("\n".join(f"  {k}" for k in keys) or "  (none)", file=sys.stderr)
            print(f"record one with `python -m bench run --out {baseline_path}/"
                  f"{baseline_name(news[0]['machine'])}` on a quiet machine, or pass a baseline "
                  "file with --allow-other-machine and a ratio metric", file=sys.stderr)
            return 2
        print(f"baseline: {picked}")
        baseline_path = picked
    base = load(baseline_path)
    if (base["machine"]["key"] != news[0]["machine"]["key"] and args.metric == "seconds"
            and not args.allow_other_machine):
        print(f"bench compare: {baseline_path} was recorded on another machine "
              f"({base['machine']['key']}) than the new run ({news[0]['machine']['key']}): its "
              "seconds do not compare. Pass the baselines folder to pick the matching one, or "
              "--allow-other-machine (with --metric ratio_to_reference, say).", file=sys.stderr)
        return 2
    lines, regressions, missing = compare(base, news, args.metric, args.band)
    print("\n".join(lines))
    status = 0
    if regressions:
        print(f"\n{len(regressions)} fastfair case(s) slower than the band allows:")
        print("\n".join(f"  {r}" for r in regressions))
        status = 1
    if missing and not args.allow_missing:
        print(f"\n{len(missing)} fastfair case(s) missing on one side: nothing was compared "
              "for them (a renamed, failed or skipped case, or another --smoke/-k selection); "
              "--allow-missing passes anyway")
        status = 1
    if status == 0:
        print("\nno fastfair case slower than the band allows"
              + (f" ({len(missing)} missing, allowed)" if missing else ""))
    return status


def parse_band(text: str) -> float:
    """``--band`` of ``compare`` and ``check``: a finite number > 1 (``nan`` and ``inf`` would
    pass every case); ``argparse.ArgumentTypeError`` otherwise."""
    try:
        band = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 1; got {text!r}") from None
    if not (math.isfinite(band) and band > 1):
        raise argparse.ArgumentTypeError(f"must be a finite number > 1; got {text!r}")
    return band


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run the benchmarks and write their records as JSON")
    p_run.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p_run.add_argument("--smoke", action="store_true",
                       help="tiny sizes: every case in seconds (checks that they run)")
    p_run.add_argument("--threads", type=int, default=1,
                       help="OpenMP/torch/numba threads (default 1: the steadiest figures on a "
                            "shared machine)")
    p_run.add_argument("-k", dest="keyword", help="pytest -k expression selecting cases")
    p_run.add_argument("--allow-other-build", action="store_true",
                       help="measure a fastfair whose compiled core was built from other "
                            "sources than this tree's (the records say so)")
    p_run.add_argument("files", nargs="*", help="benchmark files (default: all of bench/)")
    p_cmp = sub.add_parser("compare", help="compare a run (or several runs of one tree, reduced "
                                            "to their per-case minimum) with a baseline; exit 1 "
                                            "on a regression or a missing case")
    p_cmp.add_argument("baseline", type=Path,
                       help="a baseline file, or a folder of them (bench/baselines): the one "
                            "recorded on the new run's CPU model and GPU is used")
    p_cmp.add_argument("new", type=Path, nargs="+")
    p_cmp.add_argument("--metric", choices=METRICS, default=DEFAULT_METRIC)
    p_cmp.add_argument("--band", type=parse_band, default=DEFAULT_BAND,
                       help=f"fail when a fastfair figure grows more than this factor "
                            f"(default {DEFAULT_BAND})")
    p_cmp.add_argument("--allow-missing", action="store_true",
                       help="pass when a case of one side is missing from the other (they are "
                            "still listed)")
    p_cmp.add_argument("--allow-other-machine", action="store_true",
                       help="compare seconds with a baseline file from another CPU model or GPU")
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        return run(args.out, args.smoke, args.threads, args.keyword, args.files,
                   args.allow_other_build)
    try:
        return _compare_main(args)
    except (OSError, ValueError) as exc:  # a missing or unreadable file: one line, no traceback
        print(f"bench compare: error: {exc}", file=sys.stderr)
        return 2
