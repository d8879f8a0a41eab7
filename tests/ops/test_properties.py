"""Property-based tests of every public op in fastfair.ops against fastfair.reference.

Hypothesis draws shapes, dtypes, frameworks, strides (non-contiguous views where an op takes them),
parameters and value magnitudes from 1e-30 to near the dtype's range; the values themselves come
from a NumPy generator seeded by Hypothesis (fast for large arrays, and still varied and shrunk
through the seed). Every numerical comparison uses the tolerance table of
tests/helpers/tolerances.py. Kernels with per-ISA copies run once per CPU instruction set (the
cpu_isa fixture).

The ``*_rejects_bad_input`` properties corrupt one argument of a valid call (NaN, a wrong shape,
dtype or type, a read-only output, a duplicate id, ...; each corruption is its own test case) and
check that the op raises ValueError or TypeError and leaves every array it writes exactly as it
was.

The settings are derandomized, so CI runs the same examples every time; example counts are sized
for well under two minutes on two cores.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fastfair import ops, reference
from tests.helpers.arrays import make_array
from tests.helpers.tolerances import (
    GAUSSIAN_F32_ATOL,
    QP_TOLERANCES,
    TOLERANCES,
    assert_close,
    assert_softmax_close,
    to_numpy64,
)


def props(examples: int):
    """The suite's settings: reproducible (derandomized, no example database), no deadline (CI
    machines are shared), function-scoped fixtures allowed (cpu_isa is constant within a test)."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much])


seeds = st.integers(0, 2 ** 32 - 1)
# Largest magnitude of generated values per dtype: room for sums of a few terms.
MAX_MAGNITUDE = {"float16": 1e2, "bfloat16": 1e30, "float32": 1e30, "float64": 1e300}


def magnitude(dtype: str) -> st.SearchStrategy:
    low = -2.0 if dtype == "float16" else -30.0
    return st.floats(low, math.log10(MAX_MAGNITUDE[dtype])).map(lambda e: 10.0 ** e)


def values(rng: np.random.Generator, shape, mag: float, ties: bool = False) -> np.ndarray:
    """Normal values of magnitude ``mag``; with ``ties``, drawn from a few levels (many ties)."""
    if ties:
        return np.asarray(rng.choice([-1.0, -0.5, 0.0, 0.25, 1.0], size=shape) * mag)
    return np.asarray(rng.standard_normal(shape) * mag)


def sum_scale(X, w) -> np.ndarray:
    """sum_i |w_i| |X_i|: the magnitude the rounding error of a weighted sum scales with."""
    return np.tensordot(np.abs(np.asarray(w, np.float64)), np.abs(to_numpy64(X)), axes=(0, 0))


def read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def rejects(call: Callable[[], Any], written: Dict[str, Any]) -> None:
    """``call`` raises ValueError or TypeError and leaves every array in ``written`` as it was."""
    before = {k: np.array(to_numpy64(v), copy=True) for k, v in written.items()}
    with pytest.raises((ValueError, TypeError)):
        call()
    for k, v in written.items():
        np.testing.assert_array_equal(to_numpy64(v), before[k], err_msg=f"{k} was changed")


# ----------------------------------------------------------------------------- weighted average

@props(150)
@given(seed=seeds, n=st.integers(1, 5), shape=st.lists(st.integers(0, 7), max_size=3),
       dtype=st.sampled_from(["float32", "float64", "float16", "bfloat16"]),
       framework=st.sampled_from(["numpy", "torch"]), stride=st.integers(1, 3),
       form=st.sampled_from(["write", "out", "base"]), data=st.data())
def test_weighted_average_flat(cpu_isa, seed, n, shape, dtype, framework, stride, form, data):
    mag = data.draw(magnitude(dtype))
    rng = np.random.default_rng(seed)
    full = make_array(values(rng, (n * stride, *shape), mag), dtype, framework)
    X = full[::stride]  # the client axis may be strided
    w = rng.uniform(-2.0, 2.0, n) * rng.integers(0, 2, n)  # zeros and negatives included
    expected = reference.weighted_average(X, w)
    scale = sum_scale(X, w)
    if form == "write":
        got = ops.weighted_average(X, w)
    elif form == "out":
        out = make_array(np.zeros(shape), dtype, framework)
        got = ops.weighted_average(X, w, out=out)
        assert got is out
    else:
        base = make_array(values(rng, shape, mag), dtype, framework)
        lr = float(rng.uniform(-2.0, 2.0))
        expected = to_numpy64(base) - lr * expected
        scale = np.abs(to_numpy64(base)) + abs(lr) * scale
        got = ops.weighted_average(X, w, base=base, lr=lr)
        assert got is base
    assert tuple(got.shape) == tuple(shape)
    assert_close(got, expected, dtype, scale=scale)


@props(100)
@given(seed=seeds, n=st.integers(1, 4),
       shapes=st.lists(st.lists(st.integers(0, 6), max_size=2), min_size=1, max_size=4),
       dtype=st.sampled_from(["float32", "float64"]), framework=st.sampled_from(["numpy", "torch"]),
       server_step=st.booleans(), data=st.data())
