"""Every rule of the registry and every server optimiser on NumPy arrays alone: rounds against the
float64 references, the common contract (coefficients, aggregate, state_dict round trip), and the
client objectives. No torch anywhere: the no-torch CI leg runs these in a venv without it."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fastfair import aggregators as A
from fastfair.aggregators import registry
from fastfair.reference import aggregators as ref
from tests.helpers.tolerances import assert_rule_close

K = 12
N = np.arange(1, K + 1, dtype=float)
D = 6

# Every registry rule, with the options its rounds below need (num_samples for the rules that
# weight by data size). A rule added to the registry must be added here.
OPTIONS = {
    "fedavg": {"num_samples": N},
    "fairavg": {},
    "fedprox": {"num_samples": N, "mu": 0.1},
    "aaggff-d": {},
    "aaggff-s": {},
    "fedmaba": {"rho": 0.2},
    "fedcvar": {"alpha": 0.3, "gamma": 0.1},
    "qfedavg": {"q": 1.0, "lipschitz": 2.0},
    "term": {"tilt": 0.5, "num_samples": N},
    "afl": {"step_size": 0.5},
    "propfair": {"M": 5.0, "weighting": "eg", "num_samples": N},
    "fedmgda": {"epsilon": 0.1},
}
# Rules whose coefficients need not sum to one (docs: q-FedAvg's step scaling, FedMGDA's
# coefficients on unnormalised updates).
UNNORMALISED = {"qfedavg", "fedmgda"}


def test_every_registry_rule_is_covered():
    assert set(OPTIONS) == set(registry.RULES)


def _round(agg, rng):
    """One round's inputs as the rule declares them: ids, losses, and its round inputs."""
    m = K if agg.full_participation else int(rng.integers(2, 7))
    ids = rng.choice(K, m, replace=False)
    losses = rng.gamma(2.0, 0.5, m).clip(0.01, 4.0)
    updates = rng.standard_normal((m, D))
    inputs = {}
    for name in agg.round_inputs:
        if name == "updates":
            inputs[name] = updates
        elif name == "sq_norms":
            inputs[name] = (updates ** 2).sum(1)
        elif name == "thresholds":
            inputs[name] = rng.random(m)
        else:
            raise AssertionError(f"round input {name!r} has no NumPy value in this test")
    return ids, losses, updates, inputs


def _play(agg, seed, rounds, params):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        ids, losses, updates, inputs = _round(agg, rng)
        coef = agg.weights(ids, losses, **inputs)
        agg.aggregate(updates, coef, base=params)
        out.append(coef)
    return out


@pytest.mark.parametrize("name", list(OPTIONS))
def test_rounds_aggregate_and_state_dict_round_trip(name):
    agg = registry.build(name, K, **OPTIONS[name])
    params = np.zeros(D)
    for coef in _play(agg, 1, 3, params):
        assert isinstance(coef, np.ndarray) and coef.dtype == np.float64
        assert np.all(np.isfinite(coef))
        if name not in UNNORMALISED:
            assert abs(float(coef.sum()) - 1.0) <= 1e-12
    assert np.all(np.isfinite(params)) and np.any(params != 0)
    sd = agg.state_dict()
    for value in sd["state"].values():
        assert type(value).__module__.split(".")[0] in ("numpy", "builtins")
    saved = copy.deepcopy(sd)
    p1 = params.copy()
    want = _play(agg, 2, 3, p1)
    again = registry.build(name, K, **OPTIONS[name])
    again.load_state_dict(saved)
    p2 = params.copy()
    got = _play(again, 2, 3, p2)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)              # bit-identical continuation
    np.testing.assert_array_equal(p1, p2)
    with pytest.raises(ValueError):
        registry.build(name, K + 1, **OPTIONS[name]).load_state_dict(saved)


def test_registry_builds_and_describes():
    assert isinstance(registry.build("aaggff-d", 10, cdf="frechet"), A.AAggFFD)
    assert "fedadam" in registry.describe()
    with pytest.raises(ValueError, match="fedmaba"):
        registry.build("fedmabba", 10)


# ------------------------------------------------------------------- against the references

def test_fedavg_fairavg_fedprox(rng):
    n = rng.integers(1, 500, 200).astype(float)
    fedavg, fair, prox = A.FedAvg(200, num_samples=n), A.FairAvg(200), A.FedProx(200,
                                                                                   num_samples=n)
    for _ in range(5):
        ids = rng.choice(200, int(rng.integers(1, 30)), replace=False)
        assert_rule_close(fedavg.weights(ids), ref.fedavg_weights(n[ids]))
        assert_rule_close(prox.weights(ids), ref.fedavg_weights(n[ids]))
        assert_rule_close(fair.weights(ids), ref.fairavg_weights(ids.size))


