"""The common contract, checked for every rule: bad round inputs raise an error naming the
argument and leave the state exactly as before; state_dict round trips continue identically; a
state that fails any check of its values is refused whole; results come back in the framework of
the inputs."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from fastfair import aggregators as A

K = 12
N = np.arange(1, K + 1, dtype=float)


def _updates(m, d=5, seed=0):
    return np.random.default_rng(seed + m).standard_normal((m, d))


# name -> (factory, extra round inputs for m clients)
RULES = {
    "FedAvg": (lambda: A.FedAvg(K, num_samples=N), lambda m: {}),
    "FairAvg": (lambda: A.FairAvg(K), lambda m: {}),
    "FedProx": (lambda: A.FedProx(K, num_samples=N, mu=0.1), lambda m: {}),
    "FedMABA": (lambda: A.FedMABA(K, rho=0.1), lambda m: {}),
    "FedMABA-total": (lambda: A.FedMABA(K, rho=3.0, kl_reference="total", sync="overwrite"),
                      lambda m: {}),
    "FedCVaRAvg": (lambda: A.FedCVaRAvg(K, 0.3, 0.1),
                   lambda m: {"thresholds": np.linspace(0, 1, m)}),
    "FedCVaRAvg-fedsgd": (lambda: A.FedCVaRAvg(K, 0.3, 0.1, form="fedsgd", lr_threshold=0.1),
                          lambda m: {}),
    "QFedAvg": (lambda: A.QFedAvg(K, q=1.0, lipschitz=2.0), lambda m: {"updates": _updates(m)}),
    "TERM": (lambda: A.TERM(K, 0.5, num_samples=N), lambda m: {}),
    "PropFair": (lambda: A.PropFair(K, num_samples=N), lambda m: {}),
    "PropFair-eg": (lambda: A.PropFair(K, M=50.0, weighting="eg"), lambda m: {}),
    "FedMGDA": (lambda: A.FedMGDA(K, 0.1), lambda m: {"updates": _updates(m)}),
    "AAggFFD": (lambda: A.AAggFFD(K), lambda m: {}),
    "AAggFFD-reference_code": (lambda: A.AAggFFD(K, "normal", sample_prob=0.3,
                                                 variant="reference_code",
                                                 initial_p="reference_code",
                                                 normal_cdf="reference_code"), lambda m: {}),
    "AAggFFS": (lambda: A.AAggFFS(K), lambda m: {}),
    "AAggFFS-reference_code": (lambda: A.AAggFFS(K, "logistic", variant="reference_code",
                                                 initial_p="reference_code"), lambda m: {}),
    "AFL": (lambda: A.AFL(K, 0.5), lambda m: {}),
    "AFL-previous": (lambda: A.AFL(K, 0.5, coefficients="previous"), lambda m: {}),
    "AFL-reference_code": (lambda: A.AFL(K, 0.5, initial_lambda="reference_code"), lambda m: {}),
    # Any rule over groups: the contract holds for the combinator as for the rules.
    "OverGroups-aaggff-d": (lambda: A.OverGroups("aaggff-d", np.arange(K) % 4, num_samples=N),
                            lambda m: {}),
    "OverGroups-afl-size": (lambda: A.OverGroups("afl", np.arange(K) % 3, prior="size",
                                                 num_samples=N, rule_options={"step_size": 0.5}),
                            lambda m: {}),
    "OverGroups-fedmaba-function": (lambda: A.OverGroups("fedmaba", lambda ids: ids % 5,
                                                         num_clients=K, num_groups=5,
                                                         share="uniform", num_samples=N),
                                    lambda m: {}),
    "OverGroups-fedmgda": (lambda: A.OverGroups("fedmgda", np.arange(K) % 4, num_samples=N),
                           lambda m: {"updates": _updates(m)}),
    "OverGroups-qfedavg": (lambda: A.OverGroups("qfedavg", np.arange(K) % 4, num_samples=N,
                                                rule_options={"q": 1.0, "lipschitz": 2.0}),
                           lambda m: {"updates": _updates(m)}),
}


def _play(agg, extra, rounds, seed, params=None):
    """Plays ``rounds`` rounds (weights + aggregate); returns the coefficients of each round."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        m = K if getattr(agg, "full_participation", False) else int(rng.integers(2, 6))
        ids = rng.choice(K, m, replace=False)
        losses = rng.gamma(2.0, 0.5, m)
        coef = agg.weights(ids, losses, **extra(m))
        if params is not None:
            agg.aggregate(_updates(m, seed=seed), coef, base=params)
        out.append(np.asarray(coef))
    return out


