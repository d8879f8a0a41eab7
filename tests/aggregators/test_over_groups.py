"""Any rule over groups of clients (docs/algorithms.md §8): the prior a rule that does not adapt
reproduces (FedAvg bit for bit under the size prior), group losses and shares, the direct form of
the rules that take updates, refusals with their reasons, validation before mutation and an
exact state_dict tied to the group map."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fastfair import aggregators as A
from fastfair.aggregators.over_groups import check_group_form, map_checksum

K, G = 60, 4
RNG = np.random.default_rng(0)
GROUPS = RNG.integers(0, G, K)
COUNTS = RNG.integers(0, 40, K).astype(np.float64)


def _rounds(rounds=15, m=12, seed=1, zero=False):
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        ids = rng.choice(K, m, replace=False)
        losses = rng.gamma(2.0, 0.5, m) + GROUPS[ids]
        counts = COUNTS[ids] * (0.0 if zero else 1.0)
        yield ids, losses, counts


STILL = [("fedavg", {}), ("fairavg", {}), ("aaggff-d", {"step_scale": 0.0}),
         ("afl", {"step_size": 0.0}), ("fedmaba", {"step_size": 0.0}), ("term", {"tilt": 0.0}),
         ("propfair", {}), ("fedprox", {}), ("qfedavg", {"form": "eg", "q": 0.0})]


@pytest.mark.parametrize("rule, options", STILL, ids=[r for r, _ in STILL])
@pytest.mark.parametrize("zero", [False, True], ids=["counts", "zero-counts"])
def test_a_rule_that_does_not_adapt_with_the_size_prior_is_fedavg_bit_for_bit(rule, options,
                                                                              zero):
    over = A.OverGroups(rule, GROUPS, prior="size", rule_options=options)
    fedavg = A.FedAvg(K)
    # AFL's projection moves lambda off uniform whenever a group is absent (the sampled entries
    # are projected back to the simplex): at step 0 it adapts only to which groups are present.
    for ids, losses, counts in _rounds(zero=zero, m=K if rule == "afl" else 12):
        np.testing.assert_array_equal(over.weights(ids, losses, num_samples=counts),
                                      fedavg.weights(ids, losses, num_samples=counts))


@pytest.mark.parametrize("rule", ["fedavg", "fairavg"])
def test_the_uniform_prior_is_fairavg_over_groups(rule):
    over = A.OverGroups(rule, GROUPS, num_samples=COUNTS)
    for ids, losses, _ in _rounds():
        coef = over.weights(ids, losses)
        g = GROUPS[ids]
        present = np.unique(g)
        expected = np.array([COUNTS[k] / COUNTS[ids][g == gk].sum() / present.size
                             if COUNTS[ids][g == gk].sum() > 0 else 1 / (g == gk).sum() /
                             present.size for k, gk in zip(ids, g)])
        np.testing.assert_allclose(coef, expected, rtol=1e-14)
        np.testing.assert_allclose(over.last_group_weights[present], 1 / present.size,
                                   rtol=1e-14)
        assert np.all(over.last_group_weights[np.setdiff1d(np.arange(G), present)] == 0)


def test_uniform_share_splits_a_group_equally():
    over = A.OverGroups("fedavg", GROUPS, share="uniform")
    ids = np.arange(10)
    coef = over.weights(ids)  # needs no counts: uniform prior, uniform share
    g = GROUPS[ids]
    for gk in np.unique(g):
        assert np.allclose(coef[g == gk], coef[g == gk][0])
        assert coef[g == gk].sum() == pytest.approx(1 / np.unique(g).size)


def test_the_inner_rule_sees_sample_weighted_group_losses_and_its_weights_are_the_groups():
    """Under the uniform prior the group weights are the inner rule's coefficients; the inner
    rule plays exactly the rounds a rule over G clients plays on the group losses."""
    over = A.OverGroups("aaggff-d", GROUPS, num_samples=COUNTS)
    alone = A.AAggFFD(G)
    for ids, losses, _ in _rounds(30, m=20):
        coef = over.weights(ids, losses)
        g, n = GROUPS[ids], COUNTS[ids]
        present = np.unique(g)
        group_losses = np.array([np.dot(n[g == gk], losses[g == gk]) / n[g == gk].sum()
                                 if n[g == gk].sum() > 0 else losses[g == gk].mean()
                                 for gk in present])
        np.testing.assert_allclose(over.last_group_losses[present], group_losses, rtol=1e-14)
        inner = alone.weights(present, group_losses, num_samples=np.ones(present.size))
        np.testing.assert_allclose(over.last_group_weights[present], inner, rtol=1e-13)
        per_group = np.bincount(np.searchsorted(present, g), weights=coef)
        np.testing.assert_allclose(per_group, inner, rtol=1e-13)
    assert not np.allclose(over.last_group_weights, 1 / G)  # it adapted
    # The group losses agree to rounding (above), so the states do too: NumPy's summation order
    # differs between versions.
    np.testing.assert_allclose(over.rule.D, alone.D, rtol=1e-13)


def test_the_size_prior_tilts_fedavg_by_the_rule():
    over = A.OverGroups("afl", GROUPS, prior="size", num_samples=COUNTS,
                        rule_options={"step_size": 0.3})
    alone = A.AFL(G, 0.3)
    for ids, losses, _ in _rounds(10, m=30):
        coef = over.weights(ids, losses)
        g, n = GROUPS[ids], COUNTS[ids]
        present = np.unique(g)
        lam = alone.weights(present, over.last_group_losses[present])
        mass = np.array([n[g == gk].sum() for gk in present])
        w = mass * lam / np.dot(mass, lam)
        np.testing.assert_allclose(over.last_group_weights[present], w, rtol=1e-12)
        expected = w[np.searchsorted(present, g)] * n / mass[np.searchsorted(present, g)]
        np.testing.assert_allclose(coef, expected, rtol=1e-12)


@pytest.mark.parametrize("rule, options", [("fedmgda", {}),
                                           ("qfedavg", {"q": 1.0, "lipschitz": 10.0})])
def test_rules_that_take_updates_run_on_each_groups_averaged_update(rule, options):
    over = A.OverGroups(rule, GROUPS, num_samples=COUNTS + 1, rule_options=options)
    alone = A.registry.build(rule, G, **options)
    assert over.round_inputs == ("updates",)
    rng = np.random.default_rng(5)
    for ids, losses, _ in _rounds(5, m=16):
        X = rng.standard_normal((ids.size, 7))
        coef = over.weights(ids, losses, updates=X)
        g, n = GROUPS[ids], COUNTS[ids] + 1
        present = np.unique(g)
        share = n / np.array([n[g == gk].sum() for gk in g])
        deltas = np.stack([(share[g == gk, None] * X[g == gk]).sum(0) for gk in present])
        inner = alone.weights(present, over.last_group_losses[present], updates=deltas)
        np.testing.assert_allclose(coef, inner[np.searchsorted(present, g)] * share, rtol=1e-10)
        # The combined direction is the inner rule's over the group updates.
        np.testing.assert_allclose(coef @ X, inner @ deltas, rtol=1e-10, atol=1e-12)
        assert over.last_mixture.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="needs the updates"):
        over.weights(ids, losses)
    with pytest.raises(ValueError, match="not sq_norms"):
        over.weights(ids, losses, sq_norms=np.ones(ids.size))


def test_works_with_torch_updates():
    torch = pytest.importorskip("torch")
    over = A.OverGroups("fedmgda", GROUPS, num_samples=COUNTS + 1)
    ref = A.OverGroups("fedmgda", GROUPS, num_samples=COUNTS + 1)
    ids = np.arange(15)
    X = np.random.default_rng(2).standard_normal((15, 5))
    np.testing.assert_allclose(ref.weights(ids, updates=X),
                               over.weights(ids, updates=torch.from_numpy(X)), rtol=1e-12)
    listed = [[torch.from_numpy(x[:2].copy()), torch.from_numpy(x[2:].copy())] for x in X]
    np.testing.assert_allclose(ref.weights(ids, updates=X), over.weights(ids, updates=listed),
                               rtol=1e-12)


@pytest.mark.parametrize("rule, options, prior, match", [
    ("fedcvar", {}, "uniform", "no group form: Fed-CVaR-Avg's server takes the uniform mean"),
    ("fedmgda", {}, "size", "takes prior='uniform' only"),
    ("qfedavg", {}, "size", "takes prior='uniform' only"),
    ("over-groups", {}, "uniform", "already a group form"),
])
def test_rules_without_a_group_form_are_refused_with_the_reason(rule, options, prior, match):
    with pytest.raises(ValueError, match=match):
        A.OverGroups(rule, GROUPS, prior=prior, rule_options=options)
    with pytest.raises(ValueError, match=match):
        check_group_form(rule, options, prior)


def test_every_other_rule_has_a_group_form():
    forms = {name: check_group_form(name) for name in A.RULES if name != "fedcvar"}
    assert forms.pop("fedmgda") == forms.pop("qfedavg") == "direct"
    assert set(forms.values()) == {"tilt"}
    assert check_group_form("qfedavg", {"form": "eg"}, "size") == "tilt"


def test_client_objectives_pass_through():
    over = A.OverGroups("fedprox", GROUPS, rule_options={"mu": 0.3})
    assert over.client_objective().to_config() == A.FedProx(G, mu=0.3).client_objective() \
        .to_config()
    assert A.OverGroups("propfair", GROUPS).client_objective() is not None
    assert A.OverGroups("aaggff-d", GROUPS).invalid_loss(-1.0)


def test_a_function_map_equals_the_array_it_computes():
    as_array = A.OverGroups("aaggff-d", GROUPS, num_samples=COUNTS)
    as_function = A.OverGroups("aaggff-d", lambda ids: GROUPS[ids], num_clients=K, num_groups=G,
                               num_samples=COUNTS)
    for ids, losses, _ in _rounds():
        np.testing.assert_array_equal(as_array.weights(ids, losses),
                                      as_function.weights(ids, losses))
    assert as_function.map_checksum.startswith("probe:")
    assert map_checksum(GROUPS, K) != map_checksum(np.roll(GROUPS, 1), K)


def test_a_million_clients_by_function_keep_no_per_client_state():
    over = A.OverGroups("aaggff-d", lambda ids: ids % 10, num_clients=10**6, num_groups=10)
    ids = np.random.default_rng(0).choice(10**6, 1000, replace=False)
    over.weights(ids, np.ones(1000), num_samples=np.full(1000, 5.0))
    sizes = {k: np.size(v) for k, v in over.state_dict()["state"].items()}
    # The inner rule's per-client vector is over the 10 groups (stored as ids, values, fill).
    assert sizes == {"round": 1, "rule.D_ids": 10, "rule.D_values": 10, "rule.D_fill": 1,
                     "rule.eta": 1}


@pytest.mark.parametrize("kwargs, error, match", [
    ({"groups": np.array([0, -1, 1])}, ValueError, r"groups must lie in \[0, 2\); client 1"),
    ({"groups": np.array([0, 1, 5]), "num_groups": 3}, ValueError, "client 2 has 5"),
    ({"groups": np.array([0.0, 1.0])}, TypeError, "must hold integers"),
    ({"groups": np.zeros((2, 2), dtype=int)}, ValueError, "1-D"),
    ({"groups": np.array([0, 1]), "num_clients": 3}, ValueError, "num_clients is 3"),
    ({"groups": lambda ids: ids % 2}, ValueError, "needs num_clients"),
    ({"groups": GROUPS, "prior": "sizes"}, ValueError, "prior must be one of"),
    ({"groups": GROUPS, "share": "equal"}, ValueError, "share must be one of"),
    ({"groups": GROUPS, "rule": A.AFL(3)}, ValueError, "built over 3 clients"),
    ({"groups": GROUPS, "rule": A.AFL(G), "rule_options": {"step_size": 1.0}}, ValueError,
     "rule_options only go"),
    ({"groups": GROUPS, "rule": 3}, TypeError, "rule name or an Aggregator"),
    ({"groups": GROUPS, "rule_options": {"alpah": 1}}, ValueError, "has no option 'alpah'"),
])
def test_construction_is_checked(kwargs, error, match):
    kwargs = {"rule": "fedmaba", **kwargs}
    with pytest.raises(error, match=match):
        A.OverGroups(kwargs.pop("rule"), kwargs.pop("groups"), **kwargs)


def test_a_bad_round_changes_nothing():
    over = A.OverGroups("aaggff-d", lambda ids: np.where(ids == 7, 9, ids % G), num_clients=K,
                        num_groups=G, num_samples=COUNTS)
    over.weights([1, 2, 3], [1.0, 2.0, 3.0])
    before = copy.deepcopy(over.state_dict())
    for call, match in [(lambda: over.weights([1, 7], [1.0, 2.0]), "gave client 7 the group 9"),
                        (lambda: over.weights([1, 2], [1.0, -2.0]), "non-negative"),
                        (lambda: over.weights([1, 2], [1.0]), "losses has 1 entries"),
                        (lambda: over.weights([1, 2], [1.0, 2.0], updates=np.ones((2, 3))),
                         "unexpected round input")]:
        with pytest.raises((ValueError, TypeError), match=match):
            call()
        after = over.state_dict()
        assert after["state"].keys() == before["state"].keys()
        for key, value in before["state"].items():
            np.testing.assert_array_equal(after["state"][key], value, err_msg=key)
    bad = A.OverGroups("fedavg", lambda ids: ids.astype(float), num_clients=K, num_groups=G,
                       num_samples=COUNTS)
    with pytest.raises(ValueError, match=r"must return \[m\]"):
        bad.weights([1, 2])
    with pytest.raises(ValueError, match="num_samples is required"):
        A.OverGroups("fedavg", GROUPS).weights([1, 2])


def test_state_dict_continues_exactly_and_is_refused_under_another_map_or_prior():
    over = A.OverGroups("fedmaba", GROUPS, num_samples=COUNTS, prior="size")
    rounds = list(_rounds(20))
    for ids, losses, _ in rounds[:10]:
        over.weights(ids, losses)
    sd = over.state_dict()
    assert sd["rule"] == "over-groups" and sd["config"]["map_size"] == K
    assert sd["config"]["rule"] == "fedmaba" and sd["config"]["rule.rho"] == 1.0
    again = A.OverGroups("fedmaba", GROUPS, num_samples=COUNTS, prior="size")
    again.load_state_dict(copy.deepcopy(sd))
    for ids, losses, _ in rounds[10:]:
        np.testing.assert_array_equal(over.weights(ids, losses), again.weights(ids, losses))
    for other, key in [(A.OverGroups("fedmaba", np.roll(GROUPS, 1), num_samples=COUNTS,
                                     prior="size"), "map_checksum"),
                       (A.OverGroups("fedmaba", GROUPS, num_samples=COUNTS), "prior"),
                       (A.OverGroups("fedmaba", GROUPS, num_samples=COUNTS, prior="size",
                                     rule_options={"rho": 0.5}), "rule.rho"),
                       (A.OverGroups("afl", GROUPS, num_samples=COUNTS, prior="size"), "rule")]:
        with pytest.raises(ValueError, match=f"config\\[{key!r}\\]"):
            other.load_state_dict(copy.deepcopy(sd))
        assert other.round == 0


def test_aaggff_d_step_scale_multiplies_its_decision_step():
    base, double, still = A.AAggFFD(20), A.AAggFFD(20, step_scale=2.0), A.AAggFFD(20,
                                                                                  step_scale=0.0)
    ids, losses = np.arange(8), np.linspace(0.5, 2.0, 8)
    base.weights(ids, losses), double.weights(ids, losses)
    assert double.eta == pytest.approx(2 * base.eta)
    np.testing.assert_array_equal(still.weights(ids, losses), np.full(8, 1 / 8))
    with pytest.raises(ValueError, match="step_scale"):
        A.AAggFFD(20, step_scale=-1.0)
    # A state written before step_scale existed ran with step 1, its default.
    sd = base.state_dict()
    del sd["config"]["step_scale"]
    A.AAggFFD(20).load_state_dict(sd)


def test_a_round_over_too_many_groups_for_memory_leaves_the_inner_rule_untouched():
    # G = 10^12 groups: the round's [G] group weights cannot be allocated; the round is refused
    # before the inner rule commits (AAggFF-D's eta and its per-group state stay).
    rule = A.OverGroups("aaggff-d", lambda ids: ids % 3, num_clients=100, num_groups=10**12)
    ids = np.array([1, 2, 3], dtype=np.int64)
    before, eta = copy.deepcopy(rule.state_dict()), rule.rule.eta
    with pytest.raises(MemoryError, match="num_groups = 2 x 1000000000000"):
        rule.weights(ids, [1.0, 2.0, 3.0], num_samples=[1.0, 1.0, 1.0])
    assert rule.rule.eta == eta and rule.round == rule.rule.round == 0
    after = rule.state_dict()
    for key, value in before["state"].items():
        np.testing.assert_array_equal(after["state"][key], value)


def test_the_group_map_cannot_be_made_writable_to_regroup_clients():
    given = GROUPS.copy()
    rule = A.OverGroups("fedavg", given, num_groups=G)
    given[0] = (given[0] + 1) % G                     # the caller's array is not the rule's
    assert rule.groups[0] == GROUPS[0]
    with pytest.raises(ValueError, match="read-only"):
        rule.groups[0] = 1
    with pytest.raises(ValueError, match="WRITEABLE"):
        rule.groups.setflags(write=True)
    np.testing.assert_array_equal(rule.group_of(np.arange(K)), GROUPS)