def test_weighted_average_lists(cpu_isa, seed, n, shapes, dtype, framework, server_step, data):
    mag = data.draw(magnitude(dtype))
    rng = np.random.default_rng(seed)
    X = [[make_array(values(rng, s, mag), dtype, framework) for s in shapes] for _ in range(n)]
    w = rng.uniform(-1.0, 2.0, n)
    sums = reference.weighted_average(X, w)
    scales = [sum_scale(np.stack([to_numpy64(c[l]) for c in X]), w) for l in range(len(shapes))]
    if server_step:
        base = [make_array(values(rng, s, mag), dtype, framework) for s in shapes]
        lr = float(rng.uniform(0.0, 2.0))
        expected = [to_numpy64(b) - lr * s for b, s in zip(base, sums)]
        scales = [np.abs(to_numpy64(b)) + lr * s for b, s in zip(base, scales)]
        got = ops.weighted_average(X, w, base=base, lr=lr)
    else:
        expected = sums
        got = ops.weighted_average(X, w)
    assert len(got) == len(shapes)
    for g, e, s in zip(got, expected, scales):
        assert_close(g, e, dtype, scale=s)


@props(100)
@given(seed=seeds, k=st.integers(1, 6),
       shapes=st.lists(st.lists(st.integers(0, 5), max_size=2), min_size=1, max_size=3),
       dtype=st.sampled_from(["float32", "float64", "float16"]), list_form=st.booleans(),
       rows=st.booleans(), data=st.data())
def test_accumulator(seed, k, shapes, dtype, list_form, rows, data):
    mag = data.draw(magnitude(dtype))
    rng = np.random.default_rng(seed)
    if rows:  # add_rows folds a stacked [N, *S] block at once: single-array updates
        list_form = False
    if not list_form:
        shapes = shapes[:1]
    updates = [[values(rng, s, mag).astype(dtype) for s in shapes] for _ in range(k)]
    weights = rng.uniform(0.1, 3.0, k)
    acc = ops.Accumulator()
    if rows:
        acc.add_rows(np.stack([u[0] for u in updates]), weights)
    else:
        for u, wt in zip(updates, weights):
            acc.add(u if list_form else u[0], float(wt))
    assert acc.count == k and acc.total_weight == pytest.approx(weights.sum(), rel=1e-15)
    got = acc.result()
    got = got if list_form else [got]
    coef = weights / weights.sum()
    for l in range(len(shapes)):
        segment = np.stack([u[l] for u in updates])
        assert_close(got[l], reference.weighted_average(segment, coef), dtype,
                     scale=sum_scale(segment, coef))


@pytest.mark.parametrize("corrupt", ["w_nan", "w_len", "w_2d", "w_str", "lr_nan", "lr_str",
                                     "x_int", "x_rows", "target_ro", "target_shape",
                                     "target_dtype", "list_short_out", "list_ragged",
                                     "list_shape"])
@props(12)
@given(seed=seeds, n=st.integers(1, 4), d=st.integers(1, 6), base=st.booleans())
def test_weighted_average_rejects_bad_input(corrupt, seed, n, d, base):
    rng = np.random.default_rng(seed)
    if corrupt == "x_rows":
        d = max(d, 2)  # a row of one element is contiguous whatever its stride
    X: Any = rng.standard_normal((n, d)).astype(np.float32)
    w: Any = rng.uniform(0.1, 1.0, n)
    target: Any = np.zeros(d, np.float32)
    kw: Dict[str, Any] = {}
    if corrupt == "w_nan":
        w[rng.integers(n)] = np.nan
    elif corrupt == "w_len":
        w = np.append(w, 1.0)
    elif corrupt == "w_2d":
        w = w[:, None]
    elif corrupt == "w_str":
        w = ["a"] * n
    elif corrupt == "lr_nan":
        kw["lr"] = float("nan")
    elif corrupt == "lr_str":
        kw["lr"] = "1"
    elif corrupt == "x_int":
        X = X.astype(np.int64)
    elif corrupt == "x_rows":
        X = np.repeat(X, 2, axis=1)[:, ::2]  # rows not contiguous
    elif corrupt == "target_ro":
        target = read_only(target)
    elif corrupt == "target_shape":
        target = np.zeros(d + 1, np.float32)
    elif corrupt == "target_dtype":
        target = np.zeros(d, np.float64)
    else:  # the list form: client i's update is [X[i], X[i, :1]]
        X = [[X[i], X[i, :1].copy()] for i in range(n)]
        target = [np.zeros(d, np.float32), np.zeros(1, np.float32)]
        if corrupt == "list_short_out":
            target = target[:1]
        elif corrupt == "list_ragged":
            X[-1] = X[-1][:1] if n > 1 else []
        else:
            X[-1][1] = np.zeros(2, np.float32)
    kw["base" if base else "out"] = target
    written = ({f"target[{i}]": t for i, t in enumerate(target)} if isinstance(target, list)
               else {"target": target})
    rejects(lambda: ops.weighted_average(X, w, **kw), written)


@pytest.mark.parametrize("corrupt", ["weight_nan", "weight_str", "shape", "dtype", "int",
                                     "strided", "list_form"])
