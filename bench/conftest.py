"""Benchmark plumbing: the machine's copy bandwidth, measured in the same run as every figure,
and a summary table printing each measured time beside its floor and its case's reference.

Run: ``python -m pytest bench/ -q -s`` (or one file), or ``python -m bench run`` to also write
the figures as JSON records (bench/tracking.py). Every benchmark calls
``floor_report.add(case, impl, seconds, bytes_moved, reference=...)``; the table at the end shows
``floor = bytes_moved / copy_bandwidth``, ``ratio = seconds / floor`` and the ratio to the
case's reference (the row added with ``reference=True``: pure PyTorch where one exists).
Implementations whose name starts with ``fastfair`` are fastfair's own code: ``python -m bench
compare`` gates on those. ``FASTFAIR_BENCH_SMOKE=1`` (``python -m bench run --smoke``) swaps
every size for a tiny one (see :func:`sizes`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Dict, List, Optional

import numpy as np
import pytest

torch = pytest.importorskip("torch")

SMOKE = os.environ.get("FASTFAIR_BENCH_SMOKE", "") == "1"


def sizes(full, smoke):
    """``smoke`` (tiny: every case in seconds, to check that the benchmarks run) when
    ``FASTFAIR_BENCH_SMOKE=1``, else ``full``."""
    return smoke if SMOKE else full


def measure(benchmark, fn, rounds: int, warmup: int = 1) -> float:
    """Minimum seconds of ``fn()`` over ``rounds`` calls, timed by pytest-benchmark (so its
    ``--benchmark-save`` / ``--benchmark-compare`` see the case too)."""
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=warmup)
    return benchmark.stats.stats.min


def interleaved(contenders, repeat: int):
    """``{name: [seconds]}`` of each of ``contenders`` (``{name: fn}``), run A B A B ...
    ``repeat`` times, so that a shared machine's slow minutes fall on all of them alike."""
    times = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def fastfair_command(*args: str, env: Optional[Dict[str, str]] = None):
    """A callable that runs ``python -m fastfair ARGS --quiet --out TMP`` to completion in a
    fresh temporary folder (raises on failure): a whole command, as a user meets it. ``env``
    adds to (or replaces in) this process's environment for the command."""
    import subprocess
    import sys
    import tempfile

    def run() -> None:
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, "-m", "fastfair", *args, "--quiet", "--out",
                            os.path.join(out, "run")], check=True, stdout=subprocess.DEVNULL,
                           env=None if env is None else {**os.environ, **env})
    return run


def best_time(fn, repeat: int = 7, warmup: int = 1) -> float:
    """Minimum wall time of ``fn()`` over ``repeat`` runs (the least-disturbed run on a shared
    machine)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def gpu_time(fn, repeat: int = 5, calls: int = 20) -> float:
    """Seconds per call of ``fn()`` on the current CUDA stream: ``calls`` back-to-back calls between
    two CUDA events (launch gaps included, as a loop of rounds sees them), best of ``repeat``."""
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / calls)
    return min(times)


def cuda_ready() -> bool:
    """A CUDA build of fastfair and a visible GPU."""
    import fastfair
    return bool(fastfair.build_info()["cuda"]) and torch.cuda.is_available()


def measure_copy_bandwidth(nbytes: int = 1 << 28, device: str = "cpu") -> float:
    """Bytes per second of ``torch.Tensor.copy_`` between two large buffers, counting each byte
    read and each byte written (2 * nbytes per copy)."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    if device != "cpu":
        return 2 * nbytes / gpu_time(lambda: dst.copy_(src))
    return 2 * nbytes / best_time(lambda: dst.copy_(src), repeat=9)


@dataclass
class Row:
    """One figure: ``seconds`` of ``impl`` on ``case``, its floor (``floor_kind`` "copy": bytes
    at the copy bandwidth of the same minutes; "compute": a measured lower bound) and whether it
    is the case's reference."""

    device: str
    case: str
    impl: str
    seconds: float
    floor: float
    floor_kind: str
    bandwidth: float
    reference: bool


@dataclass
class FloorReport:
    """The figures of one device. The copy bandwidth is re-measured when the last measurement is
    more than ``max_age`` seconds old, so that each floor comes from the same minutes as the
    figure beside it on a shared, noisy machine."""

    device: str = "cpu"
    max_age: float = 10.0
    rows: List[Row] = field(default_factory=list)
    bandwidth: float = 0.0
    measured_at: float = -1e9

    def current_bandwidth(self) -> float:
        if time.monotonic() - self.measured_at > self.max_age:
            self.bandwidth = measure_copy_bandwidth(device=self.device)
            self.measured_at = time.monotonic()
        return self.bandwidth

    def add(self, case: str, impl: str, seconds: float, bytes_moved: int = 0, *,
            floor_seconds: Optional[float] = None, reference: bool = False) -> None:
        """Records ``seconds`` of ``impl`` on ``case``. The floor is ``bytes_moved`` at the copy
        bandwidth, or ``floor_seconds`` where a measured compute floor replaces it.
        ``reference=True`` marks the case's one same-run reference."""
        if reference and any(r.reference for r in self.rows if r.case == case):
            raise ValueError(f"case {case!r} already has a reference")
        bandwidth = self.current_bandwidth()
        if floor_seconds is None:
            floor, kind = bytes_moved / bandwidth, "copy"
        else:
            floor, kind = floor_seconds, "compute"
        self.rows.append(Row(self.device, case, impl, seconds, floor, kind, bandwidth, reference))

    def reference_seconds(self) -> Dict[str, float]:
        """Case -> seconds of its reference row."""
        return {r.case: r.seconds for r in self.rows if r.reference}


