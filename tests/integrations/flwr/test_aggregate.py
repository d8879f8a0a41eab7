"""The server step's arrays are told apart by dtype kind, never by name: big-endian floats are
combined exactly like native ones (not rounded as integers), and float layouts that cannot be
combined exactly (``longdouble``, complex) are refused by name, at the door and in the step."""

import os

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("flwr")

from fastfair import aggregators as agg  # noqa: E402
from fastfair.integrations.flwr import (  # noqa: E402
    FastFairStrategy,
    aggregate_arrays,
    pseudo_gradient,
)
from fastfair.integrations.flwr.aggregate import check_model_dtypes, server_step  # noqa: E402
from tests.integrations.flwr.test_strategy import (  # noqa: E402,F401
    K,
    configure,
    reply,
    server_identity,
)

MODEL = [np.array([0.128, -0.132, 0.642], dtype=np.float32),
         np.array([[1.5, -2.25], [3.0, 0.125]], dtype=np.float64),
         np.array([3, 7], dtype=np.int64)]


def swapped(arrays):
    """The same values in the other byte order (``>f4`` on a little-endian machine)."""
    return [a.astype(a.dtype.newbyteorder("S")) for a in arrays]


def clients(rng, arrays, m=3):
    return [[(a + rng.standard_normal(a.shape)).astype(a.dtype) if a.dtype.kind == "f"
             else a + rng.integers(-2, 3, a.shape).astype(a.dtype) for a in arrays]
            for _ in range(m)]


@pytest.mark.parametrize("combine", [
    lambda g, loc, c: aggregate_arrays(g, loc, c, lr=0.7),
    lambda g, loc, c: pseudo_gradient(g, loc, c),
    lambda g, loc, c: server_step(agg.FedAdam(lr=0.1), g, loc, c),
], ids=["aggregate_arrays", "pseudo_gradient", "server_step-fedadam"])
def test_non_native_floats_are_combined_exactly_like_native_ones(combine):
    rng = np.random.default_rng(0)
    local = clients(rng, MODEL)
    coef = np.array([0.2, 0.5, 0.3])
    native = combine(MODEL, local, coef)
    other = combine(swapped(MODEL), [swapped(c) for c in local], coef)
    for n, o, g in zip(native, other, swapped(MODEL)):
        assert o.dtype == g.dtype  # the byte order the model came in
        np.testing.assert_array_equal(o, n)  # bit for bit, never rounded to integers
    assert not np.array_equal(other[0], np.rint(other[0]))


@pytest.mark.usefixtures("server_identity")
def test_a_big_endian_model_goes_through_the_strategy_unrounded():
    sent = swapped(MODEL[:2])
    results = {}
    for name, params in (("big", sent), ("native", MODEL[:2])):
        strategy = FastFairStrategy(agg.FedAvg(K))
        configure(strategy, params, range(K))
        local = clients(np.random.default_rng(2), params, m=2)
        record, _ = strategy.aggregate_train(
            1, [reply(n, arr, {"num-examples": 10}) for n, arr in enumerate(local)])
        results[name] = [record[k].numpy() for k in record.keys()]
    for b, n in zip(results["big"], results["native"]):
        assert b.dtype == n.dtype.newbyteorder("S")
        np.testing.assert_array_equal(b, n)


@pytest.mark.parametrize("dtype", [np.longdouble, np.complex64, np.complex128],
                         ids=["longdouble", "complex64", "complex128"])
@pytest.mark.usefixtures("server_identity")
def test_a_float_layout_that_cannot_be_combined_exactly_is_refused_by_name(dtype):
    if np.dtype(dtype) == np.float64:
        pytest.skip("longdouble is double on this platform")
    params = [MODEL[0], MODEL[1].astype(dtype)]
    with pytest.raises(TypeError, match=r"array '1' has dtype .*cannot combine exactly"):
        check_model_dtypes(["0", "1"], params)
    strategy = FastFairStrategy(agg.FedAvg(K))
    with pytest.raises(TypeError, match=r"array '1' has dtype"):
        configure(strategy, params, range(K))
    assert strategy._sent is None
    with pytest.raises(TypeError, match="cannot be combined exactly"):
        aggregate_arrays(params, [params, params], [0.5, 0.5])


def test_integer_and_boolean_arrays_pass_the_check():
    check_model_dtypes(["a", "b", "c", "d"], [np.zeros(2, np.float16), np.zeros(2, ">i8"),
                                              np.zeros(2, np.uint8), np.zeros(2, bool)])