@props(8)
@given(seed=seeds)
def test_accumulator_rejects_bad_input(corrupt, seed):
    rng = np.random.default_rng(seed)
    acc = ops.Accumulator()
    acc.add(rng.standard_normal((3, 4)).astype(np.float32), 2.0)
    update: Any = rng.standard_normal((3, 4)).astype(np.float32)
    weight: Any = 1.0
    if corrupt == "weight_nan":
        weight = float("nan")
    elif corrupt == "weight_str":
        weight = "1"
    elif corrupt == "shape":
        update = update[:2]
    elif corrupt == "dtype":
        update = update.astype(np.float64)
    elif corrupt == "int":
        update = update.astype(np.int32)
    elif corrupt == "strided":
        update = np.repeat(update, 2, axis=1)[:, ::2]
    else:
        update = [update]
    before = (acc.count, acc.total_weight, acc.result(normalize=False).copy())
    with pytest.raises((ValueError, TypeError)):
        acc.add(update, weight)
    assert (acc.count, acc.total_weight) == before[:2]
    np.testing.assert_array_equal(acc.result(normalize=False), before[2])


# ----------------------------------------------------------------------------- softmax / EG

def softmax_case(rng, rows, K, dtype, mag, ties, layout, infinite_signs=None):
    """x of shape [K] (rows = 0) or [rows, K], laid out contiguous or with a strided row axis.
    With ``infinite_signs`` (one per row), some entries of row b are infinite with that sign (the
    sign that makes s x = -inf), and one entry per row stays finite."""
    B = max(rows, 1)
    x = values(rng, (B, K), mag, ties)
    if infinite_signs is not None:
        hit = rng.random((B, K)) < 0.3
        x[hit] = np.broadcast_to(np.asarray(infinite_signs)[:, None] * np.inf, (B, K))[hit]
        x[np.arange(B), rng.integers(0, K, B)] = mag * rng.uniform(-1, 1, B)
    x = x.astype(dtype)
    if rows == 0:
        return x[0]
    if layout == "wide":  # rows are the first K of wider rows: row stride > K
        wide = np.zeros((B, K + 3), dtype)
        wide[:, :K] = x
        return wide[:, :K]
    if layout == "every_other_row":
        tall = np.zeros((2 * B, K), dtype)
        tall[::2] = x
        return tall[::2]
    return x


@props(120)
@given(seed=seeds, rows=st.integers(0, 4),
       K=st.one_of(st.integers(1, 300), st.just((1 << 16) + 5)),
       dtype=st.sampled_from(["float32", "float64"]), ties=st.booleans(), neg_inf=st.booleans(),
       layout=st.sampled_from(["contiguous", "wide", "every_other_row"]),
       out_dtype=st.sampled_from([None, "float32", "float64"]), per_row=st.booleans(),
       data=st.data())
def test_softmax_and_logsumexp(cpu_isa, seed, rows, K, dtype, ties, neg_inf, layout, out_dtype,
                               per_row, data):
    rng = np.random.default_rng(seed)
    mag = data.draw(magnitude(dtype))
    B = max(rows, 1)
    scales = [float(rng.choice([-1, 1]) * 10.0 ** rng.uniform(-3, 1)) for _ in range(B)]
    if not per_row or rows == 0:
        scales = scales[:1] * B
    signs = [-np.sign(s) for s in scales] if neg_inf else None  # s x = -inf: the entry adds 0
    x = softmax_case(rng, rows, K, dtype, mag, ties, layout, signs)
    finite = x[np.isfinite(x)].astype(np.float64)
    assume(all(np.all(np.isfinite(s * finite)) for s in scales))
    scale = scales if per_row and rows else scales[0]
    out = None if out_dtype is None else np.empty(x.shape, out_dtype)
    p = ops.softmax(x, scale=scale, out=out)
    lse = ops.logsumexp(x, scale=scale)
    assert p.dtype == np.dtype(out_dtype or dtype) and p.shape == x.shape
    # Exponentials are evaluated in x's precision and stored in out's: the coarser one counts.
    precision = "float32" if "float32" in (dtype, out_dtype) else "float64"
    rtol, unit = TOLERANCES[dtype]
    for b in range(B):
        xb, pb = (x, p) if rows == 0 else (x[b], p[b])
        want_lse = reference.logsumexp(xb, scales[b])
        argument = scales[b] * xb.astype(np.float64) - want_lse  # the exact exponent
        assert_softmax_close(pb, reference.softmax(xb, scales[b]), precision, argument)
        got_lse = float(lse if rows == 0 else lse[b])
        assert abs(got_lse - want_lse) <= (rtol + 4 * unit) * (abs(want_lse) + 1.0)


@props(120)
@given(seed=seeds, rows=st.integers(0, 3), K=st.integers(1, 200),
       dtype=st.sampled_from(["float32", "float64"]), eta=st.floats(1e-3, 10.0),
       sparse=st.booleans(), mag=st.floats(-3.0, 3.0).map(lambda e: 10.0 ** e))
def test_eg_step(cpu_isa, seed, rows, K, dtype, eta, sparse, mag):
    rng = np.random.default_rng(seed)
    if sparse:
        dtype = "float64"  # the sparse form keeps float64 state
    shape = (K,) if rows == 0 else (rows, K)
    G = values(rng, shape, mag).astype(dtype)
    G0 = G.copy()
    if sparse:
        m = int(rng.integers(0, K + 1))
        ids = np.stack([rng.choice(K, m, replace=False) for _ in range(max(rows, 1))])
        vals = rng.standard_normal(ids.shape) * mag
        if rows == 0:
            ids, vals = ids[0], vals[0]
        want_G, _ = reference.eg_step(G0, eta=eta, ids=ids, values=vals)
        p = ops.eg_step(G, eta=eta, ids=ids, values=vals)
    else:
        g = values(rng, shape, mag).astype(dtype)
        want_G = G0 + g  # in the state's dtype
        p = ops.eg_step(G, g, eta=eta)
    np.testing.assert_array_equal(G, want_G)  # the state update is exact, bit for bit
    argument = -eta * np.asarray(want_G, np.float64) - reference.logsumexp(want_G, -eta)[..., None]
    assert_softmax_close(p, reference.softmax(want_G, -eta), dtype, argument)


