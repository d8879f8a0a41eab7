"""Populations far beyond memory: AAggFF-D at K = 10^9 (and 10^10) clients, 1000 per round.

- ``command``: the command users run, ``fastfair simulate --clients 1000000000 --per-round 1000
  --rounds 100 --rule aaggff-d`` (Synthetic data, logistic regression, start-up and outputs
  included), against the same command at K = 10^6 (the reference: what the run costs when the
  rule's state is small), interleaved; wall, user and system seconds and the peak resident
  memory of each child process (``os.wait4``). The rule's per-client state lives in a
  :class:`fastfair.aggregators._client_vector.ClientVector`, so K no longer shows in either.
- ``rule alone``: 100 rounds of ``AAggFFD(K).weights`` on 1000 fresh ids a round, K = 10^6,
  10^9 and 10^10 (the rule's own cost, without data or training).

Run: ``python -m pytest bench/bench_population.py -q -s`` (about a minute on 2 cores).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.conftest import interleaved, sizes

ROUNDS = sizes(100, 3)
REPEAT = sizes(3, 1)
PER_ROUND = 1000


def _command(clients: int, records: dict):
    """A callable running the simulate command at ``clients``; appends ``(wall, user, system,
    peak RSS bytes)`` of each run to ``records[clients]``."""
    args = [sys.executable, "-m", "fastfair", "simulate", "--clients", str(clients),
            "--per-round", str(PER_ROUND), "--rounds", str(ROUNDS), "--rule", "aaggff-d",
            "--quiet"]

    def run():
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen([*args, "--out", os.path.join(out, "x")],
                                    stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            assert proc.returncode == 0, f"simulate --clients {clients} failed"
            records.setdefault(clients, []).append(
                (wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss * 1024))
    return run


def test_population_command(floor_report):
    records: dict = {}
    contenders = {"K = 10^9": _command(10**9, records), "K = 10^6": _command(10**6, records)}
    times = interleaved(contenders, REPEAT)
    case = f"simulate aaggff-d, {PER_ROUND}/round, {ROUNDS} rounds"
    floor = min(times["K = 10^6"])
    for clients, runs in sorted(records.items()):
        wall, user, system, rss = (np.array(v) for v in zip(*runs))
        print(f"{case}, K = {clients:.0e}: wall min {wall.min():.2f} s median "
              f"{np.median(wall):.2f} s; user min {user.min():.2f} s, system min "
              f"{system.min():.2f} s; peak RSS min {rss.min() / 2**20:.0f} MiB median "
              f"{np.median(rss) / 2**20:.0f} MiB")
    floor_report.add(case, "fastfair simulate K = 10^9", min(times["K = 10^9"]),
                     floor_seconds=floor)
    floor_report.add(case, "fastfair simulate K = 10^6", floor, floor_seconds=floor,
                     reference=True)


def test_rule_alone(floor_report):
    from fastfair.aggregators import AAggFFD

    def play(K):
        def run():
            rng = np.random.default_rng(0)
            agg = AAggFFD(K)
            for _ in range(ROUNDS):
                agg.weights(rng.choice(K, PER_ROUND, replace=False), rng.uniform(0.1, 2.0,
                                                                                  PER_ROUND))
        return run

    times = interleaved({f"K = 10^{e}": play(10**e) for e in (6, 9, 10)}, sizes(5, 1))
    case = f"AAggFFD.weights, {PER_ROUND}/round, {ROUNDS} rounds"
    for name, t in times.items():
        print(f"{case}, {name}: min {min(t):.3f} s, median {statistics.median(t):.3f} s")
        floor_report.add(case, f"fastfair {name}", min(t), floor_seconds=min(times["K = 10^6"]),
                         reference=name == "K = 10^6")
