"""Keyed normals for a cohort's ragged segments: fastfair against torch.

Run: ``OMP_NUM_THREADS=1 python -m pytest bench/bench_normal_segments.py -q -s -p no:cacheprovider``
(and again with ``OMP_NUM_THREADS=2``). The cohort is 1000 clients of 50-400 samples x 60
features (about 13.8M values, drawn once with a fixed seed), as the simulator's synthetic data:

- ``fastfair``: one ``ops.normal_segments`` call, every client keyed by its own 64-bit key (the
  thread count is in the label; a second row repeats it on one thread);
- ``torch.randn (one stream)``: the same number of normals from torch's global generator, not
  keyed per client; what a single unkeyed stream costs, the floor-like reference;
- ``torch.Generator per client``: today's way, a seeded generator per client in a Python loop,
  each writing its slice (``torch.randn(..., generator=g, out=slice)``).

Floor = the bytes written (4 or 8 per value) over the copy bandwidth of the same run
(bench/conftest.py). The ``cuda`` case repeats the three on the GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import fastfair
from bench.conftest import best_time, gpu_time
from fastfair import ops

torch = pytest.importorskip("torch")

CLIENTS, FEATURES = 1000, 60


@pytest.fixture(scope="module")
def cohort():
    rng = np.random.default_rng(2024)
    lengths = rng.integers(50, 401, CLIENTS) * FEATURES
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    keys = rng.integers(0, 2 ** 63, CLIENTS, dtype=np.int64)
    return keys, offsets


def _generator_loop(keys, offsets, out, device="cpu"):
    gens = [torch.Generator(device=device) for _ in range(len(keys))]
    bounds = offsets.tolist()

    def run():
        for i, g in enumerate(gens):
            g.manual_seed(int(keys[i]))
            torch.randn(bounds[i + 1] - bounds[i], generator=g, out=out[bounds[i]:bounds[i + 1]])
    return run


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_segments(floor_report, cohort, dtype):
    keys, offsets = cohort
    total = int(offsets[-1])
    out = np.empty(total, dtype=dtype)
    tout = torch.from_numpy(out)
    nbytes = out.nbytes
    case = f"normals {CLIENTS} clients, {total / 1e6:.1f}M {dtype}"
    threads = fastfair.get_num_threads()
    floor_report.add(case, f"fastfair ({threads} thread{'s' if threads > 1 else ''})",
                     best_time(lambda: ops.normal_segments(keys, offsets, out)), nbytes)
    if threads > 1:
        fastfair.set_num_threads(1)
        try:
            floor_report.add(case, "fastfair (1 thread)",
                             best_time(lambda: ops.normal_segments(keys, offsets, out)), nbytes)
        finally:
            fastfair.set_num_threads(threads)
    floor_report.add(case, "torch.randn (one stream)",
                     best_time(lambda: torch.randn(total, dtype=tout.dtype, out=tout)), nbytes)
    floor_report.add(case, "torch.Generator per client",
                     best_time(_generator_loop(keys, offsets, tout), repeat=3), nbytes)


def test_normal_segments_cuda(cuda_floor_report, cohort):
    keys, offsets = cohort
    total = int(offsets[-1])
    k, o = torch.from_numpy(keys).cuda(), torch.from_numpy(offsets).cuda()
    out = torch.empty(total, device="cuda")
    case = f"normals {CLIENTS} clients, {total / 1e6:.1f}M float32"
    cuda_floor_report.add(case, "fastfair", gpu_time(lambda: ops.normal_segments(k, o, out)),
                          4 * total)
    cuda_floor_report.add(case, "torch.randn (one stream)",
                          gpu_time(lambda: torch.randn(total, device="cuda", out=out)), 4 * total)
    cuda_floor_report.add(case, "torch.Generator per client",
                          gpu_time(_generator_loop(keys, offsets, out, "cuda"), calls=3),
                          4 * total)