@pytest.mark.parametrize("corrupt", ["nan", "pos_inf", "all_neg_inf", "int", "three_axes",
                                     "scale_nan", "scale_str", "out_ro", "out_shape",
                                     "cols_strided"])
@props(10)
@given(seed=seeds, rows=st.integers(0, 2), K=st.integers(2, 40))
def test_softmax_rejects_bad_input(corrupt, seed, rows, K):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((K,) if rows == 0 else (rows, K))
    out = np.zeros(x.shape)
    scale: Any = 0.5
    flat = x.reshape(-1)
    if corrupt == "nan":
        flat[rng.integers(flat.size)] = np.nan
    elif corrupt == "pos_inf":
        flat[rng.integers(flat.size)] = np.inf
    elif corrupt == "all_neg_inf":
        x[...] = -np.inf
    elif corrupt == "int":
        x = x.astype(np.int64)
    elif corrupt == "three_axes":
        x = x.reshape(1, 1, -1)
        out = np.zeros(x.shape)
    elif corrupt == "scale_nan":
        scale = float("nan")
    elif corrupt == "scale_str":
        scale = "0.5"
    elif corrupt == "out_ro":
        out = read_only(out)
    elif corrupt == "out_shape":
        out = np.zeros(x.size + 1)
    else:
        x = np.repeat(x, 2, axis=-1)[..., ::2]
    rejects(lambda: ops.softmax(x, scale=scale, out=out), {"out": out})
    if corrupt not in ("out_ro", "out_shape"):
        with pytest.raises((ValueError, TypeError)):
            ops.logsumexp(x, scale=scale)


@pytest.mark.parametrize("corrupt", ["g_nan", "g_shape", "G_ro", "ids_dup", "ids_range",
                                     "ids_float", "values_nan", "values_count", "eta_nan",
                                     "both_forms", "state_inf"])
@props(10)
@given(seed=seeds, K=st.integers(2, 30))
def test_eg_step_rejects_bad_input(corrupt, seed, K):
    rng = np.random.default_rng(seed)
    G = rng.standard_normal(K)
    g = rng.standard_normal(K)
    ids, vals = rng.choice(K, 2, replace=False), rng.standard_normal(2)
    kw: Dict[str, Any] = dict(eta=0.5)
    dense = True
    if corrupt == "g_nan":
        g[rng.integers(K)] = np.nan
    elif corrupt == "g_shape":
        g = g[:-1]
    elif corrupt == "G_ro":
        G = read_only(G)
    elif corrupt == "eta_nan":
        kw["eta"] = float("nan")
    elif corrupt == "both_forms":
        kw.update(ids=ids, values=vals)
    elif corrupt == "state_inf":  # a valid update whose softmax is undefined: G rolled back
        G[ids[0]] = -np.inf
        dense = False
        kw["eta"] = 1.0
    else:
        dense = False
        if corrupt == "ids_dup":
            ids = np.array([ids[0], ids[0]])
        elif corrupt == "ids_range":
            ids = np.array([ids[0], K])
        elif corrupt == "ids_float":
            ids = ids.astype(np.float64)
        elif corrupt == "values_nan":
            vals[1] = np.nan
        else:
            vals = vals[:1]
    if dense:
        rejects(lambda: ops.eg_step(G, g, **kw), {"G": G})
    else:
        rejects(lambda: ops.eg_step(G, ids=ids, values=vals, **kw), {"G": G})


# ----------------------------------------------------------------------------- AAggFF-D (DR)

@props(250)
@given(seed=seeds, K=st.integers(1, 60), frac=st.floats(0.0, 1.0),
       variant=st.sampled_from(["paper", "reference_code"]), C=st.floats(0.01, 1.0),
       mag=st.floats(-10.0, 100.0).map(lambda e: 10.0 ** e), eta=st.floats(-5.0, 5.0),
       mass=st.floats(0.1, 50.0))
def test_dr_gradient_and_lazy_step(seed, K, frac, variant, C, mag, eta, mass):
    rng = np.random.default_rng(seed)
    m = max(1, int(round(frac * K)))
    ids = rng.choice(K, m, replace=False)
    r = rng.uniform(0.0, 1.0, m) * mag
    p = rng.dirichlet(np.ones(K)) * mass
    g, rhat = ops.dr_gradient(r, ids, p, sample_prob=C, variant=variant, with_estimate=True)
    want_g, want_rhat = reference.dr_gradient(r, ids, p, sample_prob=C, variant=variant)
    # g_i = -rhat_i / d + rbar s / d^2: its rounding scales with the terms, not with g.
    rbar, d = r.mean(), 1.0 + r.mean() * p.sum()
    scale = np.abs(want_rhat) / d + rbar * (p @ np.abs(want_rhat - rbar)) / d ** 2
    assert_close(g, want_g, "float64", scale=scale)
    assert_close(rhat, want_rhat, "float64", scale=np.abs(want_rhat) + rbar)
    D = rng.standard_normal(K)
    D0, want_D = D.copy(), D.copy()
    q = ops.dr_lazy_step(D, ids, r, sample_prob=C, eta=eta, variant=variant, prior_mass=mass)
    want_q = reference.dr_lazy_step(want_D, ids, r, sample_prob=C, eta=eta, variant=variant,
                                    prior_mass=mass)
    assert_close(D, want_D, "float64", scale=np.abs(D0) + np.abs(want_D - D0))
    z = -eta * want_D[ids]
    assert_softmax_close(q, want_q, "float64", z - (z.max() + np.log(np.exp(z - z.max()).sum())))