def _snapshot(agg):
    sd = agg.state_dict()
    return copy.deepcopy(sd)


def _assert_same_state(a, b):
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            _assert_same_state(x, y)
        elif isinstance(x, list):
            assert len(x) == len(y)
            for u, v in zip(x, y):
                np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
        elif isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y or (x != x and y != y), key


BAD_CALLS = [
    ("nan loss", lambda ex: (([0, 1, 2], [0.1, float("nan"), 0.3]), ex(3)),
     "losses must be finite"),
    ("inf loss", lambda ex: (([0, 1, 2], [0.1, 0.2, float("inf")]), ex(3)),
     "losses must be finite"),
    ("duplicate ids", lambda ex: (([0, 1, 1], [0.1, 0.2, 0.3]), ex(3)),
     "client_ids must be distinct"),
    ("id too large", lambda ex: (([0, K, 2], [0.1, 0.2, 0.3]), ex(3)), r"client_ids must lie in"),
    ("negative id", lambda ex: (([0, -1, 2], [0.1, 0.2, 0.3]), ex(3)), r"client_ids must lie in"),
    ("float ids", lambda ex: ((np.array([0.0, 1.0, 2.0]), [0.1, 0.2, 0.3]), ex(3)),
     "client_ids must be integers"),
    ("empty round", lambda ex: (([], []), {}), "client_ids is empty"),
    ("length mismatch", lambda ex: (([0, 1, 2], [0.1, 0.2]), ex(3)), "losses has 2 entries"),
    ("negative counts", lambda ex: (([0, 1, 2], [0.1, 0.2, 0.3]),
                                    {**ex(3), "num_samples": [1.0, -2.0, 3.0]}),
     "num_samples must be non-negative"),
    ("count mismatch", lambda ex: (([0, 1, 2], [0.1, 0.2, 0.3]),
                                   {**ex(3), "num_samples": [1.0, 2.0]}), "num_samples has 2"),
    ("2-D ids", lambda ex: ((np.array([[0, 1]]), [0.1, 0.2]), ex(2)), "client_ids must be 1-D"),
    ("ragged ids", lambda ex: (([[0, 1], [2]], [0.1, 0.2, 0.3]), ex(3)),
     r"client_ids must be an array .* got a ragged nested sequence"),
    ("ragged losses", lambda ex: (([0, 1, 2], [[0.1], [0.2, 0.3]]), ex(3)),
     "losses must be an array .* ragged"),
]


