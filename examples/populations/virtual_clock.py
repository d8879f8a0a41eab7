"""The virtual-time cost of waiting for everyone against over-selection and deadlines: the
selection alone (no training), K = 10^6 devices with diurnal availability, 100 clients a round,
200 rounds, seeds 0, 1, 2. Prints the rows of the table in docs/populations.md.

Run: ``PYTHONPATH=. python examples/populations/virtual_clock.py`` (under a minute on 2 cores).
"""

import numpy as np

from fastfair.sim.population import Policy, Population, PopulationAvailability

K, PER_ROUND, ROUNDS = 10**6, 100, 200

for policy in (Policy("all"), Policy("overselect", 0.1), Policy("overselect", 0.3),
               Policy("deadline", 0.0, 40.0), Policy("deadline", 0.3, 15.0)):
    hours, kept, low, wasted = [], [], [], []
    for seed in (0, 1, 2):
        selection = PopulationAvailability(
            Population(K, seed, process="diurnal"), policy, PER_ROUND,
            samples=lambda ids: 20 + ids % 200, work_per_sample=2.0, model_bytes=4e6)
        for t in range(1, ROUNDS + 1):
            selection.sample(t)
        record = selection.round_record()
        hours.append(selection.clock / 3600)
        kept.append(selection.totals["kept"].sum() / ROUNDS)
        low.append(record["participation_tier0"] / record["participation_tier2"])
        wasted.append(record["wasted_share"])
    print(f"| {policy.name} f={policy.over_select} D={policy.deadline} | "
          f"{np.mean(hours):.2f} ({min(hours):.2f}-{max(hours):.2f}) | {np.mean(kept):.1f} | "
          f"{np.mean(low):.2f} | {np.mean(wasted) * 100:.1f} |")
