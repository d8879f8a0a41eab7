"""Benchmark plumbing: the machine's copy bandwidth, measured in the same run as every figure,
and a summary table printing each measured time beside its bandwidth floor.

Run: ``python -m pytest bench/ --benchmark-only`` (or one file). Every benchmark calls
``floor_report.add(case, impl, seconds, bytes_moved)``; the table at the end shows
``floor = bytes_moved / copy_bandwidth`` and ``ratio = seconds / floor``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List

import pytest

torch = pytest.importorskip("torch")


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
class FloorReport:
    """Rows of (case, implementation, time, floor, ratio). The copy bandwidth is re-measured when
    the last measurement is more than ``max_age`` seconds old, so that each floor comes from the
    same minutes as the figure beside it on a shared, noisy machine."""

    device: str = "cpu"
    max_age: float = 10.0
    rows: List[tuple] = field(default_factory=list)
    bandwidth: float = 0.0
    measured_at: float = -1e9

    def current_bandwidth(self) -> float:
        if time.monotonic() - self.measured_at > self.max_age:
            self.bandwidth = measure_copy_bandwidth(device=self.device)
            self.measured_at = time.monotonic()
        return self.bandwidth

    def add(self, case: str, impl: str, seconds: float, bytes_moved: int) -> None:
        bandwidth = self.current_bandwidth()
        floor = bytes_moved / bandwidth
        self.rows.append((case, impl, seconds, floor, seconds / floor, bandwidth))


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


def pytest_terminal_summary(terminalreporter):
    for report in _REPORT:
        tr = terminalreporter
        where = torch.cuda.get_device_name() if report.device == "cuda" else "CPU"
        tr.write_sep("=", f"{where}: time vs copy floor (floor = bytes read + written / torch "
                          "copy_ bandwidth measured within 10 s of the figure)")
        tr.write_line(f"{'case':<44} {'implementation':<26} {'time':>11} {'floor':>11} "
                      f"{'ratio':>7} {'copy GB/s':>10}")
        for case, impl, secs, floor, ratio, bandwidth in report.rows:
            tr.write_line(f"{case:<44} {impl:<26} {secs * 1e3:>9.3f}ms {floor * 1e3:>9.3f}ms "
                          f"{ratio:>7.2f} {bandwidth / 1e9:>10.2f}")
