"""A data set seen with a population's tiers as its groups is a view: the data and the data set
itself are unchanged, the groups are answered per id."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.sim.data.synthetic import SyntheticDataset
from fastfair.sim.population import build_population, with_tiers


def test_the_tiers_are_a_view_of_the_data_set():
    data = SyntheticDataset(12, 1.0, 1.0, seed=0, max_samples=60)
    population = build_population("devices", 12, 0, {})
    tiered = with_tiers(data, population)
    ids = np.array([3, 0, 11])
    assert tiered.num_groups == population.num_tiers and data.num_groups is None
    assert data.groups(ids) is None  # the data set itself keeps no groups
    np.testing.assert_array_equal(tiered.groups(ids), population.tier(ids))
    np.testing.assert_array_equal(tiered.num_samples(ids), data.num_samples(ids))
    a, b = tiered.client_data(ids), data.client_data(ids)
    assert np.array_equal(a.x.numpy(), b.x.numpy()) and np.array_equal(a.offsets, b.offsets)
    with pytest.raises(ValueError, match="out of range"):
        tiered.groups(np.array([12]))
