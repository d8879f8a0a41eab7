"""The simulator on a GPU beside the same command on the machine's CPU cores, as a user runs it
(``python -m fastfair ...``: start-up, data, training, evaluation and outputs included).

- ``default job``: ``fastfair simulate`` with its built-in defaults (12 runs of logistic
  regression), on the GPU with the CUDA logistic-regression kernel, on the GPU through autograd
  (``FASTFAIR_CUDA_SOFTMAX_REGRESSION=off``), and on the CPU cores;
- ``million clients``: one AAggFF-D run over 10^6 Synthetic(1, 1) clients, 10^4 per round,
  100 rounds (``--device cuda`` against ``--device cpu --threads <every core>``);
- ``sweep``: the default job's 10 rules x 3 seeds (30 runs of 100 clients, 200 rounds) batched
  into one program, on the GPU against the CPU cores.

The CPU command is the reference (ratio "vs ref" < 1: the GPU is faster). Contenders run
interleaved (A B A B); min and median are printed. Skipped without a GPU and a CUDA build.

Run: ``python -m pytest bench/bench_gpu_sim.py -q -s`` (about 2 minutes on one H100 with 16 cores).
"""

from __future__ import annotations

import os
import statistics
from typing import List

from bench.bench_sweep import ROUNDS, RULES, SEEDS
from bench.conftest import fastfair_command, interleaved, sizes

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
REPEAT = sizes(2, 1)
MILLION = ["--rule", "aaggff-d", "--seeds", "0", "--clients", str(sizes(10 ** 6, 10 ** 4)),
           "--per-round", str(sizes(10 ** 4, 100)), "--rounds", str(sizes(100, 3))]
SWEEP = ["--compare", ",".join(RULES), "--seeds", ",".join(map(str, SEEDS)), "--rounds",
         str(ROUNDS)]


#: The environment of each GPU contender: the CUDA logistic-regression kernel on, or off
#: (autograd on the device). Other models train through autograd either way.
KERNEL = {"FASTFAIR_CUDA_SOFTMAX_REGRESSION": "on"}
AUTOGRAD = {"FASTFAIR_CUDA_SOFTMAX_REGRESSION": "off"}


def _gpu_against_cores(report, case: str, verb: str, args: List[str]) -> None:
    cpu = ["--device", "cpu", "--threads", str(CORES)]
    times = interleaved({
        "gpu": fastfair_command(verb, *args, "--device", "cuda", env=KERNEL),
        "gpu autograd": fastfair_command(verb, *args, "--device", "cuda", env=AUTOGRAD),
        "cpu": fastfair_command(verb, *args, *cpu)}, REPEAT)
    for name, t in times.items():
        print(f"{case}: {name}: min {min(t):.2f} s, median {statistics.median(t):.2f} s")
    floor = min(times["gpu"])  # no separate floor: the ratio of interest is vs the CPU command
    report.add(case, "fastfair --device cuda", floor, floor_seconds=floor)
    report.add(case, "fastfair --device cuda, autograd", min(times["gpu autograd"]),
               floor_seconds=floor)
    report.add(case, f"fastfair --device cpu --threads {CORES}", min(times["cpu"]),
               floor_seconds=floor, reference=True)


def test_default_job_cuda(cuda_floor_report):
    _gpu_against_cores(cuda_floor_report, "simulate, the built-in defaults (12 runs)", "simulate",
                       sizes([], ["--rounds", "3"]))


def test_million_clients_cuda(cuda_floor_report):
    _gpu_against_cores(cuda_floor_report,
                       "simulate AAggFF-D 1e6 clients, 1e4 per round, 100 rounds", "simulate",
                       MILLION)


def test_sweep_cuda(cuda_floor_report):
    _gpu_against_cores(cuda_floor_report, "sweep 10 rules x 3 seeds, 100 clients, 200 rounds",
                       "sweep", SWEEP)
