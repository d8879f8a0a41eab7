"""Selection on a virtual clock: every policy against a brute-force reading of its definition
over a small population, invitations that look at O(invited) clients at K = 10^8, and a state
that continues a run exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastfair.sim.population import Policy, PopulationAvailability, keep
from fastfair.sim.population.devices import Population
from fastfair.sim.rounds.availability import UniformAvailability
from fastfair.sim.seeding import Stream, round_keys, uniform

K, M, BYTES = 40, 6, 2e6


def _samples(ids):
    return 20 + (np.asarray(ids) * 7) % 50


def _brute_round(pop, policy, round, clock):
    """One round by loops over clients, straight from the definitions."""
    n = math.ceil(round_to(M * (1 + policy.over_select)))
    cap = 64 * n + 4096
    u = uniform(round_keys(pop.seed, Stream.POPULATION_INVITE, np.arange(cap, dtype=np.uint64),
                           round))
    online = [bool(pop.online(np.array([k]), clock, round)[0]) for k in range(K)]
    invited = []
    for j in range(cap):
        k = min(int(u[j] * K), K - 1)
        if len(invited) < n and k not in invited and online[k]:
            invited.append(k)
    invited.sort()
    rows = []
    for k in invited:
        one = np.array([k])
        g = pop.tier(one)
        down = BYTES / pop.down(one, g)[0]
        compute = 2 * _samples(one)[0] / pop.speed(one, g)[0]
        finish = down + compute + BYTES / pop.up(one, g)[0]
        dropped, at = pop.dropouts(one, g, round)
        rows.append((k, finish, bool(dropped[0]), at[0] * finish, down, compute))
    limit = policy.deadline if policy.deadline is not None else float("inf")
    done = sorted((f, k) for k, f, d, *_ in rows if not d and f <= limit)[:M]
    kept = sorted(k for _, k in done)
    if len(done) == M:
        duration = max(f for f, _ in done)
    elif policy.deadline is not None:
        duration = policy.deadline
    else:
        duration = max([dt if d else f for _, f, d, dt, _, _ in rows], default=0.0)
    wasted = 0.0
    for k, f, d, dt, down, compute in rows:
        if k in kept:
            continue
        end = dt if d else min(f, duration)
        wasted += min(max((end - down) / compute, 0.0), 1.0) * 2 * _samples([k])[0]
    return kept, duration, wasted


def round_to(x):
    return round(x, 9)


POLICIES = [Policy(), Policy("overselect", 0.5), Policy("deadline", deadline=30.0),
            Policy("deadline", 0.3, 12.0)]


@pytest.mark.parametrize("policy", POLICIES, ids=["all", "overselect", "deadline", "both"])
@pytest.mark.parametrize("process", ["always", "diurnal", "sessions", "bernoulli"])
def test_every_policy_matches_the_brute_force_reference(policy, process):
    pop = Population(K, seed=11, process=process, mean_on=5000.0, mean_off=5000.0,
                     online_prob=0.6)
    sel = PopulationAvailability(pop, policy, M, _samples, work_per_sample=2.0,
                                 model_bytes=BYTES)
    clock = 0.0
    for r in range(1, 9):
        kept, duration, wasted = _brute_round(pop, policy, r, clock)
        got = sel.sample(r)
        if not sel.round_record().get("invited"):  # nobody online: an idle round
            assert kept == [] and sel.round_record()["round_time"] == 60.0
            clock += 60.0
            continue
        assert got.tolist() == kept
        record = sel.round_record()
        assert record["round_time"] == pytest.approx(duration, rel=1e-12)
        assert record["wasted_work"] == pytest.approx(wasted, rel=1e-9, abs=1e-9)
        clock += duration
        assert sel.clock == pytest.approx(clock, rel=1e-12)


def test_keep_orders_by_finish_then_id_and_waits_as_documented():
    finish = np.array([5.0, 1.0, 3.0, 1.0, 9.0])
    dropped = np.array([False, False, False, False, True])
    kept, duration = keep(finish, dropped, finish / 2, 2, None)
    assert kept.tolist() == [False, True, False, True, False] and duration == 1.0
    kept, duration = keep(finish, dropped, finish / 2, 5, None)  # wait for all: the drop
    assert kept.sum() == 4 and duration == 5.0
    kept, duration = keep(finish, dropped, finish / 2, 5, 4.0)  # deadline: the whole D
    assert kept.tolist() == [False, True, True, True, False] and duration == 4.0


def test_invitations_look_at_o_invited_clients_at_a_hundred_million():
    pop = Population(10**8, seed=0, process="diurnal")
    sel = PopulationAvailability(pop, Policy("overselect", 0.3), 1000, lambda ids: np.full(
        ids.shape, 50), model_bytes=4e5)
    for r in range(1, 4):
        ids = sel.sample(r)
        assert ids.size == 1000 and np.all(np.diff(ids) > 0)
        assert sel.round_record()["invited"] == 1300
    # per round: about 1300 / (1/3) candidates, plus the 1300 invitees' properties; never K
    assert sel.draws <= 3 * 5 * 1300


def test_another_availability_model_invites():
    pop = Population(50, seed=4)
    invite = UniformAvailability(50, 9, 4)
    sel = PopulationAvailability(pop, Policy("overselect", 0.5), 6, _samples, invite=invite)
    ids = sel.sample(1)
    assert set(ids) <= set(invite.sample(1)) and ids.size == 6


def test_state_continues_exactly_and_refuses_what_does_not_fit():
    def make():
        return PopulationAvailability(Population(K, seed=2, process="sessions",
                                                 mean_on=30.0, mean_off=60.0),
                                      Policy("deadline", 0.5, 20.0), M, _samples,
                                      track_participation=True)

    straight, first = make(), make()
    runs = [straight.sample(r) for r in range(1, 9)]
    for r in range(1, 5):
        first.sample(r)
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    assert resumed.sample(4).tolist() == runs[3].tolist()  # the round just played, again
    for r in range(5, 9):
        assert resumed.sample(r).tolist() == runs[r - 1].tolist()
    assert resumed.clock == straight.clock
    assert resumed.round_record() == straight.round_record()
    for a, b in zip(resumed.participation(), straight.participation()):
        np.testing.assert_array_equal(a, b)
    ids, counts = straight.participation()
    assert counts.sum() == sum(r.size for r in runs)
    state = straight.state_dict()
    with pytest.raises(ValueError, match="incomplete"):
        resumed.load_state_dict({"clock": 1.0})
    assert resumed.state_dict()["clock"] == state["clock"]
    with pytest.raises(ValueError, match="in order"):
        make().sample(3)


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="fast"), "policy must be one of"), (dict(name="all", over_select=0.2), "overselect"),
    (dict(name="deadline"), "needs one"),
    (dict(name="deadline", deadline=-1.0), "number of seconds in \\(0, "),
    (dict(name="overselect", over_select=-0.1), ">= 0")])
def test_policies_refuse_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Policy(**kwargs)


@pytest.mark.parametrize("deadline", [True, "30", float("inf"), 0.0, 1e300])
def test_a_deadline_is_a_bounded_number_of_seconds(deadline):
    with pytest.raises(ValueError, match=r"deadline \(--deadline\)"):
        Policy("deadline", 0.0, deadline)



@pytest.mark.parametrize("over_select", ["x", True, float("nan")])
def test_over_select_must_be_a_number(over_select):
    with pytest.raises(ValueError, match=r"over_select \(--over-select\) must be a number"):
        Policy("overselect", over_select)


@pytest.mark.parametrize("option, value", [("model_bytes", 1e300), ("idle", float("inf")),
                                           ("idle", 0.0)])
def test_a_selection_built_directly_bounds_the_clock(option, value):
    with pytest.raises(ValueError, match=rf"{option} must be in \(0, "):
        PopulationAvailability(Population(K, 0), Policy(), M, _samples, **{option: value})


def test_a_deadline_no_client_can_meet_is_refused_and_one_just_above_keeps_clients():
    from fastfair.sim.population.devices import Tier

    tier = Tier("only", 1.0, speed=50.0, down=1e6, up=2e5, dropout=0.0)
    pop = Population(K, 0, tiers=[tier], spread=0.0)
    quickest = BYTES / 1e6 + 100 / 50.0 + BYTES / 2e5       # one round, computed by hand
    assert pop.quickest(BYTES, 100.0) == pytest.approx(quickest, rel=1e-15)
    with pytest.raises(ValueError, match=r"deadline \(--deadline\) .* no client would ever be "
                                         r"kept; give a deadline above"):
        PopulationAvailability(pop, Policy("deadline", deadline=quickest * 0.999), M, _samples,
                               work_fixed=100.0, model_bytes=BYTES)
    ok = PopulationAvailability(pop, Policy("deadline", deadline=quickest * 1.001), M, _samples,
                                work_fixed=100.0, model_bytes=BYTES)
    assert ok.sample(1).size == M
    spread = Population(K, 0, tiers=[tier], spread=0.3)    # faster draws: a lower bound
    assert spread.quickest(BYTES, 100.0) < quickest
    keys = np.arange(K)
    times = BYTES / spread.down(keys, spread.tier(keys)) + 100 / spread.speed(
        keys, spread.tier(keys)) + BYTES / spread.up(keys, spread.tier(keys))
    assert times.min() >= spread.quickest(BYTES, 100.0)
