"""The opt-in bound of :mod:`fastfair.aggregators.bounds` (update-norm clip, sample-count cap),
the two-phase round (``propose`` / ``commit``) and the cap on ``num_clients``.

The tables of the poisoning case in docs/aggregators.md are measured by scripts/poison_table.py
(``python scripts/poison_table.py --write docs/aggregators.md`` rewrites them); the test fails
when they are stale.
"""

import importlib.util
import re

import numpy as np
import pytest

from fastfair import aggregators as agg
from fastfair.aggregators import registry
from fastfair.aggregators.bounds import (
    UpdateBound,
    cap_counts,
    check_bound,
    clip_scales,
    clip_threshold,
)
from tests.helpers import ROOT

# --------------------------------------------------------------------------- the functions


def test_clip_scales_follow_the_formula():
    norms = np.array([1.0, 2.0, 3.0, 0.0, 100.0])
    # median 2; tau = 1.5 * 2 = 3
    assert clip_threshold(norms, 1.5) == 3.0
    assert np.array_equal(clip_scales(norms, 1.5), [1.0, 1.0, 1.0, 1.0, 0.03])
    assert clip_threshold(norms, 2.5, "absolute") == 2.5
    assert np.allclose(clip_scales(norms, 2.5, "absolute"), [1.0, 1.0, 2.5 / 3, 1.0, 0.025])
    assert np.array_equal(clip_scales(norms, None), np.ones(5))
    # The clipped norms are min(norm, tau).
    scaled = clip_scales(norms, 1.5) * norms
    assert np.allclose(scaled, np.minimum(norms, 3.0))


def test_cap_counts_follows_the_formula():
    assert cap_counts([3, 1e308, 0], 100).tolist() == [3.0, 100.0, 0.0]
    assert cap_counts([3, 1e308], None).tolist() == [3.0, 1e308]


@pytest.mark.parametrize("kwargs,match", [
    ({"max_update_norm": 0.0}, "max_update_norm"),
    ({"max_update_norm": -1.0}, "max_update_norm"),
    ({"max_update_norm": float("nan")}, "max_update_norm"),
    ({"max_update_norm": float("inf")}, "max_update_norm"),
    ({"max_update_norm": "3"}, "max_update_norm"),
    ({"update_norm_reference": "mean"}, "update_norm_reference.*'median', 'absolute'"),
    ({"max_samples_per_client": 0}, "max_samples_per_client"),
    ({"max_samples_per_client": True}, "max_samples_per_client"),
])
def test_bad_options_are_refused_naming_the_argument(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        check_bound(**kwargs)
    with pytest.raises((TypeError, ValueError), match=match):
        UpdateBound(**kwargs)


@pytest.mark.parametrize("norms,match", [([1.0, np.nan], "norms must be finite.*position 1"),
                                         ([-1.0], "norms must be finite and non-negative"),
                                         ([], "norms must be 1-D")])
def test_bad_norms_are_refused(norms, match):
    with pytest.raises(ValueError, match=match):
        clip_scales(norms, 1.0)


def test_update_bound_is_off_by_default():
    bound = UpdateBound()
    assert not bound.active and not bound.clips
    assert np.array_equal(bound.scales([1.0, 1e9]), [1.0, 1.0])
    assert bound.counts([1e308]).tolist() == [1e308]


# --------------------------------------------------------------------------- the round

def test_propose_changes_nothing_until_commit():
    rule = agg.FedMABA(10)
    ids, losses = np.arange(4), np.array([0.5, 1.0, 2.0, 3.0])
    before = rule.state_dict()
    coef, commit = rule.propose(ids, losses)
    after = rule.state_dict()
    assert after["state"]["round"] == before["state"]["round"] == 0
    assert all(np.array_equal(after["state"][k], v) for k, v in before["state"].items())
    commit()
    twin = agg.FedMABA(10)
    assert np.array_equal(twin.weights(ids, losses), coef)
    assert rule.round == 1 and np.array_equal(rule.last_mixture, twin.last_mixture)
    assert all(np.array_equal(rule.state_dict()["state"][k], v)
               for k, v in twin.state_dict()["state"].items())


@pytest.mark.parametrize("name", sorted(registry.RULES))
@pytest.mark.parametrize("num_clients", [2 ** 63, 2 ** 64, 10 ** 30])
def test_num_clients_beyond_int64_ids_is_refused(name, num_clients):
    with pytest.raises(ValueError, match=rf"num_clients must be at most 2\*\*63 - 1 .*got "
                                         rf"{num_clients}"):
        registry.build(name, num_clients)


def test_num_clients_up_to_the_last_int64_id_is_accepted():
    rule = agg.FairAvg(2 ** 63 - 1)
    assert rule.weights(np.array([0, 2 ** 63 - 2], dtype=np.int64)).tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="client_ids must lie in"):
        rule.weights(np.array([2 ** 63], dtype=np.uint64))


# --------------------------------------------------------------------------- the 1000x case