@pytest.mark.parametrize("corrupt", ["r_nan", "r_2d", "r_count", "ids_dup", "ids_range",
                                     "ids_float", "ids_ragged", "C_zero", "C_big", "C_str",
                                     "variant", "eta_nan", "mass_zero", "state_ro", "state_nan",
                                     "den_negative", "overflow", "out_shape"])
@props(8)
@given(seed=seeds, K=st.integers(2, 20))
def test_dr_rejects_bad_input(corrupt, seed, K):
    rng = np.random.default_rng(seed)
    ids = rng.choice(K, 2, replace=False)
    ids_arg: Any = ids
    r = rng.uniform(0.0, 1.0, 2)
    D = rng.standard_normal(K)
    out = np.full(2, 7.0)
    kw: Dict[str, Any] = dict(sample_prob=0.5, eta=1.0)
    if corrupt == "r_nan":
        r[1] = np.nan
    elif corrupt == "r_2d":
        r = r[:, None]
    elif corrupt == "r_count":
        r = r[:1]
    elif corrupt == "ids_dup":
        ids_arg = [int(ids[0])] * 2
    elif corrupt == "ids_range":
        ids_arg = [int(ids[0]), K]
    elif corrupt == "ids_float":
        ids_arg = ids.astype(np.float64)
    elif corrupt == "ids_ragged":
        ids_arg = [[int(ids[0])], [int(ids[1]), 0]]
    elif corrupt == "C_zero":
        kw["sample_prob"] = 0.0
    elif corrupt == "C_big":
        kw["sample_prob"] = 1.5
    elif corrupt == "C_str":
        kw["sample_prob"] = "0.5"
    elif corrupt == "variant":
        kw["variant"] = "code"
    elif corrupt == "eta_nan":
        kw["eta"] = float("nan")
    elif corrupt == "mass_zero":
        kw["prior_mass"] = 0.0
    elif corrupt == "state_ro":
        D = read_only(D)
    elif corrupt == "state_nan":
        D[ids[0]] = np.nan
    elif corrupt == "den_negative":  # 1 + mean(r) * mass <= 0: the log of the loss is undefined
        r = np.array([-5.0, 1.0])
    elif corrupt == "overflow":  # rbar = 0 with a huge spread: delta itself is beyond float64
        r = np.array([1e308, -1e308])
    else:
        out = np.zeros(3)
    rejects(lambda: ops.dr_lazy_step(D, ids_arg, r, out=out, **kw), {"state": D, "out": out})
    if corrupt in ("eta_nan", "mass_zero", "state_ro", "state_nan", "out_shape"):
        return  # arguments of the lazy form only
    p = np.full(K, 1.0 / K)
    grad = np.full(K, 7.0)
    kw.pop("eta")
    if corrupt == "overflow":  # the dense g is finite there: rhat = r / C overflows instead
        r = np.array([1.5e308, 1e308])
        kw.update(sample_prob=0.1, with_estimate=True)
    rejects(lambda: ops.dr_gradient(r, ids_arg, p, out=grad, **kw), {"out": grad})


# ----------------------------------------------------------------------------- projections

@props(150)
@given(seed=seeds, rows=st.integers(0, 4), K=st.integers(1, 200),
       dtype=st.sampled_from(["float32", "float64"]), ties=st.booleans(),
       layout=st.sampled_from(["contiguous", "wide", "every_other_row"]), data=st.data())
def test_project_simplex(seed, rows, K, dtype, ties, layout, data):
    rng = np.random.default_rng(seed)
    v = softmax_case(rng, rows, K, dtype, data.draw(magnitude(dtype)), ties, layout)
    p = ops.project_simplex(v)
    assert p.dtype == v.dtype and p.shape == v.shape
    # Both work on v - max(v): rounding of order u * max|v| per entry, K of them in tau.
    unit = TOLERANCES[dtype][1]
    vmax = np.abs(np.asarray(v, np.float64)).max(axis=-1, keepdims=True)
    err = np.abs(to_numpy64(p) - reference.project_simplex(v))
    assert np.all(err <= 8 * unit * (vmax + 1.0) * K), float(err.max())
    assert np.all(to_numpy64(p) >= 0)


def random_qp(rng, K, cond_exp):
    A = rng.standard_normal((K, K))
    H = A @ A.T / K + 10.0 ** (-cond_exp) * np.eye(K)
    return (H + H.T) / 2, rng.standard_normal(K) * 10.0 ** rng.uniform(-2, 2)