_REPORT: List[FloorReport] = []


@pytest.fixture(scope="session")
def floor_report() -> FloorReport:
    report = FloorReport()
    _REPORT.append(report)
    return report


@pytest.fixture(scope="session")
def cuda_floor_report() -> FloorReport:
    """Floors against the GPU's device-to-device copy bandwidth; skips without a CUDA build and
    a GPU."""
    if not cuda_ready():
        pytest.skip("needs a GPU and a fastfair build with FASTFAIR_CUDA=ON")
    report = FloorReport(device="cuda")
    _REPORT.append(report)
    return report


def records() -> List[dict]:
    """Every figure of this session as a plain record: ``case``, ``impl``, ``device``,
    ``seconds``, ``floor_seconds``, ``floor_kind``, ``ratio_to_floor``, ``reference`` (the
    case's reference implementation, or None), ``ratio_to_reference`` (None without one),
    ``fastfair`` (fastfair's own code) and ``copy_bandwidth`` (bytes/s)."""
    out = []
    for report in _REPORT:
        refs = report.reference_seconds()
        names = {r.case: r.impl for r in report.rows if r.reference}
        for r in report.rows:
            out.append({"case": r.case, "impl": r.impl, "device": r.device,
                        "seconds": r.seconds, "floor_seconds": r.floor, "floor_kind": r.floor_kind,
                        "ratio_to_floor": r.seconds / r.floor, "reference": names.get(r.case),
                        "ratio_to_reference": (r.seconds / refs[r.case] if r.case in refs
                                               else None),
                        "fastfair": r.impl.startswith("fastfair"),
                        "copy_bandwidth": r.bandwidth})
    return out


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    for report in _REPORT:
        refs = report.reference_seconds()
        where = torch.cuda.get_device_name() if report.device == "cuda" else "CPU"
        tr.write_sep("=", f"{where}: time vs floor (copy: bytes read + written / torch copy_ "
                          "bandwidth measured within 10 s of the figure; compute: measured) "
                          "and vs the case's reference (*)")
        tr.write_line(f"{'case':<44} {'implementation':<30} {'time':>11} {'floor':>13} "
                      f"{'ratio':>7} {'vs ref':>7} {'copy GB/s':>10}")
        for r in report.rows:
            vs_ref = f"{r.seconds / refs[r.case]:>7.2f}" if r.case in refs else f"{'':>7}"
            impl = f"{r.impl} *" if r.reference else r.impl
            floor = f"{r.floor * 1e3:.3f}ms" + ("" if r.floor_kind == "copy" else " c")
            tr.write_line(f"{r.case:<44} {impl:<30} {r.seconds * 1e3:>9.3f}ms {floor:>13} "
                          f"{r.seconds / r.floor:>7.2f} {vs_ref} {r.bandwidth / 1e9:>10.2f}")


def femnist_sized_cohort(clients: int, classes: int) -> SimpleNamespace:
    """``clients`` clients of FEMNIST's train sizes (about 200 samples each, 20 to 450): sparse
    binary 28x28 images ``x [n, 1, 28, 28]`` with labels ``y [n]`` in ``[0, classes)``, client
    k's rows ``offsets[k]:offsets[k + 1]`` (``counts [clients]``); the same data for a seed 0."""
    import torch

    rng = np.random.default_rng(0)
    counts = np.clip(rng.normal(204, 80, clients).round(), 20, 450).astype(np.int64)
    n = int(counts.sum())
    x = torch.from_numpy((rng.random((n, 1, 28, 28)) < 0.2).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, classes, n))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return SimpleNamespace(x=x, y=y, offsets=offsets, counts=counts)


def shakespeare_like_cohort(clients: int, most: int = 120, length: int = 80) -> SimpleNamespace:
    """``clients`` clients of 10-``most`` sequences of ``length`` token ids in [0, 80), a
    next-token label per position (``y [n, length]``), client k's rows
    ``offsets[k]:offsets[k + 1]``."""
    rng = np.random.default_rng(0)
    counts = rng.integers(min(10, most), most + 1, clients)
    n = int(counts.sum())
    return SimpleNamespace(x=torch.from_numpy(rng.integers(0, 80, (n, length))),
                           y=torch.from_numpy(rng.integers(0, 80, (n, length))),
                           offsets=np.concatenate([[0], np.cumsum(counts)]), counts=counts)


def mean_cross_entropy(logits, y):
    """Mean cross-entropy of ``logits [B, C]`` against ``y [B]``, or of ``[B, T, C]`` against a
    label per position ``y [B, T]`` (over every position of every sequence)."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, -2), y.flatten())


def femnist_cnn():
    """LEAF's FEMNIST CNN (dense 2048, 62 outputs; 6.6M parameters) as the simulator builds it."""
    from fastfair.sim.names import get_model_builder

    return get_model_builder("femnist-cnn")(
        SimpleNamespace(sample_shape=(1, 28, 28), num_classes=62), 64)


def char_lstm():
    """LEAF's char-LSTM (0.82M parameters) for a vocabulary and classes of 80."""
    from fastfair.sim.names import get_model_builder

    return get_model_builder("char-lstm")(SimpleNamespace(vocab_size=80, num_classes=80), 64)
