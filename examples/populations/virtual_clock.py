"""The virtual-time cost of waiting for everyone against over-selection and deadlines: the
selection alone (no training), K = 10^6 devices with diurnal availability, 100 clients a round,
200 rounds, seeds 0, 1, 2. Prints the table in docs/populations.md (``python
scripts/doc_outputs.py virtual-clock`` writes it there).

Run: ``PYTHONPATH=. python examples/populations/virtual_clock.py`` (seconds).
"""

import numpy as np

from fastfair.sim.population import Policy, Population, PopulationAvailability

K, PER_ROUND, ROUNDS = 10**6, 100, 200

#: The policies, each with its row's label.
POLICIES = ((Policy("all"), "wait for all"),
            (Policy("overselect", 0.1), "over-select 10 %"),
            (Policy("overselect", 0.3), "over-select 30 %"),
            (Policy("deadline", 0.0, 40.0), "deadline 40 s"),
            (Policy("deadline", 0.3, 15.0), "over-select 30 %, deadline 15 s"))

print("| policy | hours of virtual time, mean (range over seeds) | clients kept a round "
      "| low-tier / high-tier kept rate | work wasted |")
print("|---|---|---|---|---|")
for policy, label in POLICIES:
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
    print(f"| {label} | {np.mean(hours):.2f} ({min(hours):.2f}-{max(hours):.2f}) | "
          f"{np.mean(kept):.1f} | {np.mean(low):.2f} | {np.mean(wasted):.3f} |")