def test_aaggff_d(rng):
    agg = A.AAggFFD(K)
    G, p = np.zeros(K), np.full(K, 1 / K)
    for t in range(1, 11):
        m = int(rng.integers(1, 8))
        ids, losses = rng.choice(K, m, replace=False), rng.gamma(2.0, 0.5, m)
        q = agg.weights(ids, losses)
        G, p, q_ref = ref.aaggffd_round(G, p, ids, losses, t)
        assert_rule_close(q, q_ref)
        assert_rule_close(agg.p, p)


def test_aaggff_s(rng):
    k = 4
    losses = rng.gamma(2.0, 0.5, (6, k))
    agg = A.AAggFFS(k, alpha_scale=1.0)
    for F, want in zip(losses, ref.aaggffs_run(losses)):
        c = agg.weights(np.arange(k), F)
        assert_rule_close(c, want, "qp")
        assert_rule_close(agg.p, want, "qp")


def test_fedmaba(rng):
    agg = A.FedMABA(K, rho=0.2)
    log_p = np.full(K, -np.log(K))
    for _ in range(10):
        ids, losses = rng.choice(K, 5, replace=False), rng.random(5)
        c_ref, log_p = ref.fedmaba_round(log_p, ids, losses, rho=0.2)
        assert_rule_close(agg.weights(ids, losses), c_ref)
        assert_rule_close(agg.p, np.exp(log_p))


def test_qfedavg(rng):
    m = 7
    w = rng.standard_normal(D)
    local = w + 0.1 * rng.standard_normal((m, D))
    losses = rng.gamma(2.0, 0.5, m)
    agg = A.QFedAvg(50, q=1.0, lipschitz=10.0)
    coef = agg.weights(rng.choice(50, m, replace=False), losses, updates=w - local)
    params = w.copy()
    agg.aggregate(w - local, coef, base=params)
    assert_rule_close(params, ref.qfedavg_step(w, local, losses, 1.0, 10.0))


def test_term_and_propfair(rng):
    ids, losses = rng.choice(K, 6, replace=False), rng.gamma(2.0, 0.5, 6).clip(0, 4.5)
    for tilt in [-1.0, 0.0, 0.5]:
        assert_rule_close(A.TERM(K, tilt, num_samples=N).weights(ids, losses),
                          ref.term_weights(losses, tilt, N[ids]))
    assert_rule_close(A.PropFair(K, M=5.0, weighting="eg", num_samples=N).weights(ids, losses),
                      ref.propfair_weights(losses, 5.0, N[ids]))


@pytest.mark.parametrize("coefficients", ["updated", "previous"])
def test_afl(rng, coefficients):
    agg = A.AFL(K, 0.3, coefficients=coefficients)
    lam = np.full(K, 1 / K)
    for _ in range(10):
        m = int(rng.integers(1, K))
        ids, losses = rng.choice(K, m, replace=False), rng.gamma(2.0, 0.5, m)
        c = agg.weights(ids, losses)
        lam, c_ref = ref.afl_round(lam, ids, losses, 0.3, coefficients)
        assert_rule_close(c, c_ref)
        assert_rule_close(agg.lam, lam)


def test_fedmgda(rng):
    X = rng.standard_normal((5, 11)) * np.array([[1.0], [3.0], [0.2], [5.0], [1.0]])
    agg = A.FedMGDA(20, epsilon=0.1)
    coef = agg.weights([0, 4, 9, 13, 19], updates=X)
    Dn = X / np.linalg.norm(X, axis=1, keepdims=True)
    lam = ref.fedmgda_lambda(Dn @ Dn.T, 0.1, 0.3)
    assert_rule_close(agg.last_lambda, lam, "qp")
    assert_rule_close(agg.aggregate(X, coef), lam @ Dn, "qp")
    lists = [[x[:4], x[4:].reshape(7, 1)] for x in X]       # list-form NumPy updates
    assert_rule_close(A.FedMGDA(20, 0.1).weights(np.arange(5), updates=lists), coef, "qp")