@props(80)
@given(seed=seeds, K=st.integers(1, 7), cond_exp=st.floats(-1.0, 4.0), warm=st.booleans())
def test_ons_project(cpu_isa, seed, K, cond_exp, warm):
    rng = np.random.default_rng(seed)
    H, b = random_qp(rng, K, cond_exp)
    warm_start = rng.uniform(-1.0, 1.0, K) if warm else None
    p, info = ops.ons_project(H, b, warm_start=warm_start, return_info=True)
    atol = max(QP_TOLERANCES["oracle"], 50 * np.linalg.cond(H) * 2.2e-16)
    np.testing.assert_allclose(p, reference.simplex_qp_enumerate(H, b), rtol=0, atol=atol)
    assert info.kkt_residual <= QP_TOLERANCES["kkt"]
    assert abs(p.sum() - 1.0) <= QP_TOLERANCES["simplex_sum"] and np.all(p >= 0)


class OnlineNewtonStepUnderTest(ops.OnlineNewtonStep):
    """OnlineNewtonStep with a step that must fail and change nothing."""

    def rejected_step(self, bad: str, rng) -> None:
        K = self.num_clients
        g = rng.standard_normal(K)
        if bad == "nan":
            g[rng.integers(K)] = np.nan
        elif bad == "huge":
            g[:] = 1e200
        elif bad == "shape":
            g = g[:-1] if K > 1 else np.zeros(2)
        elif self.beta > 0 and K > 1:  # finite, but beta g g' swamps alpha I in float64
            g = np.zeros(K)
            g[0], g[1] = 1e15, -1e15
        else:
            g[:] = np.inf
        before, p, rnd = self.state_dict(), self.p, self.round
        try:
            self.step(g)
        except ValueError:
            pass
        else:  # only the swamping update may succeed (the inverse path can cope with it)
            assert bad == "swamping", bad
            self.load_state_dict(before)  # keep following the reference sequence
            return
        after = self.state_dict()
        for key, value in before.items():
            np.testing.assert_array_equal(after[key], value, err_msg=key)
        np.testing.assert_array_equal(self.p, p)
        assert self.round == rnd


@props(80)
@given(seed=seeds, K=st.integers(1, 6), T=st.integers(1, 6),
       variant=st.sampled_from(["paper", "reference_code"]), alpha=st.floats(1e-2, 10.0),
       beta=st.floats(0.0, 10.0), bad_round=st.integers(0, 6),
       bad=st.sampled_from(["nan", "huge", "shape", "swamping"]))
def test_online_newton_step(cpu_isa, seed, K, T, variant, alpha, beta, bad_round, bad):
    rng = np.random.default_rng(seed)
    gs = [-rng.uniform(0, 2.0 / K, K) / (1 + rng.uniform(0, 1.0)) for _ in range(T)]
    want = reference.online_newton_step(gs, alpha, beta, variant)
    ons = OnlineNewtonStepUnderTest(K, alpha, beta, variant)
    for t, g in enumerate(gs):
        if t == bad_round:  # a rejected step anywhere in the sequence changes nothing
            ons.rejected_step(bad, rng)
        p = ons.step(g)
        atol = max(QP_TOLERANCES["oracle"], 50 * np.linalg.cond(ons.H) * 2.2e-16)
        np.testing.assert_allclose(p, want[t], rtol=0, atol=atol, err_msg=f"t={t}")
        assert ons.last_info.kkt_residual <= QP_TOLERANCES["kkt"]


@pytest.mark.parametrize("corrupt", ["H_nan", "H_asym", "H_not_pd", "H_shape", "b_shape",
                                     "b_nan", "warm_nan", "max_iter_float", "H_3d"])
@props(8)
@given(seed=seeds, K=st.integers(2, 8))
def test_ons_project_rejects_bad_input(corrupt, seed, K):
    rng = np.random.default_rng(seed)
    H, b = random_qp(rng, K, 1.0)
    kw: Dict[str, Any] = {}
    if corrupt == "H_nan":
        H[0, 1] = H[1, 0] = np.nan
    elif corrupt == "H_asym":
        H[0, 1] += 1.0
    elif corrupt == "H_not_pd":
        H = -H
    elif corrupt == "H_shape":
        H = H[:, :-1]
    elif corrupt == "b_shape":
        b = b[:-1]
    elif corrupt == "b_nan":
        b[0] = np.nan
    elif corrupt == "warm_nan":
        kw["warm_start"] = np.full(K, np.nan)
    elif corrupt == "max_iter_float":
        kw["max_iter"] = 1.5
    else:
        H = H[None]
    rejects(lambda: ops.ons_project(H, b, **kw), {"H": H, "b": b})


# ----------------------------------------------------------------------------- sampling

@props(300)
@given(K=st.one_of(st.integers(1, 100), st.integers(1, 2 ** 62 - 1)), frac=st.floats(0.0, 1.0),
       seed=st.integers(0, 2 ** 64 - 1), round=st.integers(0, 2 ** 32 - 1))
def test_sample_clients(K, frac, seed, round):
    m = int(frac * min(K, 64))
    ids = ops.sample_clients(K, m, seed=seed, round=round)
    np.testing.assert_array_equal(ids, reference.sample_clients(K, m, seed=seed, round=round))
    assert ids.dtype == np.int64 and ids.shape == (m,)
    assert len(set(ids.tolist())) == m and np.all((ids >= 0) & (ids < K))


@props(200)
@given(seed=st.integers(0, 2 ** 64 - 1), round=st.integers(0, 2 ** 32 - 1), K=st.integers(0, 300),
       dtype=st.sampled_from(["float32", "float64", "scalar"]), rseed=seeds)
