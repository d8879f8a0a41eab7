"""Populations far beyond memory: a simulation over 10^10 clients samples ids up to K - 1, keeps
rule state only for the clients it has sampled, and checkpoints through torch.save."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.sim import Simulation, SimulationConfig
from tests.helpers.runs import assert_resume_matches


@pytest.mark.parametrize("rule", ["aaggff-d", "fedmaba", "afl"])
def test_ten_billion_clients_run_and_resume(rule):
    K, m = 10**10, 20
    config = SimulationConfig(rule=rule, clients=K, per_round=m, rounds=4, eval_every=4,
                              eval_clients=10, max_samples=60)
    straight = Simulation(config)
    for _ in range(4):
        straight.step()
    state = straight.rule.state_dict()["state"]
    ids = next(v for k, v in state.items() if k.endswith("_ids"))
    assert ids.dtype == np.int64 and 0 < ids.shape[0] <= 4 * m and ids[-1] < K
    assert ids[-1] > 2**32  # ids beyond 32 bits were sampled
    assert_resume_matches(config, straight, 2, 2)