def _load_script():
    spec = importlib.util.spec_from_file_location("poison_table",
                                                  ROOT / "scripts" / "poison_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


poison = _load_script()
BOUND, ABSOLUTE = poison.BOUNDS["median"], poison.BOUNDS["absolute"]
NO_BOUND, CAP = poison.BOUNDS["none"], poison.BOUNDS["cap"]


def test_the_table_covers_every_rule_of_the_registry():
    assert sorted(poison.RULES) == sorted(registry.RULES)


@pytest.mark.parametrize("name", poison.RULES)
def test_the_clip_bounds_a_poisoned_reply_for_every_rule(name):
    honest = poison.step_norm(name, NO_BOUND, poison=1.0)
    free = poison.step_norm(name, NO_BOUND)
    clipped = poison.step_norm(name, BOUND)
    updates, losses, counts = poison.poisoned_round()
    norms = np.linalg.norm(updates, axis=1)
    tau = 3.0 * float(np.median(norms))
    _, coef = poison.bounded_step(name, updates, losses, counts, BOUND)
    # No clipped update is longer than tau: the step is at most sum_i |c_i| min(|X_i|, tau).
    assert clipped <= float(np.abs(coef) @ np.minimum(norms, tau)) * (1 + 1e-9)
    if name != "fedmgda":  # coefficients summing to at most 1 (FedMGDA's are 1/norm-scaled)
        assert np.abs(coef).sum() <= 1 + 1e-9
        assert clipped <= tau and clipped < free
        # ... and an absolute bound holds whatever the median is.
        assert poison.step_norm(name, ABSOLUTE) <= 0.5
    # The honest round is left alone by the clip (its largest update is well inside 3 x median).
    assert poison.step_norm(name, BOUND, poison=1.0) == pytest.approx(honest, rel=1e-12)


@pytest.mark.parametrize("name", poison.RULES)
def test_the_count_cap_bounds_a_huge_claim_for_every_rule(name):
    free, capped = (poison.claim_weight(name, b) for b in (NO_BOUND, CAP))
    # Rules that weigh by counts give the claim everything; the cap gives it at most
    # 1000 / (1000 + 900) (FedAvg's share; TERM's tilts it by the loss), the others ignore it.
    if name in ("fedavg", "fedprox", "propfair", "term"):
        assert free == 1.0
        assert capped <= 0.6 and capped == pytest.approx(1000 / 1900, rel=0.1)
    else:
        assert capped == free
    honest = poison.step_norm(name, NO_BOUND, poison=1.0)
    both = poison.step_norm(name, poison.BOUNDS["both"], claim=poison.CLAIM)
    assert np.isfinite(both) and both <= 10 * honest


def test_the_count_cap_takes_a_huge_claim_off_fedavgs_weight():
    updates, losses, counts = poison.poisoned_round(poison=1.0, claim=1e308)
    _, coef = poison.bounded_step("fedavg", updates, losses, counts, NO_BOUND)
    assert coef[9] == 1.0  # without the cap: one reply takes all of FedAvg's weight
    _, coef = poison.bounded_step("fedavg", updates, losses, counts, CAP)
    assert coef[9] == pytest.approx(1000 / (1000 + 900))
    assert coef[:9].sum() > 0.45


# --------------------------------------------------------------------------- the docs table


def test_docs_table_is_the_measured_one():
    text = (ROOT / "docs" / "aggregators.md").read_text(encoding="utf-8")
    match = re.search(re.escape(poison.START) + r"\n(.*?)\n" + re.escape(poison.END), text,
                      re.S)
    assert match, "docs/aggregators.md lacks the poison table markers"
    assert match.group(1) == poison.tables(), (
        "docs/aggregators.md's poison tables are stale: run "
        "python scripts/poison_table.py --write docs/aggregators.md")


def test_clipped_inputs_scale_every_form_of_updates_alike():
    """One helper serves the simulator (rows [m, P]) and the Flower strategy (per client a list
    of arrays): sq_norms times s^2, updates times s in their own dtype, other inputs kept."""
    scales = np.array([0.5, 1.0])
    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs = {"sq_norms": np.array([4.0, 9.0]), "updates": rows, "losses_sent": np.ones(2)}
    out = UpdateBound.clipped_inputs(inputs, scales)
    np.testing.assert_array_equal(out["sq_norms"], [1.0, 9.0])
    assert out["updates"].dtype == np.float32
    np.testing.assert_array_equal(out["updates"], [[0.0, 0.5, 1.0], [3.0, 4.0, 5.0]])
    assert out["losses_sent"] is inputs["losses_sent"] and inputs["updates"] is rows
    lists = [[rows[0], np.array([2, 4])], [rows[1], np.array([1, 3])]]
    listed = UpdateBound.clipped_inputs({"updates": lists}, scales)["updates"]
    np.testing.assert_array_equal(listed[0][0], out["updates"][0])
    np.testing.assert_array_equal(listed[0][1], [1.0, 2.0])
    np.testing.assert_array_equal(listed[1][0], out["updates"][1])