def test_fedcvar_relay_and_one_step_form(rng):
    agg = A.FedCVaRAvg(K, 0.3, 0.1)
    assert_rule_close(agg.weights([1, 5, 7], thresholds=[0.0, 0.3, 0.9]), [1 / 3] * 3, "golden")
    assert_rule_close(agg.threshold, 0.4, "golden")
    agg = A.FedCVaRAvg(30, alpha=0.3, gamma=0.2, threshold=0.5, form="fedsgd", lr_threshold=0.05)
    theta = rng.standard_normal(7)
    theta_ref, t_ref = theta.copy(), 0.5
    for _ in range(10):
        m = int(rng.integers(1, 8))
        ids = rng.choice(30, m, replace=False)
        losses, grads = rng.gamma(1.5, 0.5, m), rng.standard_normal((m, 7))
        agg.aggregate(grads, agg.weights(ids, losses), base=theta, lr=0.1)
        theta_ref, t_ref = ref.cvar_fedsgd_round(theta_ref, t_ref, losses, grads, 0.3, 0.2,
                                                 0.1, 0.05)
        assert_rule_close(theta, theta_ref)
        assert_rule_close(agg.threshold, t_ref)


def test_client_objectives_on_numpy():
    cohort = np.array([0.0, 1.0, 4.79, 4.81, 7.0])
    client = A.PropFair(4, M=5.0, epsilon=0.2, extension="reference_code")
    np.testing.assert_allclose(client.client_loss(cohort),
                               [ref.propfair_loss(v, 5.0, 0.2) for v in cohort], rtol=1e-15)
    prox = A.FedProx(3, mu=0.5)
    assert prox.proximal_term([np.array([1.0, 2.0])], [np.array([0.0, 1.0])]) == \
        pytest.approx(0.25 * 2)
    cvar = A.FedCVaRAvg(4, alpha=0.25, gamma=0.3)
    assert float(cvar.client_loss(2.0, 1.0)) == pytest.approx(0.7 * 1.0 + 0.7 / 0.25 + 0.6)
    for name in registry.RULES:
        objective = registry.build(name, K, **OPTIONS[name]).client_objective()
        if objective is not None:
            again = A.ClientObjective.from_config(objective.to_config())
            assert type(again) is type(objective)


# ------------------------------------------------------------------------ server optimisers

REF_KIND = {"fedavgm": "avgm", "fedadam": "adam", "fedyogi": "yogi", "fedadagrad": "adagrad"}


@pytest.mark.parametrize("name", list(A.SERVER_OPTIMIZERS))
def test_server_optimisers(rng, name):
    opt = registry.build_server_optimizer(name)
    rule = A.FedMABA(30, rho=0.2)
    params = [rng.standard_normal(D), rng.standard_normal((2, 3))]
    flat = np.concatenate([p.ravel() for p in params])
    tau = getattr(opt, "tau", 1e-3)
    m_ref, v_ref = np.zeros(flat.size), np.full(flat.size, tau ** 2)
    log_p = np.full(30, -np.log(30))
    kw = {k: v for k, v in opt.state_dict()["config"].items() if k != "lr"}
    for t in range(6):
        if t == 3:   # continue from a state_dict round trip
            sd = copy.deepcopy(opt.state_dict())
            opt = registry.build_server_optimizer(name)
            opt.load_state_dict(sd)
        ids, losses, X = rng.choice(30, 6, replace=False), rng.random(6), rng.standard_normal(
            (6, flat.size))
        coef = rule.weights(ids, losses)
        c_ref, log_p = ref.fedmaba_round(log_p, ids, losses, rho=0.2)
        g = rule.aggregate(X, coef)
        opt.step(params, [g[:D], g[D:].reshape(2, 3)])
        if name == "sgd":
            flat = flat - opt.lr * (c_ref @ X)
        else:
            flat, m_ref, v_ref = ref.server_step(REF_KIND[name], flat, c_ref @ X, m_ref, v_ref,
                                                 lr=opt.lr, **kw)
        assert_rule_close(np.concatenate([p.ravel() for p in params]), flat)
    assert opt.steps == 6
    assert opt.is_plain_step == (name == "sgd")


def test_plain_step_is_sgd_itself():
    """The fused server step (Flower's ``server_step``) is taken only for a step that is exactly
    ``w - lr * g``: SGD, not a subclass that changes it."""

    class DoubledSGD(A.SGD):
        def _step(self, k, param, delta):
            param += 2 * self.lr * delta

    class SameSGD(A.SGD):
        pass

    assert A.SGD(lr=0.5).is_plain_step and SameSGD().is_plain_step
    assert not DoubledSGD().is_plain_step
    assert not any(cls().is_plain_step for name, cls in A.SERVER_OPTIMIZERS.items()
                   if name != "sgd")
