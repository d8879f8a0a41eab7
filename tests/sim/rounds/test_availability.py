"""Availability models: the random access model's test vectors, rates, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.sim.rounds.availability import (
    BernoulliAvailability,
    RandomAccessAvailability,
    UniformAvailability,
    build_availability,
    ram_draw,
    ram_probabilities,
)


def test_ram_sampler_vector_tv6():
    rho = np.array([0.5, 0.3, 0.15, 0.05])
    u = np.array([0.1, 0.6, 0.85, 0.97, 0.2, 0.79, 0.951])
    np.testing.assert_array_equal(ram_draw(rho, u), [0, 1, 2, 3, 0, 1, 3])
    np.testing.assert_allclose(ram_probabilities(np.array([0.2, 0.9, 0.5, 0.1, 0.7, 0.3])),
                               np.array([9, 7, 5, 3, 2, 1]) / 27, rtol=1e-15)
    # rho need not sum to one.
    np.testing.assert_array_equal(ram_draw(2 * rho, u), [0, 1, 2, 3, 0, 1, 3])


def test_ram_frequencies_match_rho():
    ram = RandomAccessAvailability(5, 1, seed=3)
    draws = np.concatenate([ram.sample(t) for t in range(1, 40_001)])
    counts = np.bincount(draws, minlength=5)
    expected = ram.rho * draws.size
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 20.5  # 4 degrees of freedom: P(chi2 > 20.5) < 4e-4
    assert np.all(np.diff(ram.rho) <= 0)


def test_uniform_is_reproducible_and_distinct():
    a = UniformAvailability(10**9, 1000, seed=5)
    ids = a.sample(7)
    assert ids.shape == (1000,) and len(np.unique(ids)) == 1000
    np.testing.assert_array_equal(ids, UniformAvailability(10**9, 1000, seed=5).sample(7))
    assert not np.array_equal(ids, a.sample(8))
    assert ids.min() >= 0 and ids.max() < 10**9


def test_bernoulli_rates_and_cap():
    b = BernoulliAvailability(20_000, 20_000, seed=1, prob=0.25)
    sizes = [b.sample(t).size for t in range(1, 21)]
    # mean 5000, sd ~61 per round
    assert abs(np.mean(sizes) - 5000) < 60
    capped = BernoulliAvailability(20_000, 100, seed=1, prob=0.25)
    ids = capped.sample(3)
    assert ids.size == 100 and np.all(np.isin(ids, b.sample(3)))
    het = BernoulliAvailability(20_000, 20_000, seed=1, prob_low=0.0, prob_high=0.5)
    assert abs(np.mean([het.sample(t).size for t in range(1, 11)]) - 5000) < 150


def test_build_errors():
    with pytest.raises(ValueError, match="availability must be one of"):
        build_availability("markov", 10, 2, 0, {})
    with pytest.raises(ValueError, match="has no option .prob.; its options are: none"):
        build_availability("uniform", 10, 2, 0, {"prob": 0.5})
    with pytest.raises(ValueError, match="per_round must be in"):
        UniformAvailability(10, 11, 0)
    with pytest.raises(ValueError, match="prob must be in"):
        BernoulliAvailability(10, 2, 0, prob=1.5)