def test_sample_available(seed, round, K, dtype, rseed):
    rng = np.random.default_rng(rseed)
    if dtype == "scalar":
        prob = float(rng.uniform())
        mask = ops.sample_available(prob, seed=seed, round=round, num_clients=K)
        want = reference.sample_available(np.full(K, prob), seed=seed, round=round)
    else:
        prob = rng.uniform(size=K).astype(dtype)
        prob[rng.random(K) < 0.1] = 0.0
        prob[rng.random(K) < 0.1] = 1.0
        mask = ops.sample_available(prob, seed=seed, round=round)
        want = reference.sample_available(prob, seed=seed, round=round)
    np.testing.assert_array_equal(mask, want)
    assert mask.dtype == bool


@pytest.mark.parametrize("corrupt", ["K_float", "K_big", "K_zero", "m_float", "m_big",
                                     "m_negative", "seed_negative", "seed_float", "seed_big",
                                     "round_big", "round_str", "out_shape", "out_dtype", "out_ro",
                                     "bool_arg"])
@props(5)
@given(K=st.integers(1, 50))
def test_sampling_rejects_bad_input(corrupt, K):
    args: Dict[str, Any] = dict(num_clients=K, m=min(K, 3), seed=1, round=0)
    out = np.full(args["m"], -7, np.int64)
    bad = {"K_float": ("num_clients", K + 0.5), "K_big": ("num_clients", 2 ** 63 + 5),
           "K_zero": ("num_clients", 0), "m_float": ("m", 1.0), "m_big": ("m", K + 1),
           "m_negative": ("m", -1), "seed_negative": ("seed", -1), "seed_float": ("seed", 1.5),
           "seed_big": ("seed", 2 ** 64), "round_big": ("round", 2 ** 32),
           "round_str": ("round", "0"), "bool_arg": ("m", True)}
    if corrupt in bad:
        name, value = bad[corrupt]
        args[name] = value
    elif corrupt == "out_shape":
        out = np.zeros(args["m"] + 1, np.int64)
    elif corrupt == "out_dtype":
        out = np.zeros(args["m"], np.int32)
    else:
        out = read_only(out)
    K_, m_ = args.pop("num_clients"), args.pop("m")
    rejects(lambda: ops.sample_clients(K_, m_, out=out, **args), {"out": out})
    if corrupt in ("seed_negative", "seed_float", "seed_big", "round_big", "round_str"):
        mask = np.zeros(K, bool)
        rejects(lambda: ops.sample_available(0.5, num_clients=K, out=mask, **args),
                {"out": mask})


# ----------------------------------------------------------------------------- SGLD / FedEvg

@props(120)
@given(seed=seeds, n=st.integers(1, 5), shape=st.lists(st.integers(1, 9), max_size=2),
       dtype=st.sampled_from(["float32", "float64"]), framework=st.sampled_from(["numpy", "torch"]),
       per_sample=st.booleans(), clip=st.booleans(), clamp=st.booleans(), in_place=st.booleans(),
       key=st.tuples(st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 62)))
def test_sgld_step(cpu_isa, seed, n, shape, dtype, framework, per_sample, clip, clamp, in_place,
                   key):
    rng = np.random.default_rng(seed)
    x = make_array(rng.uniform(-0.5, 1.5, (n, *shape)), dtype, framework)
    g = make_array(rng.normal(0, 4, (n, *shape)), dtype, framework)
    step = rng.uniform(0.1, 1.0, n) if per_sample else float(rng.uniform(0.1, 1.0))
    noise = rng.uniform(0.0, 0.5, n) if per_sample else float(rng.uniform(0.0, 0.5))
    kw = dict(step=step, noise_std=noise, seed=key[0], offset=key[1],
              grad_clip=3.0 if clip else None, clamp=(0.0, 1.0) if clamp else None)
    expected = reference.sgld_step(to_numpy64(x), to_numpy64(g), **kw)
    x0 = to_numpy64(x).copy()
    out = None if in_place else make_array(np.zeros((n, *shape)), dtype, framework)
    got = ops.sgld_step(x, g, out=out, **kw)
    assert got is (x if in_place else out)
    if not in_place:
        np.testing.assert_array_equal(to_numpy64(x), x0)
    if dtype == "float64":
        assert_close(got, expected, dtype, scale=np.abs(expected) + 10.0)
    else:
        np.testing.assert_allclose(to_numpy64(got), expected, rtol=0,
                                   atol=GAUSSIAN_F32_ATOL * float(np.max(noise)) + 4e-6)


@props(80)
@given(seed=seeds, m=st.integers(1, 4), M=st.integers(1, 5), D=st.integers(1, 12),
       dtype=st.sampled_from(["float32", "float64"]), key=st.integers(0, 2 ** 40))
def test_fedevg_server_step(seed, m, M, D, dtype, key):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (M, D)).astype(dtype)
    G = rng.normal(0, 1, (m, M, D)).astype(dtype)
    e = np.exp(rng.choice([-1.0, 0.0, 1.0], (m, M)))
    w = rng.uniform(0.0, 3.0, m)
    w[0] += 0.1
    kw = dict(step=0.3, noise_std=0.1, seed=key, offset=7)
    expected = reference.fedevg_server_step(x.astype(np.float64), G, e, w, **kw)
    got = ops.fedevg_server_step(x, G, e, w, **kw)
    atol = 1e-12 if dtype == "float64" else GAUSSIAN_F32_ATOL * 0.1 + 4e-6
    np.testing.assert_allclose(to_numpy64(got), expected, rtol=0, atol=atol)


