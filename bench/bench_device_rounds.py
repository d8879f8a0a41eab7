"""Device populations at K = 10^8: a round under diurnal availability and 30 % over-selection
(invite 1300, keep the first 1000 to finish) against today's uniform round (1000 of K), same
process, interleaved.

- ``selection``: the population's whole selection of a round (candidates, availability at the
  clock's time, the invitees' speeds, bandwidths and dropouts, the policy, the clock) against
  :class:`~fastfair.sim.rounds.availability.UniformAvailability` drawing 1000 of K alone.
- ``round``: ``Simulation.step()`` of FedAvg on Synthetic(1, 1) (logistic regression, one local
  epoch), the population runs against the uniform run: what a user's run pays per round.
  Over-selection keeps the first to finish, who hold fewer samples on average, so its rounds
  train less; the population waiting for all its invitees (diurnal, 1000 invited) keeps
  clients of the uniform run's sizes and shows the selection's own cost.

Run: ``python -m pytest bench/bench_device_rounds.py -q -s`` (under a minute on 2 cores).
"""

from __future__ import annotations

import statistics

import numpy as np

from bench.conftest import interleaved, sizes

K = sizes(10**8, 10**6)
M = 1000
ROUNDS = sizes(30, 3)
STEPS = sizes(12, 2)
POPULATION = dict(population="devices", population_options={"process": "diurnal"},
                  policy="overselect", over_select=0.3)


def _report(floor_report, case, times, reference):
    floor = min(times[reference])
    for name, t in times.items():
        print(f"{case}, {name}: min {min(t) * 1e3:.2f} ms, median "
              f"{statistics.median(t) * 1e3:.2f} ms; / {reference}: {min(t) / floor:.2f}x by "
              f"min, {statistics.median(t) / statistics.median(times[reference]):.2f}x by "
              "median")
        floor_report.add(case, f"fastfair {name}", min(t), floor_seconds=floor,
                         reference=name == reference)


def test_selection(floor_report):
    from fastfair.sim.population import Policy, Population, PopulationAvailability
    from fastfair.sim.rounds.availability import UniformAvailability

    population = PopulationAvailability(
        Population(K, 0, process="diurnal"), Policy("overselect", 0.3), M,
        lambda ids: np.full(ids.shape, 50), model_bytes=4e4)
    uniform = UniformAvailability(K, M, 0)
    rounds = {"population": iter(range(1, 10**6)), "uniform": iter(range(1, 10**6))}
    times = interleaved({"population": lambda: population.sample(next(rounds["population"])),
                         "uniform": lambda: uniform.sample(next(rounds["uniform"]))}, ROUNDS)
    _report(floor_report, f"one round's selection, {M} of K = {K:.0e}", times, "uniform")


def test_round(floor_report):
    from fastfair.sim import Simulation, SimulationConfig

    base = dict(clients=K, per_round=M, rounds=10**6, eval_every=10**6, eval_clients=10)
    wait_all = {**POPULATION, "policy": "all", "over_select": 0.0}
    sims = {"population, over-select": Simulation(SimulationConfig(**base, **POPULATION)),
            "population, wait for all": Simulation(SimulationConfig(**base, **wait_all)),
            "uniform": Simulation(SimulationConfig(**base))}
    for sim in sims.values():  # the first round builds what later rounds reuse
        sim.step()
    times = interleaved({name: sim.step for name, sim in sims.items()}, STEPS)
    _report(floor_report, f"Simulation.step fedavg, {M} of K = {K:.0e}", times, "uniform")
