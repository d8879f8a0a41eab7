"""Regression tracking for the benchmarks: ``python -m bench run`` and ``python -m bench compare``.

``run`` runs the pytest benchmark files (``bench/bench_*.py``) with a fixed thread count and
writes one JSON record per (case, implementation): seconds, the floor and ``ratio_to_floor``,
the case's reference and ``ratio_to_reference`` (figures of the same run, which carry across
machines better than seconds), with a description of the machine.

``compare BASELINE NEW [NEW ...]`` prints, for every case of fastfair's own code present in
both, how its figure changed (with several NEW runs of one tree: their per-case minimum), and
exits 1 when one grew beyond the noise band (default: ``seconds`` up by more than 1.5x; see
README, "Regression tracking", for how the metric and the band were chosen).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

SCHEMA = 1
BENCH_DIR = Path(__file__).resolve().parent
METRICS = ("ratio_to_floor", "seconds", "ratio_to_reference")
DEFAULT_METRIC = "seconds"
DEFAULT_BAND = 1.5
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMBA_NUM_THREADS")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> Optional[float]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    return None


def machine(threads: int, records: Sequence[dict]) -> dict:
    """What the figures were measured on (imports torch and fastfair: call after the run)."""
    import numpy
    import torch

    import fastfair

    info = fastfair.build_info()
    cpu_bandwidths = sorted(r["copy_bandwidth"] for r in records if r["device"] == "cpu")
    desc = {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "fastfair": info.get("version"),
        "cpu_isa": info.get("cpu_isa"),
        "openmp": info.get("openmp"),
        "cuda_build": info.get("cuda"),
        "threads": threads,
        "median_copy_bandwidth_gbs": (round(cpu_bandwidths[len(cpu_bandwidths) // 2] / 1e9, 2)
                                      if cpu_bandwidths else None),
    }
    if torch.cuda.is_available():
        desc["gpu"] = torch.cuda.get_device_name()
    return desc


class _Collector:
    """pytest plugin: keeps the benchmark figures when the session ends."""

    def __init__(self) -> None:
        self.records: List[dict] = []

    def pytest_sessionfinish(self, session) -> None:
        from bench import conftest

        self.records = conftest.records()


def run(out: Path, smoke: bool, threads: int, keyword: Optional[str],
        files: Sequence[str]) -> int:
    """Runs the benchmark files under pytest and writes the records to ``out`` (only when every
    benchmark passed). Returns pytest's exit code."""
    for name in THREAD_VARIABLES:  # before torch, numba and fastfair start their thread pools
        os.environ[name] = str(threads)
    if smoke:
        os.environ["FASTFAIR_BENCH_SMOKE"] = "1"
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import pytest

    args = [*(files or [str(BENCH_DIR)]), "-q", "-p", "no:cacheprovider"]
    if keyword:
        args += ["-k", keyword]
    collector = _Collector()
    started = datetime.datetime.now(datetime.timezone.utc)
    code = int(pytest.main(args, plugins=[collector]))
    if code != 0:
        print(f"bench run: pytest exited with {code}; {out} not written", file=sys.stderr)
        return code
    document = {"schema": SCHEMA, "smoke": smoke, "started": started.isoformat(timespec="seconds"),
                "machine": machine(threads, collector.records), "records": collector.records}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"bench run: {len(collector.records)} records written to {out}")
    return 0


def load(path: Path) -> dict:
    document = json.loads(Path(path).read_text())
    if document.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {document.get('schema')!r}, expected {SCHEMA}")
    return document


Key = Tuple[str, str, str]


def _fastfair_figures(documents: Sequence[dict], metric: str) -> Dict[Key, float]:
    """Per fastfair case, the smallest ``metric`` over ``documents`` (runs of one tree: noise on
    a shared machine only ever adds time)."""
    out: Dict[Key, float] = {}
    for document in documents:
        for r in document["records"]:
            key = (r["device"], r["case"], r["impl"])
            if r["fastfair"] and r[metric] is not None:
                out[key] = min(out.get(key, r[metric]), r[metric])
    return out


def compare(base: dict, news: Sequence[dict], metric: str = DEFAULT_METRIC,
            band: float = DEFAULT_BAND) -> Tuple[List[str], List[str]]:
    """Lines of the comparison table, and the regressions: the fastfair cases whose ``metric``
    (the minimum over the runs ``news``) grew by more than ``band`` times."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
    if band <= 1:
        raise ValueError(f"band must be > 1; got {band}")
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
    for title, keys in (("only in the baseline", set(a) - set(b)),
                        ("only in the new run", set(b) - set(a))):
        for device, case, impl in sorted(keys):
            lines.append(f"{title}: {device} {case} / {impl}")
    return lines, regressions


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
    p_run.add_argument("files", nargs="*", help="benchmark files (default: all of bench/)")
    p_cmp = sub.add_parser("compare", help="compare a run (or several runs of one tree, reduced "
                                            "to their per-case minimum) with a baseline; exit 1 "
                                            "on a regression")
    p_cmp.add_argument("baseline", type=Path)
    p_cmp.add_argument("new", type=Path, nargs="+")
    p_cmp.add_argument("--metric", choices=METRICS, default=DEFAULT_METRIC)
    p_cmp.add_argument("--band", type=float, default=DEFAULT_BAND,
                       help=f"fail when a fastfair figure grows more than this factor "
                            f"(default {DEFAULT_BAND})")
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        return run(args.out, args.smoke, args.threads, args.keyword, args.files)
    lines, regressions = compare(load(args.baseline), [load(p) for p in args.new], args.metric,
                                 args.band)
    print("\n".join(lines))
    if regressions:
        print(f"\n{len(regressions)} fastfair case(s) slower than the band allows:")
        print("\n".join(f"  {r}" for r in regressions))
        return 1
    print("\nno fastfair case slower than the band allows")
    return 0