@pytest.mark.parametrize("corrupt", ["x_ro", "grad_shape", "grad_dtype", "noise_neg", "step_nan",
                                     "clip_zero", "clamp_order", "seed_float", "offset_neg",
                                     "step_2d", "out_shape", "x_strided"])
@props(8)
@given(seed=seeds)
def test_sgld_rejects_bad_input(corrupt, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (3, 4))
    g = rng.normal(0, 1, (3, 4))
    out = None
    kw: Dict[str, Any] = dict(step=0.1, noise_std=0.2, seed=1, offset=0)
    if corrupt == "x_ro":
        x = read_only(x)
    elif corrupt == "grad_shape":
        g = g[:2]
    elif corrupt == "grad_dtype":
        g = g.astype(np.float32)
    elif corrupt == "noise_neg":
        kw["noise_std"] = -1.0
    elif corrupt == "step_nan":
        kw["step"] = float("nan")
    elif corrupt == "clip_zero":
        kw["grad_clip"] = 0.0
    elif corrupt == "clamp_order":
        kw["clamp"] = (1.0, 0.0)
    elif corrupt == "seed_float":
        kw["seed"] = 1.0
    elif corrupt == "offset_neg":
        kw["offset"] = -1
    elif corrupt == "step_2d":
        kw["step"] = np.ones((3, 1))
    elif corrupt == "out_shape":
        out = np.zeros((3, 5))
    else:
        x = np.repeat(x, 2, axis=1)[:, ::2]
    written = {"x": x} if out is None else {"x": x, "out": out}
    rejects(lambda: ops.sgld_step(x, g, out=out, **kw), written)


# ----------------------------------------------------------------------------- SuPerFed

@props(100)
@given(seed=seeds, m=st.integers(1, 4), sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4),
       data=st.data())
def test_superfed_reduce_and_mix(cpu_isa, seed, m, sizes, data):
    assume(sum(sizes) > 0)
    rng = np.random.default_rng(seed)
    twinned = data.draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    layout = ops.SegmentLayout(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                               np.asarray(twinned))
    P = layout.num_params
    f, l = (rng.standard_normal((m, P)).astype(np.float32) for _ in range(2))
    g = rng.standard_normal(P).astype(np.float32)
    lam = rng.uniform(0, 1, (m, len(sizes)))
    reduced = ops.superfed_reduce(f, l, g, layout)
    mixed = ops.superfed_mix(f, l, lam, layout)
    F, L, Gl = (a.astype(np.float64) for a in (f, l, g))
    for s, (a, z) in enumerate(zip(layout.offsets[:-1], layout.offsets[1:])):
        fs, ls, gs = F[:, a:z], L[:, a:z], Gl[a:z]
        tw = float(twinned[s])
        want = np.stack([tw * (fs * ls).sum(1), tw * (fs * fs).sum(1), tw * (ls * ls).sum(1),
                         ((fs - gs) ** 2).sum(1)], axis=1)
        scale = np.stack([np.abs(fs * ls).sum(1), (fs * fs).sum(1), (ls * ls).sum(1),
                          ((fs - gs) ** 2).sum(1)], axis=1)
        assert_close(reduced[:, s], want, "float32", scale=scale)
        lam_s = lam[:, s:s + 1] * tw
        assert_close(mixed[:, a:z], (1 - lam_s) * fs + lam_s * ls, "float32",
                     scale=np.abs(fs) + np.abs(ls))


@pytest.mark.parametrize("corrupt", ["lam_big", "lam_nan", "prox_nan", "orth_inf",
                                     "mixed_shape", "f_ro", "g_shape", "lam_shape"])
@props(8)
@given(seed=seeds)
def test_superfed_step_rejects_bad_input(corrupt, seed):
    rng = np.random.default_rng(seed)
    layout = ops.SegmentLayout.from_shapes([(3, 2), (3,)])
    m, P, S = 2, layout.num_params, layout.num_segments
    f, l, buf_f, buf_l, mixed = (rng.standard_normal((m, P)).astype(np.float32) for _ in range(5))
    g = rng.standard_normal(P).astype(np.float32)
    grad = rng.standard_normal((m, P)).astype(np.float32)
    kw: Dict[str, Any] = dict(lam=np.full(m, 0.5), prox=np.zeros((m, S)), orth=np.zeros((m, 4)),
                              lr=0.1)
    if corrupt == "lam_big":
        kw["lam"] = np.full(m, 1.5)
    elif corrupt == "lam_nan":
        kw["lam"] = np.array([0.5, np.nan])
    elif corrupt == "prox_nan":
        kw["prox"][1, 0] = np.nan
    elif corrupt == "orth_inf":
        kw["orth"][0, 3] = np.inf
    elif corrupt == "mixed_shape":
        mixed = mixed[:, :-1].copy()
    elif corrupt == "f_ro":
        f = read_only(f)
    elif corrupt == "g_shape":
        g = g[:-1].copy()
    else:
        kw["lam"] = np.full(m + 1, 0.5)
    written = dict(f=f, l=l, buf_f=buf_f, buf_l=buf_l, mixed=mixed)
    rejects(lambda: ops.superfed_step(f, l, g, grad, layout=layout, mixed=mixed, buf_f=buf_f,
                                      buf_l=buf_l, **kw), written)