@pytest.mark.parametrize("name", sorted(RULES))
@pytest.mark.parametrize("case, call, message", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_leaves_state_untouched(name, case, call, message):
    factory, extra = RULES[name]
    agg = factory()
    _play(agg, extra, 3, seed=1)
    before = _snapshot(agg)
    (args, kwargs) = call(extra)
    with pytest.raises((ValueError, TypeError), match=message):
        agg.weights(*args, **kwargs)
    _assert_same_state(before, agg.state_dict())
    # and the aggregator still works identically afterwards
    twin = factory()
    _play(twin, extra, 3, seed=1)
    for a, b in zip(_play(agg, extra, 2, seed=2), _play(twin, extra, 2, seed=2)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(RULES))
def test_state_dict_round_trip_continues_identically(name):
    factory, extra = RULES[name]
    d = 5
    agg, params = factory(), np.zeros(d)
    _play(agg, extra, 4, seed=3, params=params)
    sd = agg.state_dict()
    assert sd["format_version"] == A.FORMAT_VERSION and sd["rule"] == agg.name
    resumed, params2 = factory(), params.copy()
    resumed.load_state_dict(sd)
    _assert_same_state(sd, resumed.state_dict())
    a = _play(agg, extra, 4, seed=4, params=params)
    b = _play(resumed, extra, 4, seed=4, params=params2)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(params, params2)
    # the snapshot is a copy: later rounds did not change it
    _assert_same_state(sd, copy.deepcopy(sd))


@pytest.mark.parametrize("name", sorted(RULES))
def test_load_rejects_mismatch_and_keeps_state(name):
    factory, extra = RULES[name]
    agg = factory()
    _play(agg, extra, 2, seed=5)
    before = _snapshot(agg)
    for mutate, message in [
        (lambda sd: sd.update(format_version=99), "format_version"),
        (lambda sd: sd.update(rule="Other"), "rule"),
        (lambda sd: sd.update(num_clients=K + 1), "num_clients"),
        (lambda sd: sd["config"].update(bogus=1), "config"),
        (lambda sd: sd["state"].pop("round"), "keys"),
    ]:
        sd = _snapshot(agg)
        mutate(sd)
        with pytest.raises(ValueError, match=message):
            agg.load_state_dict(sd)
        _assert_same_state(before, agg.state_dict())


@pytest.mark.parametrize("name", sorted(RULES))
def test_last_mixture_is_on_the_simplex_and_proportional_to_the_coefficients(name):
    """The per-round record that compares across rules: coefficients over their sum (their
    scale is a step size in q-FedAvg and the one-step Fed-CVaR-Avg), lambda* for FedMGDA (whose
    coefficients are lambda*/norm)."""
    factory, extra = RULES[name]
    agg = factory()
    assert agg.last_mixture is None
    coef = np.asarray(_play(agg, extra, 2, seed=3)[-1], dtype=np.float64)
    mix = agg.last_mixture
    assert mix.shape == coef.shape and mix.min() >= 0.0
    assert mix.sum() == pytest.approx(1.0, abs=1e-12)
    if name == "FedMGDA":
        np.testing.assert_array_equal(mix, agg.last_lambda)
    elif name == "OverGroups-fedmgda":  # lambda* over the groups, split by the clients' shares
        present = agg.last_group_weights > 0
        np.testing.assert_allclose(agg.last_group_weights[present], agg.rule.last_lambda,
                                   rtol=1e-15, atol=0)
    else:
        np.testing.assert_allclose(mix, coef / coef.sum(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_public_array_of_a_rule_is_read_only_after_a_round(name):
    factory, extra = RULES[name]
    agg = factory()
    _play(agg, extra, 2, seed=3)
    for attribute in (a for a in dir(agg) if not a.startswith("_")):
        value = getattr(agg, attribute)
        if isinstance(value, np.ndarray):
            assert not value.flags.writeable, attribute


@pytest.mark.parametrize("make, option, before, extra", [
    (lambda **kw: A.AAggFFS(K, **kw), "alpha_scale", 1.0, lambda m: {}),
    (lambda **kw: A.FedMGDA(K, **kw), "norm_floor", 0.0, lambda m: {"updates": _updates(m)}),
    (lambda **kw: A.PropFair(K, num_samples=N, **kw), "extension", "reference_code",
     lambda m: {}),
    (lambda **kw: A.FedCVaRAvg(K, **kw), "lr_threshold_ratio", 1.0,
     lambda m: {"thresholds": np.linspace(0, 1, m)}),
])
def test_state_dict_from_before_an_option_ran_with_its_old_value(make, option, before, extra):
    """A state_dict written before ``option`` existed lacks it; it ran with ``before``, not
    the new default, so only a rule built with ``before`` may continue it."""
    old = make(**{option: before})
    _play(old, extra, 2, seed=5)
    sd = old.state_dict()
    del sd["config"][option]
    make(**{option: before}).load_state_dict(sd)
    fresh = make()
    with pytest.raises(ValueError, match=option):
        fresh.load_state_dict(sd)
    assert fresh.round == 0


@pytest.mark.parametrize("name, kwargs, message", [
    ("FedCVaRAvg", {"thresholds": [0.0, float("nan"), 1.0]}, "thresholds must be finite"),
    ("FedCVaRAvg", {"thresholds": [0.0, 1.0]}, "thresholds has 2"),
    ("QFedAvg", {"updates": np.array([[1.0, 2.0], [np.nan, 0.0], [1.0, 1.0]])},
     "updates must be finite"),
    ("QFedAvg", {"updates": np.ones((2, 4))}, "updates has 2 clients"),
    ("FedMGDA", {"updates": np.array([[1.0, np.inf], [0.0, 1.0], [1.0, 1.0]])},
     "updates must be finite"),
    ("FedMGDA", {"gram": np.ones((2, 2))}, "gram must be"),
])
def test_bad_rule_inputs_leave_state_untouched(name, kwargs, message):
    factory, extra = RULES[name]
    agg = factory()
    _play(agg, extra, 2, seed=6)
    before = _snapshot(agg)
    with pytest.raises(ValueError, match=message):
        agg.weights([0, 1, 2], [0.1, 0.2, 0.3], **kwargs)
    _assert_same_state(before, agg.state_dict())


def test_every_registered_rule_is_covered():
    assert {factory().name for factory, _ in RULES.values()} - {"over-groups"} == set(A.RULES)
    keys = {k for factory, _ in RULES.values() for k in factory().state_dict()["state"]}
    assert set(INVALID) <= keys


def _first(value, x):
    out = np.array(value, dtype=np.float64, copy=True)
    out.flat[0] = x
    return out


# Values a state key must refuse beyond the checks of every key (finite, type, shape).
INVALID = {
    "num_samples": [("negative", lambda v: _first(v, -1.0))],
    "eta": [("negative", lambda v: -1.0)],
    "lam_values": [("negative", lambda v: _first(v, -0.1))],
    "lam_fill": [("negative", lambda v: -0.1)],
    **{f"{name}_ids": [("unsorted", lambda v: v[::-1]), ("repeated", lambda v: np.append(v, v[-1])),
                       ("negative", lambda v: _first(v, -1).astype(np.int64)),
                       ("beyond K", lambda v: np.append(v, K)), ("floats", lambda v: v + 0.0)]
       for name in ("D", "lam", "log_p")},
    "ons_p": [("negative", lambda v: _first(v, -0.1)), ("off the simplex", lambda v: 2.0 * v)],
    "ons_pending_c": [("negative", lambda v: -1.0 - v)],
    "ons_H": [("not positive definite", lambda v: -v),
              ("not symmetric", lambda v: v + np.triu(np.ones_like(v), 1))],
}


def _corruptions(key, value):
    """``(label, value)`` pairs that ``load_state_dict`` must refuse for state key ``key`` (an
    inner rule's key under OverGroups, ``rule.<key>``, as the key itself)."""
    if key == "round":
        yield from [("nan", float("nan")), ("float", 2.5), ("negative", -1), ("bool", True),
                    ("string", "abc"), ("list", [1])]
    elif isinstance(value, np.ndarray):
        yield from [("nan", _first(value, np.nan)), ("inf", _first(value, np.inf)),
                    ("string", "abc"), ("strings", value.astype(str)), ("None", None),
                    ("shape", np.append(value.reshape(-1), 0.0)), ("ragged", [[0.0], [0.0, 1.0]])]
    else:
        yield from [("nan", float("nan")), ("inf", float("inf")), ("string", "abc"),
                    ("bool", True), ("None", None), ("shape", np.zeros(2))]
    for label, make in INVALID.get(key.removeprefix("rule."), ()):
        yield label, make(value)


@pytest.mark.parametrize("name", sorted(RULES))
def test_load_checks_every_state_value_and_changes_nothing_on_failure(name):
    factory, extra = RULES[name]
    agg, other = factory(), factory()
    _play(agg, extra, 3, seed=7)
    _play(other, extra, 5, seed=8)  # a valid state whose every value differs from agg's
    before = _snapshot(agg)
    valid = other.state_dict()
    for key, value in valid["state"].items():
        for _label, bad in _corruptions(key, value):
            sd = copy.deepcopy(valid)
            sd["state"][key] = bad
            with pytest.raises((ValueError, TypeError), match=re.escape(f"state[{key!r}]")):
                agg.load_state_dict(sd)
            _assert_same_state(before, agg.state_dict())
    agg.load_state_dict(valid)
    _assert_same_state(valid, agg.state_dict())


def _stepped_optimizer(cls, steps, seed):
    opt = cls(lr=0.1)
    rng = np.random.default_rng(seed)
    params = [np.zeros((2, 3)), np.zeros(4)]
    for _ in range(steps):
        opt.step(params, [rng.standard_normal(p.shape) for p in params])
    return opt


def _buffer_corruptions(key, value, state):
    """``(label, value)`` pairs a server optimiser's ``load_state_dict`` must refuse."""
    if key == "steps":
        yield from _corruptions("round", value)
        return
    yield from [("nan", [_first(value[0], np.nan), *value[1:]]),
                ("inf", [value[0], _first(value[1], -np.inf)]), ("string", "abc"),
                ("list of strings", ["abc", "def"]), ("integers", [v.astype(int) for v in value])]
    if key == "exp_avg_sq":
        yield "negative", [_first(value[0], -1.0), *value[1:]]
    if len(state) > 2:  # several buffers: each must match the others
        yield "None beside lists", None
        yield "fewer arrays", value[:1]
        yield "shape", [np.zeros(5), *value[1:]]


@pytest.mark.parametrize("name", sorted(A.SERVER_OPTIMIZERS))
def test_optimizer_load_checks_every_state_value_and_changes_nothing_on_failure(name):
    cls = A.SERVER_OPTIMIZERS[name]
    opt, other = _stepped_optimizer(cls, 2, seed=0), _stepped_optimizer(cls, 3, seed=1)
    before = _snapshot(opt)
    valid = other.state_dict()
    for key, value in valid["state"].items():
        for _label, bad in _buffer_corruptions(key, value, valid["state"]):
            sd = copy.deepcopy(valid)
            sd["state"][key] = bad
            with pytest.raises((ValueError, TypeError), match=r"state(\[|\b)"):
                opt.load_state_dict(sd)
            _assert_same_state(before, opt.state_dict())
    opt.load_state_dict(valid)
    _assert_same_state(valid, opt.state_dict())


@pytest.mark.parametrize("name", sorted(n for n in A.SERVER_OPTIMIZERS if n != "sgd"))
def test_optimizer_loads_buffers_of_either_byte_order(name):
    # A float buffer is told by its dtype's kind: big-endian buffers (a state written on
    # another machine) load, and keep stepping exactly like their native copy.
    opt = _stepped_optimizer(A.SERVER_OPTIMIZERS[name], 2, seed=0)
    sd = opt.state_dict()
    for key, value in sd["state"].items():
        if key != "steps":
            sd["state"][key] = [b.astype(b.dtype.newbyteorder("S")) for b in value]
    loaded = A.SERVER_OPTIMIZERS[name](lr=0.1)
    loaded.load_state_dict(sd)
    grad = [np.full((2, 3), 0.5), np.full(4, -0.25)]
    expected = opt.step([np.zeros((2, 3)), np.zeros(4)], grad)
    for got, want in zip(loaded.step([np.zeros((2, 3)), np.zeros(4)], grad), expected):
        np.testing.assert_array_equal(got, want)


def test_load_rejects_wrong_state_shape():
    agg = A.FedMABA(K)
    sd = agg.state_dict()
    sd["state"]["log_p_values"] = np.zeros(1)
    with pytest.raises(ValueError, match="log_p_values"):
        agg.load_state_dict(sd)
    sd = A.FedMABA(K).state_dict()
    sd["format_version"] = 2
    sd["state"] = {"round": 0, "log_p": np.zeros(K + 1)}
    with pytest.raises(ValueError, match="log_p"):
        agg.load_state_dict(sd)


@pytest.mark.parametrize("name", sorted(RULES))
def test_torch_inputs_give_torch_coefficients(name):
    torch = pytest.importorskip("torch")
    factory, extra = RULES[name]
    a, b = factory(), factory()
    ids = list(np.random.default_rng(0).permutation(K)) if getattr(a, "full_participation",
                                                                   False) else [3, 7, 1]
    losses = np.linspace(0.3, 1.2, len(ids))
    ct = a.weights(torch.tensor(ids), torch.tensor(losses), **extra(len(ids)))
    cn = b.weights(np.array(ids), losses, **extra(len(ids)))
    assert isinstance(ct, torch.Tensor) and ct.dtype == torch.float64
    np.testing.assert_array_equal(ct.numpy(), cn)


def test_hyperparameter_errors_name_the_argument():
    for make, message in [
        (lambda: A.FedAvg(0), "num_clients"), (lambda: A.FedAvg(2.5), "num_clients"),
        (lambda: A.FedMABA(5, step_size=-1), "step_size"), (lambda: A.FedMABA(5, rho=-0.1), "rho"),
        (lambda: A.FedMABA(5, alpha=1.5), "alpha"), (lambda: A.FedMABA(5, sync="x"), "sync"),
        (lambda: A.FedMABA(5, kl_reference="x"), "kl_reference"),
        (lambda: A.FedMABA(5, lambda_max=-1), "lambda_max"),
        (lambda: A.QFedAvg(5, q=-1), "q"), (lambda: A.QFedAvg(5, lipschitz=0), "lipschitz"),
        (lambda: A.TERM(5, float("nan")), "tilt"), (lambda: A.PropFair(5, M=0), "M"),
        (lambda: A.FedMGDA(5, epsilon=-1), "epsilon"), (lambda: A.FedProx(5, mu=-1), "mu"),
        (lambda: A.FedAdam(lr=0), "lr"), (lambda: A.FedYogi(beta2=1.0), "beta2"),
        (lambda: A.FedAvgM(momentum=1.0), "momentum"),
        (lambda: A.FedAvg(3, num_samples=[1, 2]), "num_samples"),
        (lambda: A.FedAvg(3, num_samples=[1, -2, 3]), "num_samples"),
    ]:
        with pytest.raises((ValueError, TypeError), match=message):
            make()


def test_unknown_round_input_is_rejected():
    with pytest.raises(TypeError, match="unexpected round input"):
        A.FairAvg(4).weights([0, 1], bogus=1)


def test_losses_required_where_used():
    with pytest.raises(ValueError, match="losses is required"):
        A.FedMABA(4).weights([0, 1])
    assert A.FairAvg(4).weights([0, 1]).tolist() == [0.5, 0.5]


def test_aggregate_from_accumulator_equals_direct(rng):
    from fastfair import ops

    agg = A.FedMABA(K, rho=0.1)
    X = rng.standard_normal((4, 9))
    coef = agg.weights([0, 5, 6, 9], [0.1, 0.5, 2.0, 0.3])
    direct = agg.aggregate(X, coef)
    acc = ops.Accumulator()
    for x, c in zip(X, coef):
        acc.add(x, float(c))
    streamed = agg.aggregate(acc)
    np.testing.assert_allclose(streamed, direct, rtol=0, atol=1e-14)
    params = np.ones(9)
    agg.aggregate(X, coef, base=params, lr=0.5)
    np.testing.assert_allclose(params, 1 - 0.5 * direct, rtol=0, atol=1e-14)
