"""Per-client vectors kept over the clients a run touches: the same values as the dense array bit
for bit, the same rounds whichever storage holds them, exact state round trips, old dense
snapshots still load, and populations far beyond memory (K = 10^10) cost memory per client
touched."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fastfair import aggregators as A
from fastfair.aggregators import _client_vector as cv

RULES = {
    "aaggff-d": lambda K: A.AAggFFD(K),
    "aaggff-d-reference_code": lambda K: A.AAggFFD(K, "normal", variant="reference_code",
                                                   initial_p="reference_code"),
    "afl": lambda K: A.AFL(K, 0.5),
    "afl-reference_code": lambda K: A.AFL(K, 0.5, initial_lambda="reference_code"),
    "fedmaba": lambda K: A.FedMABA(K, rho=0.1),
    "fedmaba-overwrite": lambda K: A.FedMABA(K, rho=3.0, kl_reference="total", sync="overwrite"),
}
VECTOR = {"aaggff-d": "D", "afl": "lam", "fedmaba": "log_p"}


def _vector_name(agg):
    return VECTOR[agg.name]


def _play(agg, K, m, rounds, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        ids = rng.choice(K, m, replace=False)
        out.append(agg.weights(ids, rng.uniform(0.1, 2.0, m)))
    return out


def _bits(x):
    return np.asarray(x, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("ops", range(4))
def test_vector_matches_a_dense_array_bit_for_bit(ops, monkeypatch):
    """Random gathers, scatters and resets on K = 40 against a NumPy array, with the switch to
    dense storage at each of several fill levels (and never)."""
    monkeypatch.setattr(cv, "DENSE_FRACTION", [0.0, 0.3, 1.0, np.inf][ops])
    K, rng = 40, np.random.default_rng(ops)
    vec, ref = cv.ClientVector(K, 0.25), np.full(K, 0.25)
    for step in range(60):
        ids = rng.choice(K, int(rng.integers(1, 9)), replace=False).astype(np.int64)
        np.testing.assert_array_equal(_bits(vec.gather(ids)), _bits(ref[ids]))
        values = rng.standard_normal(ids.shape[0])
        values[0] = -0.0 if step % 7 == 0 else values[0]  # differs from 0.0 only in its bits
        vec.scatter(ids, values)
        ref[ids] = values
        if step == 30:
            vec.reset(-1.5)
            ref.fill(-1.5)
        np.testing.assert_array_equal(_bits(vec.dense()), _bits(ref))
    assert vec.stored <= K


def _check_runs(vec):
    """The runs' invariants: each sorted, ids disjoint, each holding more than ``RUN_RATIO``
    times the next, and as many entries as ``stored``."""
    runs = vec._store.runs
    for run in runs:
        assert run.ids.dtype == np.int64 and run.values.dtype == np.float64
        assert run.ids.shape == run.values.shape and (np.diff(run.ids) > 0).all()
    for bigger, smaller in zip(runs, runs[1:]):
        assert bigger.ids.shape[0] > cv.RUN_RATIO * smaller.ids.shape[0]
    ids = np.concatenate([run.ids for run in runs]) if runs else np.empty(0, np.int64)
    assert np.unique(ids).shape == ids.shape and ids.shape[0] == vec.stored


@pytest.mark.parametrize("ratio, seed", [(4, 0), (2, 1), (4, 2), (8, 3)])
def test_runs_match_a_dense_array_over_many_rounds(ratio, seed, monkeypatch):
    """Hundreds of rounds of fresh and stored ids (merges over several levels, then rounds of
    stored ids only), resets and state round trips against a NumPy array, bit for bit."""
    monkeypatch.setattr(cv, "DENSE_FRACTION", np.inf)
    monkeypatch.setattr(cv, "RUN_RATIO", ratio)
    K, rng = 3000, np.random.default_rng(seed)
    vec, ref, most_runs = cv.ClientVector(K, 0.0), np.zeros(K), 0
    for step in range(400):
        ids = rng.choice(K, int(rng.integers(1, 40)), replace=False).astype(np.int64)
        np.testing.assert_array_equal(_bits(vec.gather(ids)), _bits(ref[ids]))
        values = rng.standard_normal(ids.shape[0])
        values[rng.random(ids.shape[0]) < 0.1] = vec.fill  # stored, equal to the fill
        vec.scatter(ids, values)
        ref[ids] = values
        _check_runs(vec)
        most_runs = max(most_runs, len(vec._store.runs))
        if step % 37 == 36:  # a snapshot, and the vector rebuilt from it, continues the same
            state = vec.state("v")
            differ = np.flatnonzero(_bits(ref) != _bits(np.float64(vec.fill)))
            np.testing.assert_array_equal(state["v_ids"], differ)
            np.testing.assert_array_equal(_bits(state["v_values"]), _bits(ref[differ]))
            cv.check_state(state, "v", K)
            vec = cv.ClientVector.from_state(state, "v", K)
        if step % 150 == 149:
            vec.reset(float(step))
            ref.fill(float(step))
        if step % 50 == 0:
            np.testing.assert_array_equal(_bits(vec.dense()), _bits(ref))
    np.testing.assert_array_equal(_bits(vec.dense()), _bits(ref))
    assert most_runs >= 3  # several levels were merged


def test_merges_copy_each_entry_a_logarithmic_number_of_times(monkeypatch):
    """Rounds of fresh ids: the merges copy each entry at most log_1.25(n) + 1 times (where one
    sorted array copied all n stored entries each round), and at most log_4(n) + 1 runs stay."""
    copied = []

    def counted(runs):
        merged = merge(runs)
        copied.append(merged.ids.shape[0])
        return merged

    merge = cv._merged
    monkeypatch.setattr(cv, "_merged", counted)
    K, m, rounds, rng = 10**12, 20, 500, np.random.default_rng(0)
    vec, inserted = cv.ClientVector(K, 0.0), 0
    for _ in range(rounds):
        vec.scatter(rng.choice(K, m, replace=False).astype(np.int64), np.ones(m))
        inserted += vec.stored  # what one sorted array would have copied this round
        assert len(vec._store.runs) <= np.log(vec.stored) / np.log(cv.RUN_RATIO) + 1
    n = vec.stored
    assert n == m * rounds
    ratio = 1 + 1 / cv.RUN_RATIO
    assert sum(copied) <= n * (np.log(n) / np.log(ratio) + 1) < inserted / 5
    _check_runs(vec)


def test_storage_follows_the_clients_touched():
    vec = cv.ClientVector(100, 0.0)
    vec.scatter(np.array([7, 3], np.int64), np.array([1.0, 2.0]))
    vec.scatter(np.array([3, 9], np.int64), np.array([5.0, 6.0]))
    assert vec.stored == 3
    vec.scatter(np.arange(10, 57, dtype=np.int64), np.ones(47))
    assert vec.stored == 100  # 50 of 100 stored: one dense array from here on
    vec.reset(0.5)
    assert vec.stored == 0


@pytest.mark.parametrize("name", sorted(RULES))
def test_sparse_and_dense_storage_give_identical_rounds(name, monkeypatch):
    """The lazy state against the dense one: coefficients, state and the full decision bit for
    bit (the same float64 operations in the same order)."""
    K, m = 50, 6
    runs = []
    for fraction in (np.inf, 0.0):  # never dense; dense from the first write
        monkeypatch.setattr(cv, "DENSE_FRACTION", fraction)
        agg = RULES[name](K)
        coefs = _play(agg, K, m, 12, seed=3)
        runs.append((coefs, agg.state_dict(), getattr(agg, _vector_name(agg))))
    (ca, sa, va), (cb, sb, vb) = runs
    for a, b in zip(ca, cb):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    assert sa["state"].keys() == sb["state"].keys()
    for key in sa["state"]:
        np.testing.assert_array_equal(sa["state"][key], sb["state"][key])
    np.testing.assert_array_equal(_bits(va), _bits(vb))


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_version_2_dense_snapshot_loads_and_continues_identically(name):
    """What fastfair wrote before version 3 (the dense vector ``[K]``) restores the same rule."""
    K, m = 30, 5
    agg = RULES[name](K)
    _play(agg, K, m, 4, seed=1)
    sd = agg.state_dict()
    key = _vector_name(agg)
    old = copy.deepcopy(sd)
    old["format_version"] = 2
    for suffix in ("_ids", "_values", "_fill"):
        del old["state"][key + suffix]
    old["state"][key] = getattr(agg, key)
    frozen = copy.deepcopy(old)
    resumed = RULES[name](K)
    resumed.load_state_dict(old)
    assert old["state"].keys() == frozen["state"].keys()  # the caller's dict is not changed
    np.testing.assert_array_equal(getattr(resumed, key), getattr(agg, key))
    for a, b in zip(_play(agg, K, m, 4, seed=2), _play(resumed, K, m, 4, seed=2)):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    bad = copy.deepcopy(frozen)
    bad["state"][key] = np.append(bad["state"][key][:-1], np.nan)
    fresh = RULES[name](K)
    with pytest.raises(ValueError, match=rf"state\['{key}'\] must be finite"):
        fresh.load_state_dict(bad)
    assert fresh.round == 0 and fresh.state_dict()["state"][key + "_ids"].size == 0


def test_snapshot_lists_only_entries_that_differ_from_the_fill():
    agg = A.AAggFFD(10**6)
    _play(agg, 10**6, 20, 3, seed=0)
    state = agg.state_dict()["state"]
    ids = state["D_ids"]
    assert ids.dtype == np.int64 and ids.shape[0] <= 60 and (np.diff(ids) > 0).all()
    assert state["D_values"].shape == ids.shape and state["D_fill"] == 0.0


@pytest.mark.parametrize("name", ["aaggff-d", "afl-reference_code", "fedmaba"])
def test_ten_billion_clients_cost_memory_per_client_touched(name):
    """K = 10^10 (a dense vector would be 80 GB): ids up to K - 1 address their own entries and
    a snapshot round trips."""
    K, m = 10**10, 1000
    agg = RULES[name](K)
    rng = np.random.default_rng(0)
    for _ in range(3):
        ids = rng.choice(K, m, replace=False)
        ids[0] = K - 1 if _ == 0 else ids[0]
        coef = agg.weights(ids, rng.uniform(0.1, 2.0, m))
        assert np.isfinite(coef).all() and coef.shape == (m,)
    vec = agg.__dict__["_" + _vector_name(agg)]
    assert vec.stored <= 3 * m
    sd = agg.state_dict()
    twin = RULES[name](K)
    twin.load_state_dict(sd)
    ids = np.array([K - 1, 0, 9876543210], dtype=np.int64)
    np.testing.assert_array_equal(twin.weights(ids, [1.0, 0.5, 0.2]),
                                  agg.weights(ids, [1.0, 0.5, 0.2]))


def test_reads_beside_a_concurrent_writer_see_whole_states(monkeypatch):
    """A round proposed in one thread may read while another commits (the contract's Threads):
    every read must see each entry as written or as the fill, never fail on a half-replaced
    store, through inserts, the switch to dense storage and resets."""
    import threading

    monkeypatch.setattr(cv, "DENSE_FRACTION", 0.5)
    K = 4000
    vec, stop, errors = cv.ClientVector(K, -1.0), threading.Event(), []

    def read():
        rng = np.random.default_rng(1)
        while not stop.is_set():
            ids = rng.choice(K, 50, replace=False).astype(np.int64)
            try:
                got = vec.gather(ids)
                ok = (got == -1.0) | (got == -2.0) | (got == ids + 0.5)
                if not ok.all():
                    errors.append(f"torn value {got[~ok][0]}")
            except Exception as exc:  # noqa: BLE001 - any failure is the defect
                errors.append(repr(exc))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    rng = np.random.default_rng(0)
    for step in range(400):
        ids = rng.choice(K, 20, replace=False).astype(np.int64)
        vec.scatter(ids, ids + 0.5)
        if step % 100 == 99:
            vec.reset(-2.0)
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors[:3]


@pytest.mark.parametrize("fill", [None, -2.0], ids=["write", "reset-and-write"])
def test_a_scatter_that_fails_to_allocate_changes_nothing(fill, monkeypatch):
    """The commit of a round writes its vector all or nothing: a write that must grow the store
    and fails (memory) leaves the entries already stored, and the fill, as they were."""
    vec = cv.ClientVector(10**9, -1.0)
    vec.scatter(np.array([1, 5], dtype=np.int64), np.array([1.0, 5.0]))

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(cv.np, "argsort", no_memory)  # every grown store sorts
    with pytest.raises(MemoryError):
        vec.scatter(np.array([1, 7], dtype=np.int64), np.array([10.0, 70.0]), fill=fill)
    np.testing.assert_array_equal(vec.gather(np.array([1, 5, 7, 8], dtype=np.int64)),
                                  [1.0, 5.0, -1.0, -1.0])


@pytest.mark.parametrize("make, attr", [
    (lambda: A.AFL(6), "lam"), (lambda: A.AAggFFD(6), "D"), (lambda: A.AAggFFD(6), "p"),
    (lambda: A.AAggFFS(6), "p"), (lambda: A.FedMABA(6), "log_p"), (lambda: A.FedMABA(6), "p"),
], ids=["afl.lam", "aaggff-d.D", "aaggff-d.p", "aaggff-s.p", "fedmaba.log_p", "fedmaba.p"])
def test_arrays_computed_from_the_state_refuse_writes(make, attr):
    """A rule's per-client state is sparse; the dense arrays it exposes are fresh, so a write
    into one would silently do nothing: they are read-only instead."""
    rule = make()
    rule.weights(np.arange(6), np.linspace(0.5, 1.5, 6))
    before = copy.deepcopy(rule.state_dict())
    exposed = getattr(rule, attr)
    with pytest.raises(ValueError, match="assignment destination is read-only"):
        exposed[:] = 0.25
    with pytest.raises(ValueError, match="read-only"):
        exposed += 1.0
    after = rule.state_dict()
    for key, value in before["state"].items():
        np.testing.assert_array_equal(after["state"][key], value)
