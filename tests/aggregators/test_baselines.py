"""FedAvg, FairAvg, FedProx, q-FedAvg, TERM, PropFair, FedMGDA(+) and the server optimisers
against hand cases and the float64 references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair import ops
from fastfair.aggregators import (
    SGD,
    TERM,
    FairAvg,
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedMABA,
    FedMGDA,
    FedProx,
    FedYogi,
    PropFair,
    QFedAvg,
)
from fastfair.aggregators.fedmgda import min_norm_box_qp
from fastfair.reference import aggregators as ref
from tests.helpers.tolerances import assert_rule_close

# ----------------------------------------------------------------------------- FedAvg, FairAvg

def test_fedavg_hand_and_static_counts():
    agg = FedAvg(5, num_samples=[10, 0, 30, 20, 40])
    assert_rule_close(agg.weights([0, 2, 3]), [1 / 6, 3 / 6, 2 / 6], "golden")
    assert_rule_close(agg.weights([1, 2]), [0.0, 1.0], "golden")
    assert_rule_close(agg.weights([0, 2], num_samples=[1, 3]), [0.25, 0.75], "golden")
    assert_rule_close(agg.weights([1]), [1.0], "golden")  # all-zero counts fall back to 1/m
    with pytest.raises(ValueError, match="sum to zero"):
        FedAvg(5, num_samples=[0] * 5, zero_total="raise").weights([0, 1])
    with pytest.raises(ValueError, match="num_samples is required"):
        FedAvg(5).weights([0, 1])


def test_fairavg_and_fedavg_match_reference(rng):
    K = 1000
    n = rng.integers(1, 500, K).astype(float)
    fedavg, fair = FedAvg(K, num_samples=n), FairAvg(K)
    for _ in range(10):
        ids = rng.choice(K, int(rng.integers(1, 100)), replace=False)
        assert_rule_close(fedavg.weights(ids), ref.fedavg_weights(n[ids]))
        assert_rule_close(fair.weights(ids), ref.fairavg_weights(ids.size))


def test_fedprox_term_and_gradient():
    agg = FedProx(3, mu=0.5)
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    g = torch.tensor([0.0, 1.0])
    term = agg.proximal_term([w], [g])
    term.backward()
    assert float(term.detach()) == pytest.approx(0.25 * (1 + 1))
    np.testing.assert_allclose(w.grad.numpy(), [0.5, 0.5])
    grads = agg.proximal_gradient(np.array([1.0, 1.0]), np.array([1.0, 2.0]), np.array([0.0, 1.0]))
    np.testing.assert_allclose(grads, [1.5, 1.5])
    assert_rule_close(agg.weights([0, 1], num_samples=[1, 3]), [0.25, 0.75], "golden")


# ----------------------------------------------------------------------------- q-FedAvg

@pytest.mark.parametrize("q", [0.0, 0.1, 1.0, 5.0])
def test_qfedavg_step_matches_reference(rng, q):
    m, d = 7, 13
    w = rng.standard_normal(d)
    local = w + 0.1 * rng.standard_normal((m, d))
    losses = rng.gamma(2.0, 0.5, m)
    agg = QFedAvg(50, q=q, lipschitz=10.0)
    coef = agg.weights(rng.choice(50, m, replace=False), losses, updates=w - local)
    params = w.copy()
    agg.aggregate(w - local, coef, base=params)
    assert_rule_close(params, ref.qfedavg_step(w, local, losses, q, 10.0))
    # the same from precomputed squared norms and from list-form updates
    sq = ((w - local) ** 2).sum(1)
    assert_rule_close(QFedAvg(50, q=q, lipschitz=10.0).weights(np.arange(m), losses,
                                                               sq_norms=sq), coef)
    lists = [[torch.from_numpy(x[:5]), torch.from_numpy(x[5:])] for x in w - local]
    assert_rule_close(QFedAvg(50, q=q, lipschitz=10.0).weights(np.arange(m), losses,
                                                               updates=lists), coef)


def _authors_qfedavg_step(w, local, losses, q, lr, server_lr):
    """The AAggFF authors' q-FedAvg server update, written as their code computes it
    (QfedavgServer with lipschitz = server_lr / lr; QfedavgOptimizer.accumulate and step), for
    parameters given as lists of layers."""
    lipschitz = server_lr / lr
    grad = [np.zeros_like(p) for p in w]
    denominator = 0.0
    for layers, loss in zip(local, losses):
        local_delta = [(p - l) * lipschitz for p, l in zip(w, layers)]
        for g, d in zip(grad, local_delta):
            g += d * loss ** q
        delta_norm = sum(float((d ** 2).sum()) for d in local_delta)
        denominator += delta_norm * loss ** (q - 1) * q + loss ** q * lipschitz
    return [p - g / denominator * server_lr for p, g in zip(w, grad)]


@pytest.mark.parametrize("q", [0.0, 0.5, 2.0])
def test_qfedavg_reproduces_the_authors_update(rng, q):
    lr, server_lr = 0.05, 0.3
    w = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    local = [[p + 0.1 * rng.standard_normal(p.shape) for p in w] for _ in range(4)]
    losses = rng.gamma(2.0, 0.5, 4)
    expected = _authors_qfedavg_step(w, local, losses, q, lr, server_lr)
    updates = [[p - l for p, l in zip(w, layers)] for layers in local]
    agg = QFedAvg(10, q=q, lipschitz=server_lr / lr)
    coef = agg.weights([7, 1, 4, 2], losses, updates=updates)
    # through aggregate(lr=server_lr) ...
    params = [p.copy() for p in w]
    agg.aggregate(updates, coef, base=params, lr=server_lr)
    # ... and through the server optimiser SGD(lr=server_lr)
    stepped = SGD(lr=server_lr).step([p.copy() for p in w], agg.aggregate(updates, coef))
    for a, b, e in zip(params, stepped, expected):
        assert_rule_close(a, e)
        assert_rule_close(b, e)


def test_qfedavg_eg_form_and_errors():
    agg = QFedAvg(4, q=2.0, form="eg", num_samples=[1, 2, 3, 4])
    assert_rule_close(agg.weights([0, 3], [2.0, 1.0]), [0.5, 0.5], "golden")
    with pytest.raises(ValueError, match="non-negative"):
        QFedAvg(4).weights([0, 1], [1.0, -1.0], sq_norms=[1.0, 1.0])
    with pytest.raises(ValueError, match="positive when 0 < q < 1"):
        QFedAvg(4, q=0.5).weights([0, 1], [1.0, 0.0], sq_norms=[1.0, 1.0])
    with pytest.raises(ValueError, match="exactly one of updates"):
        QFedAvg(4).weights([0, 1], [1.0, 1.0])


# ----------------------------------------------------------------------------- TERM, PropFair

def test_term_matches_reference(rng):
    K = 100
    n = rng.integers(1, 50, K).astype(float)
    for tilt in [-1.0, 0.0, 0.1, 5.0]:
        ids = rng.choice(K, 9, replace=False)
        losses = rng.gamma(2.0, 1.0, 9)
        assert_rule_close(TERM(K, tilt, num_samples=n).weights(ids, losses),
                          ref.term_weights(losses, tilt, n[ids]))
        assert_rule_close(TERM(K, tilt, num_samples=n, variant="reference_code").weights(
            ids, losses), ref.term_weights(losses, tilt))
    # log-space: a tilt that overflows exp() directly stays finite
    c = TERM(3, 1000.0).weights([0, 1, 2], [1.0, 2.0, 2.0])
    assert_rule_close(c, [0.0, 0.5, 0.5], "golden")


def test_propfair_weights_and_client_loss(rng):
    n = np.array([5.0, 1.0, 2.0, 8.0])
    losses = np.array([0.5, 1.0, 3.0, 4.5])
    agg = PropFair(4, M=5.0, num_samples=n, weighting="eg")
    assert_rule_close(agg.weights([0, 1, 2, 3], losses), ref.propfair_weights(losses, 5.0, n))
    assert_rule_close(PropFair(4, num_samples=n).weights([0, 3]), [5 / 13, 8 / 13], "golden")
    with pytest.raises(ValueError, match="below M"):
        agg.weights([0, 1], [1.0, 5.0])
    client = PropFair(4, M=5.0, epsilon=0.2, extension="reference_code")
    for loss in [0.0, 1.0, 4.79, 4.81, 7.0]:
        assert client.client_loss(loss) == pytest.approx(ref.propfair_loss(loss, 5.0, 0.2),
                                                         rel=1e-15, abs=0)
    x = torch.tensor(2.0, requires_grad=True)
    client.client_loss(x).backward()
    assert float(x.grad) == pytest.approx(1.0 / (5.0 - 2.0))
    # Elementwise over a cohort's losses, NumPy and torch alike, with per-client gradients.
    cohort = [0.0, 1.0, 4.79, 4.81, 7.0]
    expected = [ref.propfair_loss(v, 5.0, 0.2) for v in cohort]
    np.testing.assert_allclose(client.client_loss(np.array(cohort)), expected, rtol=1e-15, atol=0)
    xs = torch.tensor(cohort, dtype=torch.float64, requires_grad=True)
    out = client.client_loss(xs)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-15, atol=0)
    out.sum().backward()
    np.testing.assert_allclose(xs.grad.numpy()[:3], 1.0 / (5.0 - np.array(cohort[:3])), rtol=1e-14)
    np.testing.assert_allclose(xs.grad.numpy()[3:], [0.2, 0.2], rtol=1e-15)


def test_propfair_huber_extension_keeps_the_largest_gradient():
    """docs/algorithms.md §2.6.4: beyond l0 = M - eps the default continues -log(1 - l/M) by its
    tangent at l0 (value and slope 1/eps continuous), where the authors' default l/M has slope
    1/M: the worst batches would get the smallest gradients."""
    M, eps = 2.0, 0.2
    client = PropFair(4, M=M, epsilon=eps)
    l0 = M - eps
    cohort = np.array([0.5, l0, 1.9, 2.0, 3.5])
    tangent = -np.log(eps / M) + (cohort - l0) / eps
    expected = np.where(cohort > l0, tangent, -np.log1p(-np.minimum(cohort, l0) / M))
    np.testing.assert_allclose(client.client_loss(cohort), expected, rtol=1e-14, atol=0)
    xs = torch.tensor(cohort, dtype=torch.float64, requires_grad=True)
    client.client_loss(xs).sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), [1 / 1.5, 1 / eps, 1 / eps, 1 / eps, 1 / eps],
                               rtol=1e-14)
    below, above = client.client_loss(l0 * (1 - 1e-12)), client.client_loss(l0 * (1 + 1e-12))
    assert above == pytest.approx(below, abs=1e-10)
    with pytest.raises(ValueError, match="epsilon"):
        PropFair(4, epsilon=0.0)
    PropFair(4, epsilon=0.0, extension="reference_code")   # l/M needs no margin


# ----------------------------------------------------------------------------- any magnitude

HUGE = [1e308, 1e308, 0.5e308]  # their sum overflows float64


@pytest.mark.parametrize("make, losses, expected", [
    (lambda n: FedAvg(5, num_samples=n), None, [0.4, 0.4, 0.2]),
    (lambda n: FedProx(5, num_samples=n), None, [0.4, 0.4, 0.2]),
    (lambda n: PropFair(5, num_samples=n), None, [0.4, 0.4, 0.2]),
    (lambda n: TERM(5, 0.0, num_samples=n), [1.0, 2.0, 3.0], [0.4, 0.4, 0.2]),
    # n_k / (M - F_k) = (1, 1, 0.5) e308 / (0.1, 0.05, 0.1)
    (lambda n: PropFair(5, M=0.2, num_samples=n, weighting="eg"), [0.1, 0.15, 0.1],
     [2 / 7, 4 / 7, 1 / 7]),
    # n_k F_k^q = (1, 1, 0.5) e308 * (1, 2, 2)
    (lambda n: QFedAvg(5, q=1.0, num_samples=n, form="eg"), [1.0, 2.0, 2.0], [0.25, 0.5, 0.25]),
])
def test_count_weights_of_any_magnitude(make, losses, expected):
    assert_rule_close(make(np.array(HUGE + [1.0, 1.0])).weights([0, 1, 2], losses), expected,
                      "golden")
    # per-round counts, and the same counts scaled down to ordinary sizes
    assert_rule_close(make(None).weights([3, 4, 0], losses, num_samples=HUGE), expected, "golden")
    assert_rule_close(make(None).weights([3, 4, 0], losses, num_samples=[2.0, 2.0, 1.0]),
                      expected, "golden")


def test_fedavg_weights_are_exact_at_ordinary_sizes(rng):
    n = rng.integers(0, 10**6, 1000).astype(float)
    np.testing.assert_array_equal(FedAvg(1000, num_samples=n).weights(np.arange(1000)),
                                  n / n.sum())


def test_eg_responses_that_overflow():
    # q-FedAvg: F^q overflows float64 (1000^200), its weights do not: (1/10)^200 and 1.
    c = QFedAvg(3, q=200.0, form="eg").weights([0, 1], [100.0, 1000.0])
    assert c[1] == 1.0 and c[0] == pytest.approx(1e-200, rel=1e-12)
    # TERM: tilt * F beyond 2**1000 (here it overflows): the weights are undefined, and the
    # error says why (what invalid_loss tells a caller that can drop that client).
    with pytest.raises(ValueError, match=r"losses must keep tilt \* losses within "
                                         r"\+-2\*\*1000 .*got inf at position 1"):
        TERM(3, 1e300).weights([0, 1], [1.0, 1e10])


# ----------------------------------------------------------------------------- FedMGDA

@pytest.mark.parametrize("m, d", [(2, 5), (4, 9), (5, 3), (6, 20), (7, 4)])
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.2, 1.0])
def test_min_norm_qp_matches_enumeration(rng, m, d, eps):
    X = rng.standard_normal((m, d))
    norms = np.linalg.norm(X, axis=1)
    P = (X / norms[:, None]) @ (X / norms[:, None]).T
    lo, hi = max(0.0, 1 / m - eps), min(1.0, 1 / m + eps)
    lam, _ = min_norm_box_qp(P, lo, hi)
    expected = ref.fedmgda_lambda(P, lo, hi)
    if d >= m:  # positive definite: the minimiser is unique
        assert_rule_close(lam, expected, "qp")
    assert lam @ P @ lam <= expected @ P @ expected + 1e-12
    assert abs(lam.sum() - 1) < 1e-13 and lam.min() >= lo - 1e-15 and lam.max() <= hi + 1e-15


@pytest.mark.parametrize("m, d", [(40, 100), (60, 10), (200, 300)])
def test_min_norm_qp_kkt_large(rng, m, d):
    X = rng.standard_normal((m, d)) + 0.3
    P = X @ X.T / d
    for eps in [0.002, 0.02, 1.0]:
        lo, hi = max(0.0, 1 / m - eps), min(1.0, 1 / m + eps)
        lam, _ = min_norm_box_qp(P, lo, hi)
        g = P @ lam
        at_lo, at_hi = lam <= lo + 1e-13, lam >= hi - 1e-13
        free = ~(at_lo | at_hi)
        nu = g[free].mean() if free.any() else 0.5 * (g[at_lo].min() + g[at_hi].max())
        scale = np.abs(P).max()
        if free.any():
            assert np.ptp(g[free]) <= 1e-9 * scale
        assert (g[at_lo] >= nu - 1e-9 * scale).all() and (g[at_hi] <= nu + 1e-9 * scale).all()
        assert abs(lam.sum() - 1) < 1e-12


def test_fedmgda_coefficients_apply_to_raw_updates(rng):
    X = rng.standard_normal((5, 11)) * np.array([[1.0], [3.0], [0.2], [5.0], [1.0]])
    agg = FedMGDA(20, epsilon=0.1)
    coef = agg.weights([0, 4, 9, 13, 19], updates=X)
    D = X / np.linalg.norm(X, axis=1, keepdims=True)
    lam = ref.fedmgda_lambda(D @ D.T, 0.1, 0.3)
    assert_rule_close(agg.last_lambda, lam, "qp")
    assert_rule_close(agg.aggregate(X, coef), lam @ D, "qp")
    # from the Gram matrix, from torch list-form updates, and with a zero update
    assert_rule_close(FedMGDA(20, 0.1).weights(np.arange(5), gram=X @ X.T), coef, "qp")
    lists = [[torch.from_numpy(x[:4]), torch.from_numpy(x[4:])] for x in X]
    assert_rule_close(FedMGDA(20, 0.1).weights(np.arange(5), updates=lists), coef, "qp")
    X[2] = 0.0
    c0 = FedMGDA(20, 0.1).weights(np.arange(5), updates=X)
    assert c0[2] == 0.0 and np.all(np.isfinite(c0))


def test_fedmgda_norm_floor_bounds_a_near_zero_update(rng):
    """docs/algorithms.md §2.6.6: a ~1e-9 update among unit-size ones. Without the floor it is
    scaled up to a unit vector (coefficient ~1e8); with the default floor (1% of the largest
    norm) its coefficient is at most lambda/(0.01 max norm) and it adds ~nothing."""
    X = rng.standard_normal((5, 40))
    X[3] *= 1e-9 / np.linalg.norm(X[3])
    top = np.linalg.norm(X, axis=1).max()
    raw = FedMGDA(10, norm_floor=0.0)
    c_raw = raw.weights(np.arange(5), updates=X)
    assert c_raw[3] > 1e7 * raw.last_lambda[3]
    agg = FedMGDA(10)
    coef = agg.weights(np.arange(5), updates=X)
    assert coef[3] <= agg.last_lambda[3] / (0.01 * top) * (1 + 1e-12)
    assert coef.max() <= 1.0 / (0.01 * top)
    assert np.linalg.norm(coef[3] * X[3]) < 1e-6
    # Against the enumerated QP on the floored normalisation.
    s = np.maximum(np.linalg.norm(X, axis=1), 0.01 * top)
    D = X / s[:, None]
    assert_rule_close(agg.last_lambda, ref.fedmgda_lambda(D @ D.T, 0.0, 0.3), "qp")


def test_fedmgda_norm_floor_leaves_comparable_updates_alone(rng):
    """Updates all above the floor (norms within 30x): identical to plain normalisation."""
    X = rng.standard_normal((6, 25)) * np.geomspace(1.0, 30.0, 6)[:, None]
    floored = FedMGDA(10).weights(np.arange(6), updates=X)
    plain = FedMGDA(10, norm_floor=0.0).weights(np.arange(6), updates=X)
    np.testing.assert_array_equal(floored, plain)


def test_fedmgda_epsilon_zero_is_uniform(rng):
    X = rng.standard_normal((4, 6))
    agg = FedMGDA(4, epsilon=0.0)
    agg.weights(np.arange(4), updates=X)
    assert_rule_close(agg.last_lambda, [0.25] * 4, "golden")


# ----------------------------------------------------------------------------- server optimisers

@pytest.mark.parametrize("cls, kind, kw", [
    (FedAvgM, "avgm", {"lr": 0.7, "momentum": 0.9}),
    (FedAdam, "adam", {"lr": 0.05, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3}),
    (FedYogi, "yogi", {"lr": 0.05, "beta1": 0.8, "beta2": 0.95, "tau": 1e-2}),
    (FedAdagrad, "adagrad", {"lr": 0.05, "beta1": 0.5, "tau": 1e-3}),
])
def test_server_optimisers_match_reference(rng, cls, kind, kw):
    K, d = 30, 17
    rule, opt = FedMABA(K, rho=0.2), cls(**kw)
    params = rng.standard_normal(d)
    p_ref = params.copy()
    tau = kw.get("tau", 1e-3)
    m_ref, v_ref = np.zeros(d), np.full(d, tau ** 2)
    log_p = np.full(K, -np.log(K))
    ref_kw = {k: v for k, v in kw.items() if k != "lr"}
    for _ in range(12):
        ids = rng.choice(K, 6, replace=False)
        losses, X = rng.random(6), rng.standard_normal((6, d))
        coef = rule.weights(ids, losses)
        c_ref, log_p = ref.fedmaba_round(log_p, ids, losses, rho=0.2)
        opt.step(params, rule.aggregate(X, coef))
        p_ref, m_ref, v_ref = ref.server_step(kind, p_ref, c_ref @ X, m_ref, v_ref, lr=kw["lr"],
                                              **ref_kw)
        assert_rule_close(params, p_ref)


def test_server_optimiser_lists_torch_and_accumulator(rng):
    rule, opt = FedAvg(10), FedAdam(lr=0.1)
    params = [torch.zeros(3, 2, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]
    updates = [[torch.from_numpy(rng.standard_normal((3, 2))),
                torch.from_numpy(rng.standard_normal(4))] for _ in range(3)]
    coef = rule.weights([1, 2, 3], num_samples=[1, 1, 2])
    opt.step(params, rule.aggregate(updates, coef))
    acc = ops.Accumulator()
    for u, c in zip(updates, coef.tolist()):
        acc.add(u, c)
    twin = FedAdam(lr=0.1)
    twin_params = [torch.zeros(3, 2, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]
    twin.step(twin_params, rule.aggregate(acc))
    for a, b in zip(params, twin_params):
        assert_rule_close(a, b)
    assert isinstance(opt.state_dict()["state"]["exp_avg"][0], torch.Tensor)
    with pytest.raises(ValueError, match="structure and shapes of params"):
        opt.step(params, [torch.zeros(3, 2, dtype=torch.float64)])
