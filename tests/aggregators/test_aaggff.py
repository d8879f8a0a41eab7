"""AAggFF-D: the golden vectors of docs/algorithms.md §2.2 and §2.5.6 (CDF table, three rounds),
multi-round agreement with the dense float64 references in every variant, the on-demand full
decision, and awkward inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastfair import aggregators as A
from fastfair.aggregators.aaggff import CDFS, cdf_responses, dr_lipschitz
from fastfair.reference import aggregators as ref
from tests.helpers.tolerances import RULE_TOLERANCES, assert_rule_close


def assert_printed(actual, printed, decimals):
    """``printed`` is ``actual`` rounded to ``decimals`` places: within half a unit of the last."""
    err = float(np.max(np.abs(np.asarray(actual, float) - np.asarray(printed, float))))
    assert err <= 0.5 * 10.0 ** -decimals + 1e-15, f"{err:.3g} off the printed values"


# Thesis Table 3.3 (docs/algorithms.md §2.2): losses (0.01, 0.10, 0.02), x = (3, 30, 6) / 13,
# range [0, 1]. The table prints four decimals; the full values are the same formulas evaluated
# with 50 digits.
TABLE_LOSSES = np.array([0.01, 0.10, 0.02])
TABLE_3_3 = {
    "weibull": ([0.0519, 0.9951, 0.1919],
                [0.051861260612052307, 0.99513380901724299, 0.19185820862311414]),
    "frechet": ([0.0131, 0.6483, 0.1146],
                [0.013123728736940963, 0.64834434100150972, 0.11455884399268772]),
    "gumbel": ([0.1155, 0.7630, 0.1803],
               [0.11554380764653283, 0.76304105861969727, 0.18025750242305103]),
    "exponential": ([0.2061, 0.9005, 0.3697],
                    [0.2060773421820487, 0.90050941950514156, 0.36968681340328021]),
    "logistic": ([0.3166, 0.7871, 0.3685],
                 [0.316645529812217, 0.78712673923725882, 0.36854554014687147]),
    "normal": ([0.2209, 0.9045, 0.2951],
               [0.22087816371245974, 0.9045111532660713, 0.29512922565738594]),
}
# The authors' code's "normal" (docs/algorithms.md §2.2): 0.5 (erfc((x - 1)/sqrt 2) + 1).
CODE_NORMAL = ([1.2791, 0.5955, 1.2049],
               [1.2791218362875403, 0.5954888467339287, 1.2048707743426141])


@pytest.mark.parametrize("cdf", CDFS)
def test_cdf_table_3_3(cdf):
    printed, exact = TABLE_3_3[cdf]
    r = cdf_responses(TABLE_LOSSES, cdf, 0.0, 1.0)
    assert_rule_close(r, exact, "golden")
    assert_printed(exact, printed, 4)
    assert_rule_close(ref.aaggff_responses(TABLE_LOSSES, cdf, 0.0, 1.0), exact, "golden")


def test_reference_code_normal():
    printed, exact = CODE_NORMAL
    r = cdf_responses(TABLE_LOSSES, "normal", 0.0, 1.0, normal_cdf="reference_code")
    assert_rule_close(r, exact, "golden")
    assert_printed(exact, printed, 4)
    # It is a reflection of the true CDF about 1/2, shifted up by 1/2.
    assert_rule_close(r, 1.5 - np.asarray(TABLE_3_3["normal"][1]), "golden")


@pytest.mark.parametrize("cdf", CDFS)
def test_response_range(cdf):
    base = cdf_responses(TABLE_LOSSES, cdf, 0.0, 1.0)
    assert_rule_close(cdf_responses(TABLE_LOSSES, cdf, 0.2, 0.7), 0.2 + 0.5 * base, "golden")


# docs/algorithms.md §2.5.6: K = 6, Weibull, C2 = C = m/K = 1/3, p^(1) = 1/6 (paper math). The
# docs print six decimals; the full values are the dense paper formulas evaluated with 50 digits.
GOLDEN_ROUNDS = [([0, 3], [0.5, 1.5]), ([1, 3], [2.0, 1.0]), ([2, 5], [0.3, 0.9])]
GOLDEN_P = [
    ([0.148209, 0.166299, 0.166299, 0.186597, 0.166299, 0.166299],
     [0.1482085694888542, 0.16629865900054496, 0.16629865900054496, 0.18659679450896597,
      0.16629865900054496, 0.16629865900054496]),
    ([0.151535, 0.177701, 0.166476, 0.171336, 0.166476, 0.166476],
     [0.15153523668297549, 0.17770113050823992, 0.16647578084501794, 0.17133629027373079,
      0.16647578084501794, 0.16647578084501794]),
    ([0.153331, 0.176010, 0.153331, 0.170537, 0.166339, 0.180452],
     [0.15333065901097613, 0.1760101284135449, 0.15333065901097613, 0.1705371879536565,
      0.16633944694265604, 0.18045191866819029]),
]
GOLDEN_Q = [
    ([0.442671, 0.557329], [0.44267083334369502, 0.55732916665630498]),
    ([0.509118, 0.490882], [0.5091177046579269, 0.4908822953420731]),
    ([0.459373, 0.540627], [0.45937286504617497, 0.54062713495382503]),
]


def test_golden_three_rounds():
    agg = A.AAggFFD(6)
    G, p = np.zeros(6), np.full(6, 1 / 6)
    for t, ((ids, losses), (p_printed, p_exact), (q_printed, q_exact)) in enumerate(
            zip(GOLDEN_ROUNDS, GOLDEN_P, GOLDEN_Q), start=1):
        q = agg.weights(ids, losses)
        assert_rule_close(q, q_exact, "golden")
        assert_rule_close(agg.p, p_exact, "golden")
        assert_printed(p_exact, p_printed, 6)
        assert_printed(q_exact, q_printed, 6)
        for jacobian in (False, True):
            G2, p2, q2 = ref.aaggffd_round(G, p, ids, losses, t, jacobian=jacobian)
            assert_rule_close(p2, p_exact, "golden")
            assert_rule_close(q2, q_exact, "golden")
        G, p = G2, p2


def _random_rounds(rng, K, rounds, m_range):
    out = []
    for _ in range(rounds):
        m = int(rng.integers(*m_range))
        out.append((rng.choice(K, m, replace=False), rng.gamma(2.0, 0.5, m)))
    return out


OPTIONS = [
    {},
    {"variant": "reference_code"},
    {"sample_prob": 0.3},
    {"initial_p": "reference_code"},
    {"response_range": (0.1, 0.9)},
    {"cdf": "normal", "normal_cdf": "reference_code"},
    {"variant": "reference_code", "sample_prob": 0.25, "initial_p": "reference_code",
     "cdf": "gumbel"},
] + [{"cdf": c} for c in CDFS[1:]]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in
                                                                     o.items()) or "default")
def test_matches_dense_reference(rng, options):
    """Random rounds with a varying m: coefficients and the full p against the dense reference
    (K x K Jacobian) to 1e-10."""
    K = 11
    agg = A.AAggFFD(K, **options)
    ref_opts = {k: v for k, v in options.items() if k != "initial_p"}
    c0 = options.get("sample_prob")
    G = np.zeros(K)
    for t, (ids, losses) in enumerate(_random_rounds(rng, K, 25, (1, 8)), start=1):
        if t == 1 and options.get("initial_p") == "reference_code":
            p = np.full(K, c0 if c0 is not None else ids.size / K)  # the authors' p^(1) = C 1
        elif t == 1:
            p = np.full(K, 1 / K)
        q = agg.weights(ids, losses)
        G, p, q_ref = ref.aaggffd_round(G, p, ids, losses, t, jacobian=True, **ref_opts)
        assert_rule_close(q, q_ref, "reference")
        assert_rule_close(agg.p, p, "reference")


def test_large_population_matches_reference(rng):
    """K = 10^5, m = 300, 10 rounds: the O(m) rule against the O(K) dense reference."""
    K = 100_000
    agg = A.AAggFFD(K, cdf="logistic")
    G, p = np.zeros(K), np.full(K, 1 / K)
    for t, (ids, losses) in enumerate(_random_rounds(rng, K, 10, (300, 301)), start=1):
        q = agg.weights(ids, losses)
        G, p, q_ref = ref.aaggffd_round(G, p, ids, losses, t, cdf="logistic")
        assert_rule_close(q, q_ref, "reference")
    assert_rule_close(agg.p, p, "reference")


def test_step_size_and_lipschitz():
    assert dr_lipschitz(0.0, 0.25, 0.25) == pytest.approx(2.25, abs=1e-15)   # C + 2
    assert dr_lipschitz(0.5, 1.0, 0.5) == pytest.approx(1 / 1.5 + 2 * 0.5 / (0.5 * 1.5), abs=1e-15)
    agg = A.AAggFFD(8)
    agg.weights([1, 4], [0.3, 0.6])
    assert agg.eta == pytest.approx(math.sqrt(math.log(8)) / (2.25 * math.sqrt(2)), abs=1e-15)


def test_only_sampled_state_changes(rng):
    K = 1000
    agg = A.AAggFFD(K)
    ids = rng.choice(K, 20, replace=False)
    agg.weights(ids, rng.gamma(2.0, 0.5, 20))
    touched = np.zeros(K, bool)
    touched[ids] = True
    assert np.all(agg.D[~touched] == 0) and np.any(agg.D[touched] != 0)
    # D_S is centred: the sparse pseudo-losses of one round sum to zero (paper variant).
    assert abs(agg.D[ids].sum()) <= 1e-13


def test_equal_and_zero_losses_give_uniform():
    for losses in ([0.7, 0.7, 0.7], [0.0, 0.0, 0.0]):
        agg = A.AAggFFD(10)
        q = agg.weights([2, 5, 9], losses)
        assert_rule_close(q, np.full(3, 1 / 3), "golden")
        assert np.all(agg.D == 0)


def test_single_client_and_k1():
    agg = A.AAggFFD(1)
    assert agg.weights([0], [0.4]).tolist() == [1.0]
    agg = A.AAggFFD(5)
    assert agg.weights([3], [2.0]).tolist() == [1.0]


def test_higher_loss_gets_more_weight():
    agg = A.AAggFFD(100)
    ids = np.arange(10)
    losses = np.linspace(0.1, 2.0, 10)
    for _ in range(5):
        q = agg.weights(ids, losses)
    assert np.all(np.diff(q) > 0)


def test_negative_losses_rejected_state_untouched():
    agg = A.AAggFFD(6)
    agg.weights([0, 1], [0.2, 0.4])
    before = agg.D.copy()
    with pytest.raises(ValueError, match="losses must be non-negative"):
        agg.weights([2, 3], [0.2, -0.1])
    np.testing.assert_array_equal(agg.D, before)
    assert agg.round == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"cdf": "cauchy"}, "cdf"),
    ({"variant": "code"}, "variant"),
    ({"initial_p": "ones"}, "initial_p"),
    ({"sample_prob": 0.0}, "sample_prob"),
    ({"sample_prob": 1.5}, "sample_prob"),
    ({"response_range": (0.5, 0.5)}, r"response_range\[1\]"),
    ({"response_range": (-0.1, 0.5)}, r"response_range\[0\]"),
    ({"response_range": 3.0}, "response_range"),
    ({"normal_cdf": "reference_code"}, "normal_cdf"),
    ({"cdf": "normal", "normal_cdf": "buggy"}, "normal_cdf"),
])
def test_hyperparameter_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        A.AAggFFD(5, **kwargs)


# ------------------------------------------------------------------------------------- AAggFF-S
# docs/algorithms.md §2.4.3: K = 3, Weibull, C1 = 0, Theorem 3.1's alpha (alpha_scale=1); the
# docs print six decimals, the full values are the same QPs solved by support enumeration with
# 50 digits. The reference-code rows start from p^(1) = 1/K.
ONS_LOSSES = np.array([[0.5, 1.0, 2.0], [0.6, 0.9, 1.5], [0.4, 1.2, 1.0]])
ONS_GOLDEN = {
    ("paper", None): [
        ([0.306848, 0.331598, 0.361554],
         [0.30684789591924414, 0.33159779950702402, 0.36155430457373183]),
        ([0.287427, 0.329603, 0.382970],
         [0.28742673134896241, 0.32960338076535279, 0.3829698878856848]),
        ([0.259887, 0.347473, 0.392639],
         [0.25988742100328008, 0.34747331122300912, 0.39263926777371081])],
    ("reference_code", None): [
        ([0.319918, 0.332454, 0.347628],
         [0.3199180424205735, 0.33245425813420186, 0.34762769944522463]),
        ([0.310141, 0.331451, 0.358408],
         [0.31014093779964982, 0.3314509355870371, 0.35840812661331308]),
        ([0.296295, 0.340417, 0.363288],
         [0.2962949574368784, 0.34041683082297532, 0.36328821174014627])],
    ("paper", (0.0, 3.0)): [
        (None, [0.32141356681824996, 0.33255225663578061, 0.34603417654596943]),
        (None, [0.31296314343498752, 0.33168561396012933, 0.35535124260488315]),
        ([0.301082, 0.339365, 0.359553],
         [0.30108217737014832, 0.33936500221610956, 0.35955282041374212])],
}


@pytest.mark.parametrize("variant, response_range", list(ONS_GOLDEN))
def test_aaggffs_golden(variant, response_range):
    agg = A.AAggFFS(3, variant=variant, response_range=response_range, alpha_scale=1.0)
    oracle = ref.aaggffs_run(ONS_LOSSES, variant=variant, response_range=response_range)
    for F, (printed, exact), want in zip(ONS_LOSSES, ONS_GOLDEN[(variant, response_range)], oracle):
        c = agg.weights([0, 1, 2], F)
        assert_rule_close(c, exact, "golden")
        assert_rule_close(agg.p, exact, "golden")
        assert_rule_close(want, exact, "golden")
        if printed is not None:
            assert_printed(exact, printed, 6)


def test_aaggffs_constants():
    agg = A.AAggFFS(8, alpha_scale=1.0)
    assert (agg.alpha, agg.beta) == (pytest.approx(4.0, abs=1e-15), pytest.approx(2.0, abs=1e-15))
    agg = A.AAggFFS(8, response_range=(0.5, 3.0), alpha_scale=1.0)    # L = 2
    assert agg.alpha == pytest.approx(64.0, abs=1e-13)
    assert agg.beta == pytest.approx(0.125, abs=1e-15)
    # The default regulariser is 64 times Theorem 3.1's (docs/algorithms.md §2.4.4); beta stays.
    agg = A.AAggFFS(8)
    assert (agg.alpha, agg.beta) == (pytest.approx(256.0, abs=1e-13), pytest.approx(2.0, abs=1e-15))


def test_aaggffs_alpha_scale_is_the_regulariser(rng):
    """alpha_scale=s: the enumerated optimum of eq. 3.7 with alpha = 4 s K L (beta unchanged)."""
    K, s = 5, 8.0
    alpha, beta = 4.0 * s, K / 4.0       # range (0, 1/K): L = 1/K
    agg, p = A.AAggFFS(K, alpha_scale=s), np.full(K, 1.0 / K)
    A_sum, b = np.zeros((K, K)), np.zeros(K)
    for F in rng.gamma(2.0, 0.5, (8, K)):
        r = ref.aaggff_responses(F, "weibull", 0.0, 1.0 / K)
        g = -r / (1.0 + p @ r)
        A_sum += np.outer(g, g)
        b += (beta * (g @ p) - 1.0) * g
        p = ref.simplex_qp_enumerate(alpha * np.eye(K) + beta * A_sum, b)
        assert_rule_close(agg.weights(np.arange(K), F), p, "reference")


def test_aaggffs_default_does_not_collapse_on_a_persistent_loser():
    """docs/algorithms.md §2.4.4: one client's loss stays 3x the others' for 200 rounds. With
    Theorem 3.1's alpha (alpha_scale=1) the decision runs onto that client's vertex; at the
    default it leans towards it and stays near uniform."""
    K, F = 10, np.r_[3.0, np.ones(9)]
    theory, default = A.AAggFFS(K, alpha_scale=1.0), A.AAggFFS(K)
    for _ in range(200):
        p_theory = theory.weights(np.arange(K), F)
        p_default = default.weights(np.arange(K), F)
    assert p_theory[0] == pytest.approx(1.0, abs=1e-12)
    assert 0.12 < p_default[0] < 0.15 and p_default[1:].min() > 0.095


AAGGFFS_OPTIONS = [
    {},
    {"variant": "reference_code"},
    {"initial_p": "reference_code"},
    {"variant": "reference_code", "initial_p": "reference_code", "cdf": "frechet"},
    {"response_range": (0.2, 1.5), "cdf": "logistic"},
    {"cdf": "normal", "normal_cdf": "reference_code"},
] + [{"cdf": c} for c in CDFS[1:]]


@pytest.mark.parametrize("options", AAGGFFS_OPTIONS,
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_aaggffs_matches_reference(rng, options):
    """Random losses, clients listed in a fresh order every round: the decisions and the
    coefficients (aligned with client_ids) against the enumerated QPs to 1e-10."""
    K, T = 7, 12
    losses = rng.gamma(2.0, 0.5, (T, K))
    oracle = ref.aaggffs_run(losses, **options)
    agg = A.AAggFFS(K, alpha_scale=1.0, **options)
    for F, want in zip(losses, oracle):
        ids = rng.permutation(K)
        c = agg.weights(ids, F[ids])
        assert_rule_close(c, want[ids], "reference")
        assert_rule_close(agg.p, want, "reference")
        assert agg.last_certificate.kkt_residual <= RULE_TOLERANCES["qp"]


def test_aaggffs_active_bounds(rng):
    """A wide range makes the projection active (some p_i = 0); still the enumerated optimum."""
    K = 6
    losses = rng.gamma(2.0, 0.5, (30, K))
    losses[:, 0] *= 0.01   # client 0 always fits: its weight is driven to the bound
    options = {"response_range": (0.0, 5.0)}
    oracle = ref.aaggffs_run(losses, **options)
    agg = A.AAggFFS(K, alpha_scale=1.0, **options)
    for F, want in zip(losses, oracle):
        assert_rule_close(agg.weights(np.arange(K), F), want, "reference")
    assert agg.p[0] == 0.0


def test_aaggffs_needs_every_client():
    agg = A.AAggFFS(4)
    agg.weights([0, 1, 2, 3], [0.3, 0.2, 0.5, 0.9])
    before = agg.state_dict()
    with pytest.raises(ValueError, match="client_ids must hold all 4 clients"):
        agg.weights([0, 1, 2], [0.3, 0.2, 0.5])
    with pytest.raises(ValueError, match="losses must be non-negative"):
        agg.weights([0, 1, 2, 3], [0.3, -0.2, 0.5, 0.9])
    after = agg.state_dict()
    assert after["state"]["round"] == before["state"]["round"] == 1
    for key, value in before["state"].items():
        np.testing.assert_array_equal(after["state"][key], value)


def test_aaggffs_k1():
    agg = A.AAggFFS(1)
    assert agg.weights([0], [0.7]).tolist() == [1.0]


@pytest.mark.parametrize("kwargs, message", [
    ({"cdf": "cauchy"}, "cdf"), ({"variant": "ref_code"}, "variant"),
    ({"initial_p": "ones"}, "initial_p"), ({"response_range": (1.0, 0.5)}, "response_range"),
    ({"normal_cdf": "reference_code"}, "normal_cdf"), ({"alpha_scale": 0.0}, "alpha_scale"),
])
def test_aaggffs_hyperparameter_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        A.AAggFFS(5, **kwargs)
