"""A population's devices: keyed per client (the same answer one id at a time as in a batch),
the documented distributions, the availability processes against a direct reading of their
definitions, and the CSV forms."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fastfair.sim.population import build_population, check_population
from fastfair.sim.population.devices import DAY, DEFAULT_TIERS, Population, read_population_csv

K = 60


@pytest.mark.parametrize("process", ["always", "bernoulli", "diurnal", "sessions"])
def test_every_draw_of_a_client_is_its_own(process):
    pop = Population(K, seed=3, process=process, mean_on=600.0, mean_off=900.0)
    ids = np.arange(K)
    tier = pop.tier(ids)
    for t, r in ((0.0, 1), (5000.0, 2), (40000.0, 7)):
        together = (pop.online(ids, t, r), pop.speed(ids, tier), pop.up(ids, tier),
                    pop.down(ids, tier), *pop.dropouts(ids, tier, r))
        for k in (0, 17, 59):
            one = np.array([k])
            alone = (pop.online(one, t, r), pop.speed(one, tier[one]), pop.up(one, tier[one]),
                     pop.down(one, tier[one]), *pop.dropouts(one, tier[one], r))
            for a, b in zip(together, alone):
                assert a[k] == b[0]


def test_tiers_follow_their_shares_and_medians():
    pop = Population(200_000, seed=1)
    ids = np.arange(200_000)
    tier = pop.tier(ids)
    shares = np.bincount(tier, minlength=3) / ids.size
    np.testing.assert_allclose(shares, [t.share for t in DEFAULT_TIERS], atol=0.005)
    speed = pop.speed(ids, tier)
    for g, t in enumerate(DEFAULT_TIERS):
        assert np.median(speed[tier == g]) == pytest.approx(t.speed, rel=0.02)
        # log-normal: the log's standard deviation is the spread
        assert np.log(speed[tier == g]).std() == pytest.approx(0.3, rel=0.03)


def test_diurnal_is_the_window_of_local_time():
    pop = Population(K, seed=5, process="diurnal", time_zones=24)
    from fastfair.sim.seeding import Stream, keys, uniform

    ids = np.arange(K)
    zone = np.floor(uniform(keys(5, Stream.POPULATION_PHASE, ids)) * 24)
    for t in (0.0, 3 * 3600.0, 12 * 3600.0 + 17.0, 5 * DAY + 100.0):
        hour = ((t / 3600.0) + zone) % 24
        expect = (hour >= 22) | (hour < 6)
        np.testing.assert_array_equal(pop.online(ids, t, 1), expect)
    # over a day each client is online a third of the time
    grid = np.arange(0, DAY, 600.0)
    share = np.mean([pop.online(ids, t, 1) for t in grid])
    assert share == pytest.approx(8 / 24, abs=0.01)


def test_sessions_and_bernoulli_online_shares():
    ids = np.arange(20_000)
    sessions = Population(ids.size, seed=2, process="sessions", mean_on=1000.0, mean_off=2000.0)
    share = np.mean([sessions.online(ids, t, 1).mean() for t in (3e4, 5e4, 9e4)])
    assert share == pytest.approx(sessions.online_fraction(), abs=0.03)
    coin = Population(ids.size, seed=2, process="bernoulli", online_prob=0.25)
    assert coin.online(ids, 0.0, 4).mean() == pytest.approx(0.25, abs=0.01)
    assert not np.array_equal(coin.online(ids, 0.0, 4), coin.online(ids, 0.0, 5))


def test_options_replace_the_tiers_and_are_checked():
    pop = build_population("devices", 10, 0, {"shares": [1, 0, 0], "spread": 0.0,
                                              "speeds": [10, 20, 30]})
    ids = np.arange(10)
    assert (pop.tier(ids) == 0).all() and (pop.speed(ids, pop.tier(ids)) == 10).all()
    with pytest.raises(ValueError, match="one number per tier"):
        build_population("devices", 10, 0, {"shares": [1, 0]})
    with pytest.raises(ValueError, match="did you mean 'process'"):
        check_population("devices", {"proces": "diurnal"})
    with pytest.raises(ValueError, match="--population-option"):
        check_population(None, {"process": "diurnal"})
    with pytest.raises(ValueError, match="dropout must be in"):
        build_population("devices", 10, 0, {"dropouts": [0.1, 1.5, 0.0]})


def test_csv_of_tiers_and_of_clients(tmp_path):
    tiers = tmp_path / "tiers.csv"
    tiers.write_text("tier,share,speed,down,up,dropout,window_start,window_end\n"
                     "slow,3,10,1e6,1e5,0.2,0,12\nfast,1,100,1e7,1e6,0,12,24\n")
    pop = build_population(str(tiers), 1000, 0, {"process": "diurnal", "time_zones": 1})
    ids = np.arange(1000)
    tier = pop.tier(ids)
    assert [t.name for t in pop.tiers] == ["slow", "fast"]
    assert np.mean(tier == 0) == pytest.approx(0.75, abs=0.05)
    np.testing.assert_array_equal(pop.online(ids, 3600.0, 1), tier == 0)
    clients = tmp_path / "clients.csv"
    clients.write_text("id,tier,speed,down,up,dropout\n1,b,5,1,2,0.5\n0,a,7,3,4,0\n")
    tiers_read, table = read_population_csv(str(clients), 2)
    pop = build_population(str(clients), 2, 0, {})
    np.testing.assert_array_equal(pop.tier(np.arange(2)), [0, 1])
    np.testing.assert_array_equal(pop.speed(np.arange(2), pop.tier(np.arange(2))), [7, 5])
    np.testing.assert_array_equal(pop.shares(), [0.5, 0.5])
    with pytest.raises(ValueError, match="lists 2 clients; the run has 3"):
        read_population_csv(str(clients), 3)
    bad = tmp_path / "bad.csv"
    bad.write_text("tier,share,speed\nx,1,2\n")
    with pytest.raises(ValueError, match="missing column"):
        read_population_csv(str(bad), 3)


@pytest.mark.parametrize("options, named", [
    ({"speeds": [1e-320, 75.0, 250.0]}, "speed"),
    ({"downs": [0.0, 5e6, 2.5e7]}, "down"),
    ({"ups": [1e300, 1e6, 1e6]}, "up"),
    ({"spread": 1e6}, "spread"),
    ({"idle": 1e308}, "idle"),
    ({"idle": float("nan")}, "idle"),
    ({"model_bytes": 0}, "model_bytes"),
    ({"model_bytes": 1e300}, "model_bytes"),
    ({"process": "sessions", "mean_on": 1e300}, "mean_on"),
    ({"process": "diurnal", "time_zones": 10**12}, "time_zones"),
    ({"process": "diurnal", "window": [5, 5]}, "window"),
])
def test_clock_inputs_are_bounded(options, named):
    with pytest.raises(ValueError, match=named):
        build_population("devices", K, 0, options)


def test_a_tier_that_is_never_online_is_refused(tmp_path):
    path = tmp_path / "tiers.csv"
    path.write_text("tier,share,speed,down,up,dropout,window_start,window_end\n"
                    "a,1,50,1e6,1e6,0.1,3,3\n")
    with pytest.raises(ValueError, match=r"row 2: tier 'a' has the empty diurnal window"):
        read_population_csv(str(path), K)


def test_the_whole_day_window_keeps_everyone_online():
    pop = build_population("devices", K, 0, {"process": "diurnal", "window": [0, 24]})
    for t in (0.0, 3 * 3600.0, 23.9 * 3600.0):
        assert pop.online(np.arange(K), t, 1).all()


def test_repeated_csv_columns_are_refused(tmp_path):
    path = tmp_path / "tiers.csv"
    path.write_text("tier,share,speed,down,up,dropout,speed\nall,1,50,1e6,1e6,0.1,60\n")
    with pytest.raises(ValueError, match=r"tiers.csv: column\(s\) speed appear more than once"):
        read_population_csv(str(path), K)


def test_a_named_pipe_as_population_file_is_refused(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="pipe.csv"):
        read_population_csv(str(fifo), K)


def test_per_client_csv_with_many_tiers_matches_the_medians(tmp_path):
    n, tiers = 5000, 1000
    rng = np.random.default_rng(0)
    speed = rng.uniform(1, 100, n)
    label = rng.integers(0, tiers, n)
    path = tmp_path / "clients.csv"
    path.write_text("id,tier,speed,down,up,dropout\n" + "".join(
        f"{k},t{label[k]:04d},{float(speed[k])!r},1e6,1e6,0.1\n" for k in range(n)))
    read, table = read_population_csv(str(path), n)
    assert [t.name for t in read] == [f"t{g:04d}" for g in sorted(set(label))]
    for tier in read:
        assert tier.speed == np.median(speed[label == int(tier.name[1:])])
    np.testing.assert_array_equal(table["speed"], speed)


@pytest.mark.parametrize("build, named", [
    (lambda: Population("a", 0), "num_clients"),
    (lambda: Population(5, "x"), "seed"),
    (lambda: Population(5, -1), "seed"),
    (lambda: Population(5, 0, tiers=[]), "tiers"),
    (lambda: Population(5, 0, online_probs=["a", 1, 1]), "online_probs"),
    (lambda: build_population("devices", 5, 0, {"window": ["a", 1]}), "window"),
    (lambda: build_population("devices", 5, 0, {"speeds": ["a", "b", "c"]}), "speeds"),
])
def test_refusals_name_their_argument(build, named):
    with pytest.raises(ValueError, match=named):
        build()
