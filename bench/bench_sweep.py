"""A sweep of the default job (10 rules x 3 seeds of 100 Synthetic(1, 1) clients, 10 per round,
200 rounds) against one run of it.

- ``commands``: wall time of whole commands, as a user meets them: ``fastfair sweep`` of the 30
  runs (batched into one program) against ``fastfair simulate --rule fedavg`` (one run), and
  the reference, one process per cell as before sweeps: 30 times the one-run command. Start-up,
  data, training, evaluation and outputs included. The sweep runs with 2 threads (one batched
  program fills both cores), the one-run command with its default 1.
- ``in-process``: ``Sweep.run()`` batched, the same sweep with the runs one after another in
  one process (``batched=False``, the reference) and one run, 1 thread each (run time only).

The floor of both cases is the one run: the ratio to it is "x one run", the figure the sweep's
target (3x on 2 cores) is about. Contenders run interleaved (A B A B); min and median are
printed.

Run: ``python -m pytest bench/bench_sweep.py -q -s`` (the full sizes take about 5 minutes).
"""

from __future__ import annotations

import statistics

from bench.conftest import fastfair_command, interleaved, sizes

RULES = ["fedavg", "fairavg", "fedprox", "aaggff-d", "fedmaba", "qfedavg", "term", "afl",
         "propfair", "fedmgda"]
SEEDS = [0, 1, 2]
ROUNDS = sizes(200, 3)
REPEAT = sizes(3, 1)


def _print(case, times):
    for name, t in times.items():
        print(f"{case}: {name}: min {min(t):.2f} s, median {statistics.median(t):.2f} s")


def test_sweep_commands(floor_report):
    common = ["--rounds", str(ROUNDS)]
    one = fastfair_command("simulate", "--rule", "fedavg", *common)
    sweep = fastfair_command("sweep", "--compare", ",".join(RULES), "--seeds",
                     ",".join(map(str, SEEDS)), "--threads", "2", *common)
    times = interleaved({"one run": one, "sweep": sweep}, REPEAT)
    _print("commands", times)
    case = f"{len(RULES)} rules x {len(SEEDS)} seeds, {ROUNDS} rounds: commands"
    floor = min(times["one run"])
    floor_report.add(case, "fastfair sweep (30 runs, batched)", min(times["sweep"]),
                     floor_seconds=floor)
    floor_report.add(case, "30 simulate commands (one per cell)",
                     len(RULES) * len(SEEDS) * floor, floor_seconds=floor, reference=True)


def test_sweep_in_process(floor_report):
    import dataclasses

    from fastfair.sim import Simulation, SimulationConfig
    from fastfair.sim.experiments.sweep import Sweep
    from fastfair.sim.process import torch_threads

    config = SimulationConfig(rounds=ROUNDS)

    def one():
        with torch_threads(1):
            sim = Simulation(dataclasses.replace(config, rule="fedavg"))
            while sim.round < config.rounds:
                sim.step()

    def batched():
        Sweep(config, RULES, SEEDS).run()

    def apart():
        Sweep(config, RULES, SEEDS, batched=False).run()

    times = interleaved({"one run": one, "sweep batched": batched,
                          "sweep one after another": apart}, REPEAT)
    _print("in-process", times)
    case = f"{len(RULES)} rules x {len(SEEDS)} seeds, {ROUNDS} rounds: in-process"
    floor = min(times["one run"])
    floor_report.add(case, "fastfair Sweep batched", min(times["sweep batched"]),
                     floor_seconds=floor)
    floor_report.add(case, "Sweep one after another", min(times["sweep one after another"]),
                     floor_seconds=floor, reference=True)
