"""O(m) client sampling and Bernoulli availability: exact reference ids, uniformity, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from fastfair import ops, reference
from fastfair.reference.sampling import philox4x32_10
from tests.helpers.arrays import requires_cuda, torch

P_MIN = 1e-4  # chi-square p-value below which a distribution test fails (fixed seeds: no flakes)


def test_philox_known_answers():
    # Random123's kat_vectors for philox4x32-10.
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2,
              (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in cases:
        got = philox4x32_10(tuple(np.array([c]) for c in ctr), key)
        assert tuple(int(w[0]) for w in got) == want


@pytest.mark.parametrize("K,m", [(1, 1), (2, 1), (37, 37), (1000, 0), (1000, 999), (10 ** 9, 1000),
                                 (2 ** 40 + 3, 50)])
def test_exact_ids_distinct_in_range(K, m):
    ids = ops.sample_clients(K, m, seed=12345, round=7)
    np.testing.assert_array_equal(ids, reference.sample_clients(K, m, seed=12345, round=7))
    assert ids.dtype == np.int64 and ids.shape == (m,)
    assert len(np.unique(ids)) == m and (ids >= 0).all() and (ids < K).all()
    if m == K:
        np.testing.assert_array_equal(np.sort(ids), np.arange(K))


def test_reproducible_and_keyed():
    a = ops.sample_clients(10 ** 6, 100, seed=1, round=5)
    np.testing.assert_array_equal(a, ops.sample_clients(10 ** 6, 100, seed=1, round=5))
    assert not np.array_equal(a, ops.sample_clients(10 ** 6, 100, seed=1, round=6))
    assert not np.array_equal(a, ops.sample_clients(10 ** 6, 100, seed=2, round=5))
    # A prefix property: the first m ids of a larger sample are the smaller sample.
    np.testing.assert_array_equal(ops.sample_clients(10 ** 6, 40, seed=1, round=5), a[:40])
    out = torch.empty(100, dtype=torch.int64)
    ops.sample_clients(10 ** 6, 100, seed=1, round=5, out=out)
    np.testing.assert_array_equal(out.numpy(), a)


def test_uniform_inclusion_and_subsets():
    K, m, n = 20, 5, 4000
    counts = np.zeros(K)
    first = np.zeros(K)
    for r in range(n):
        ids = ops.sample_clients(K, m, seed=99, round=r)
        counts[ids] += 1
        first[ids[0]] += 1
    assert stats.chisquare(counts).pvalue > P_MIN
    assert stats.chisquare(first).pvalue > P_MIN
    # Every 2-subset of 6 clients equally likely.
    K, m, n = 6, 2, 6000
    index = {s: i for i, s in enumerate(itertools.combinations(range(K), m))}
    hist = np.zeros(len(index))
    for r in range(n):
        hist[index[tuple(sorted(ops.sample_clients(K, m, seed=3, round=r)))]] += 1
    assert stats.chisquare(hist).pvalue > P_MIN


def test_sampling_errors():
    with pytest.raises(ValueError, match=r"m must be in \[0, num_clients\]"):
        ops.sample_clients(10, 11, seed=0, round=0)
    with pytest.raises(ValueError, match="m must be"):
        ops.sample_clients(10, -1, seed=0, round=0)
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 2\^62\); got 0"):
        ops.sample_clients(0, 0, seed=0, round=0)
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 2\^62\); got 92233720368"):
        ops.sample_clients(2 ** 63 + 5, 3, seed=1, round=0)
    with pytest.raises(ValueError, match=r"round must be in \[0, 2\^32\)"):
        ops.sample_clients(10, 1, seed=0, round=2 ** 32)
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\^64\)"):
        ops.sample_clients(10, 1, seed=-1, round=0)
    # Integers only: a float is refused, not truncated (10.7 used to sample from K = 10).
    for kwargs, name in ((dict(num_clients=10.7), "num_clients"), (dict(m=3.0), "m"),
                         (dict(seed=1.5), "seed"), (dict(round="0"), "round"),
                         (dict(m=True), "m")):
        args = {**dict(num_clients=10, m=3, seed=1, round=0), **kwargs}
        K, m = args.pop("num_clients"), args.pop("m")
        with pytest.raises(TypeError, match=f"{name} must be an integer"):
            ops.sample_clients(K, m, **args)
    np.testing.assert_array_equal(ops.sample_clients(np.int32(10), np.int64(3), seed=np.uint64(1),
                                                     round=0), ops.sample_clients(10, 3, seed=1,
                                                                                  round=0))
    with pytest.raises(TypeError, match="seed must be an integer"):
        ops.sample_available(0.5, seed=0.5, round=0, num_clients=4)
    with pytest.raises(TypeError, match="num_clients must be an integer"):
        ops.sample_available(0.5, seed=0, round=0, num_clients=4.0)
    with pytest.raises(ValueError, match="out must have shape"):
        ops.sample_clients(10, 3, seed=0, round=0, out=np.zeros(4, np.int64))


def test_availability(rng):
    prob = rng.uniform(size=5001)
    mask = ops.sample_available(prob, seed=8, round=2)
    np.testing.assert_array_equal(mask, reference.sample_available(prob, seed=8, round=2))
    assert mask.dtype == bool
    # Number available: a sum of independent Bernoullis (normal approximation, 5 sigma).
    assert abs(mask.sum() - prob.sum()) < 5 * np.sqrt(np.sum(prob * (1 - prob)))
    f32 = ops.sample_available(prob.astype(np.float32), seed=8, round=2)
    np.testing.assert_array_equal(f32, reference.sample_available(prob.astype(np.float32), seed=8,
                                                                  round=2))
    const = ops.sample_available(0.3, seed=8, round=2, num_clients=5001)
    np.testing.assert_array_equal(const, reference.sample_available(np.full(5001, 0.3), seed=8,
                                                                    round=2))
    assert not ops.sample_available(0.0, seed=1, round=0, num_clients=100).any()
    assert ops.sample_available(1.0, seed=1, round=0, num_clients=100).all()
    with pytest.raises(ValueError, match="prob must be in"):
        ops.sample_available(np.array([0.5, 1.5]), seed=1, round=0)
    with pytest.raises(ValueError, match="num_clients is needed"):
        ops.sample_available(0.5, seed=1, round=0)


@requires_cuda
def test_cuda_identical_to_cpu(rng):
    like = torch.empty(0, device="cuda")
    ids = ops.sample_clients(10 ** 9, 1000, seed=4, round=11, like=like)
    np.testing.assert_array_equal(ids.cpu().numpy(), ops.sample_clients(10 ** 9, 1000, seed=4,
                                                                       round=11))
    prob = rng.uniform(size=1003)
    mask = ops.sample_available(torch.from_numpy(prob).cuda(), seed=4, round=11)
    np.testing.assert_array_equal(mask.cpu().numpy(), ops.sample_available(prob, seed=4, round=11))
