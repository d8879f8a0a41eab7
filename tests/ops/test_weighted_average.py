"""fastfair.ops.weighted_average and Accumulator against hand cases and the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fastfair
from fastfair import _C, ops, reference
from tests.helpers.arrays import DTYPES, make_array, requires_cuda
from tests.helpers.dlpack_fakes import FakeDeviceArray
from tests.helpers.tolerances import assert_close, to_numpy64


def sum_scale(X, w):
    """sum_i |w_i| |X_i|: the magnitude the rounding error of a weighted sum scales with."""
    return np.tensordot(np.abs(np.asarray(w, np.float64)), np.abs(to_numpy64(X)), axes=(0, 0))


# ----------------------------------------------------------------------------- hand cases

def test_hand_flat():
    X = np.array([[1.0, 2.0, -3.0], [3.0, 4.0, 5.0]], dtype=np.float32)
    out = ops.weighted_average(X, [0.25, 0.75])
    np.testing.assert_array_equal(out, np.array([2.5, 3.5, 3.0], dtype=np.float32))
    assert out.dtype == np.float32


def test_hand_lists():
    a = [np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([10.0])]
    b = [np.array([[5.0, 6.0], [7.0, 8.0]]), np.array([-10.0])]
    out = ops.weighted_average([a, b], [0.5, 0.5])
    np.testing.assert_array_equal(out[0], [[3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(out[1], [0.0])
    assert out[0].shape == (2, 2)


def test_hand_server_step():
    base = np.array([1.0, 1.0], dtype=np.float64)
    deltas = np.array([[2.0, 0.0], [0.0, 4.0]])
    result = ops.weighted_average(deltas, [0.5, 0.5], base=base, lr=0.5)
    assert result is base
    np.testing.assert_array_equal(base, [0.5, 0.0])


# ----------------------------------------------------------------------------- random cases

SHAPES = [(1, 1), (1, 7), (3, 1), (5, 1037), (4, 4099), (37, 2049), (3000, 3), (257, 600)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_flat_matches_reference(rng, dtype, shape):
    Xv = rng.standard_normal(shape)
    w = rng.random(shape[0])
    X = make_array(Xv, dtype)
    out = ops.weighted_average(X, w)
    assert type(out) is type(X)
    assert str(out.dtype).endswith(dtype) and tuple(out.shape) == shape[1:]
    # Reference on the values as stored, so only the kernel's own rounding is measured.
    assert_close(out, reference.weighted_average(X, w), dtype, scale=sum_scale(X, w))


@pytest.mark.parametrize("dtype", DTYPES)
def test_lists_match_reference(rng, dtype):
    shapes = [(3, 5), (17,), (1,), (2, 3, 4), (4097,)]
    updates = [[make_array(rng.standard_normal(s), dtype) for s in shapes] for _ in range(6)]
    w = rng.random(6)
    out = ops.weighted_average(updates, w)
    ref = reference.weighted_average(updates, w)
    for l, s in enumerate(shapes):
        assert tuple(out[l].shape) == s
        scale = sum(abs(w[i]) * np.abs(to_numpy64(updates[i][l])) for i in range(6))
        assert_close(out[l], ref[l], dtype, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_server_step_matches_reference(rng, dtype):
    deltas = make_array(rng.standard_normal((9, 333)), dtype)
    base = make_array(rng.standard_normal(333), dtype)
    w = rng.random(9)
    expected = reference.weighted_average(deltas, w, base=base, lr=0.3)
    ops.weighted_average(deltas, w, base=base, lr=0.3)
    scale = 0.3 * sum_scale(deltas, w) + np.abs(expected)
    assert_close(base, expected, dtype, scale=scale)


def test_server_step_lists(rng):
    params = [torch.randn(4, 3), torch.randn(5)]
    deltas = [[torch.randn(4, 3), torch.randn(5)] for _ in range(3)]
    w = [0.2, 0.3, 0.5]
    expected = reference.weighted_average(deltas, w, base=params, lr=1.0)
    out = ops.weighted_average(deltas, w, base=params)
    assert out[0] is params[0]
    for got, exp in zip(params, expected):
        assert_close(got, exp, "float32", scale=np.abs(exp) + 3)


def test_out_given_is_written_and_returned(rng):
    X = rng.standard_normal((4, 10)).astype(np.float32)
    out = np.full(10, np.nan, dtype=np.float32)
    result = ops.weighted_average(X, np.ones(4) / 4, out=out)
    assert result is out
    assert_close(out, X.astype(np.float64).mean(0), "float32", scale=np.abs(X).mean(0))


def test_torch_in_torch_out_and_grad_tensors(rng):
    X = torch.randn(5, 8, requires_grad=True)
    w = torch.rand(5)
    out = ops.weighted_average(X, w)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert_close(out, reference.weighted_average(X, w), "float32",
                 scale=sum_scale(X.detach(), w.numpy()))


def test_numpy_and_torch_agree(rng):
    Xn = rng.standard_normal((7, 100)).astype(np.float32)
    w = rng.random(7)
    a = ops.weighted_average(Xn, w)
    b = ops.weighted_average(torch.from_numpy(Xn), torch.from_numpy(w))
    np.testing.assert_array_equal(a, b.numpy())


def test_negative_and_zero_weights_are_linear_combinations(rng):
    X = rng.standard_normal((3, 50))
    w = np.array([1.5, -0.5, 0.0])
    np.testing.assert_allclose(ops.weighted_average(X, w), w @ X, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(ops.weighted_average(X, np.zeros(3)), np.zeros(50))


# ----------------------------------------------------------------------------- layouts

def test_strided_rows(rng):
    big = rng.standard_normal((10, 64)).astype(np.float32)
    X = big[::3]  # row stride 3 * 64
    w = rng.random(X.shape[0])
    assert_close(ops.weighted_average(X, w), reference.weighted_average(X, w), "float32",
                 scale=sum_scale(X, w))
    Xt = torch.from_numpy(big)[::3]
    assert_close(ops.weighted_average(Xt, w), reference.weighted_average(X, w), "float32",
                 scale=sum_scale(X, w))


def test_torch_views_parameters_and_offsets(rng):
    """torch tensors are read through their attributes: storage offsets, row strides and
    nn.Parameter subclasses must come through as they would through DLPack."""
    base = torch.from_numpy(rng.standard_normal(7 * 40 + 3))
    X = base[3:].view(7, 40)[1::2]  # storage offset and a row stride of 80
    w = rng.random(X.shape[0])
    expected = reference.weighted_average(X.numpy(), w)
    assert_close(ops.weighted_average(X, w), expected, "float64", scale=sum_scale(X.numpy(), w))
    params = [[torch.nn.Parameter(row.clone())] for row in X]
    got = ops.weighted_average(params, w)[0]
    assert_close(got.detach(), expected, "float64", scale=sum_scale(X.numpy(), w))
    with pytest.raises(ValueError, match="must be C-contiguous"):
        ops.weighted_average([[X.T]], [1.0])


def test_torch_negated_views_and_unusual_inputs(rng):
    """torch's lazy negation (neg bit) is honoured on inputs and refused on outputs; a plain list
    of arrays and complex inputs get errors that say what to pass."""
    X = torch.from_numpy(rng.standard_normal((3, 9)))
    w = [0.2, 0.3, 0.5]
    expected = -reference.weighted_average(X.numpy(), w)
    assert_close(ops.weighted_average(torch._neg_view(X), w), expected, "float64",
                 scale=sum_scale(X.numpy(), w))
    with pytest.raises(ValueError, match="out is read-only"):
        ops.weighted_average(X, w, out=torch._neg_view(torch.zeros(9, dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"one list of arrays per client: pass \[\[u_1\]"):
        ops.weighted_average([X[0], X[1]], [1, 1])
    with pytest.raises(ValueError, match="got complex64"):
        ops.weighted_average(torch.ones(3, 4, dtype=torch.complex64), w)


def test_negative_row_stride(rng):
    X = rng.standard_normal((6, 33))[::-1]
    w = rng.random(6)
    assert_close(ops.weighted_average(X, w), reference.weighted_average(X, w), "float64",
                 scale=sum_scale(X, w))


def test_non_contiguous_rows_are_rejected_with_a_fix(rng):
    X = rng.standard_normal((4, 20))[:, ::2]
    with pytest.raises(ValueError, match="contiguous within each row.*ascontiguousarray"):
        ops.weighted_average(X, np.ones(4))
    with pytest.raises(ValueError, match=r"X\[0\]\[0\] must be C-contiguous"):
        ops.weighted_average([[X.T]], [1.0])


def test_read_only_inputs(rng):
    raw = rng.standard_normal(24).astype(np.float32).tobytes()
    X = np.frombuffer(raw, dtype=np.float32).reshape(4, 6)
    assert not X.flags.writeable
    w = np.frombuffer(np.ones(4).tobytes(), dtype=np.float64)
    assert_close(ops.weighted_average(X, w), X.astype(np.float64).sum(0), "float32",
                 scale=np.abs(X).sum(0))
    out = np.frombuffer(np.zeros(6, np.float32).tobytes(), dtype=np.float32)
    with pytest.raises(ValueError, match="out is read-only"):
        ops.weighted_average(X, w, out=out)


def test_multi_dim_rows(rng):
    X = rng.standard_normal((3, 4, 5))
    w = rng.random(3)
    out = ops.weighted_average(X, w)
    assert out.shape == (4, 5)
    np.testing.assert_allclose(out, np.tensordot(w, X, axes=(0, 0)), rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------- determinism

@pytest.mark.parametrize("shape", [(8, 300000), (5000, 40), (100, 4097)])
def test_identical_for_any_thread_count(rng, shape):
    X = rng.standard_normal(shape).astype(np.float32)
    w = rng.random(shape[0])
    before = fastfair.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            fastfair.set_num_threads(threads)
            results.append(ops.weighted_average(X, w))
    finally:
        fastfair.set_num_threads(before)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


# ----------------------------------------------------------------------------- errors

def test_errors_name_the_argument(rng):
    X = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="w must be finite; got nan at position 1"):
        ops.weighted_average(X, [1.0, np.nan, 1.0])
    with pytest.raises(ValueError, match="w must be finite; got inf at position 2"):
        ops.weighted_average(X, [1.0, 1.0, np.inf])
    with pytest.raises(ValueError, match="w has 2 entries but there are 3 client updates"):
        ops.weighted_average(X, [1.0, 1.0])
    with pytest.raises(ValueError, match="X has no rows"):
        ops.weighted_average(X[:0], [])
    with pytest.raises(ValueError, match="X is empty"):
        ops.weighted_average([], [])
    with pytest.raises(ValueError,
                       match="X must be float32, float64, float16 or bfloat16; got int64"):
        ops.weighted_average(np.ones((2, 2), dtype=np.int64), [1, 1])
    with pytest.raises(ValueError,
                       match=r"out must have the dtype of each row of X \(float32\); got float64"):
        ops.weighted_average(X, np.ones(3), out=np.zeros(4))
    with pytest.raises(ValueError, match="out has 5 elements but each row of X has 4"):
        ops.weighted_average(X, np.ones(3), out=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="either out= .* or base="):
        ops.weighted_average(X, np.ones(3), out=np.zeros(4, np.float32),
                             base=np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="got str"):
        ops.weighted_average("abc", [1.0])


def test_list_errors(rng):
    a = [np.ones((2, 2)), np.ones(3)]
    with pytest.raises(ValueError, match=r"X\[1\] has 1 arrays but X\[0\] has 2"):
        ops.weighted_average([a, [np.ones((2, 2))]], [1, 1])
    with pytest.raises(ValueError, match=r"X\[1\]\[1\] has a different shape"):
        ops.weighted_average([a, [np.ones((2, 2)), np.ones(4)]], [1, 1])
    with pytest.raises(ValueError, match=r"X\[1\]\[0\] has dtype float32 but X\[0\]\[0\]"):
        ops.weighted_average([a, [np.ones((2, 2), np.float32), np.ones(3)]], [1, 1])
    with pytest.raises(ValueError, match=r"X\[0\]\[1\] has dtype float32 but X\[0\]\[0\]"):
        ops.weighted_average([[np.ones(2), np.ones(2, np.float32)]], [1])
    with pytest.raises(ValueError, match="X is empty"):
        ops.weighted_average([[]], [1])
    with pytest.raises(ValueError, match="out must be a list of 2 arrays"):
        ops.weighted_average([a], [1], out=[np.ones(4)])
    with pytest.raises(ValueError,
                       match=r"base must be a list of 2 arrays, one per array of X\[0\]"):
        ops.weighted_average([a, a], [1, 1], base=[np.ones((2, 2))])
    with pytest.raises(TypeError, match=r"X\[1\] must be a list of arrays"):
        ops.weighted_average([a, np.ones(3)], [1, 1])


def test_errors_name_what_the_caller_passed(rng):
    """Arrays routed into a shared binding slot are named as the caller called them."""
    X = rng.standard_normal((2, 3)).astype(np.float32)
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="base is read-only"):
        ops.weighted_average(X, [0.5, 0.5], base=ro)
    with pytest.raises(ValueError, match="base has 4 elements but each row of X has 3"):
        ops.weighted_average(X, [0.5, 0.5], base=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"base\[0\] must have the dtype of X\[0\]\[0\]"):
        ops.weighted_average([[X[0]], [X[1]]], [0.5, 0.5], base=[np.zeros(3)])
    with pytest.raises(TypeError, match="lr must be a real number"):
        ops.weighted_average(X, [0.5, 0.5], base=np.zeros(3, np.float32), lr="1")
    with pytest.raises(ValueError, match="lr must be finite"):
        ops.weighted_average(X, [0.5, 0.5], base=np.zeros(3, np.float32), lr=float("inf"))
    with pytest.raises(ValueError, match="w must be a rectangular array or a flat sequence"):
        ops.weighted_average(X, [[0.5], [0.5, 0.1]])
    acc = ops.Accumulator()
    with pytest.raises(ValueError, match="weight must be finite; got nan"):
        acc.add(X[0], float("nan"))
    with pytest.raises(TypeError, match="weight must be a real number"):
        acc.add(X[0], None)
    with pytest.raises(ValueError, match=r"update\[1\] must be C-contiguous"):
        acc.add([X[0], np.zeros((4, 4), np.float32)[:, ::2]], 1.0)
    # The failed adds above fixed no structure: the first successful one does.
    acc.add([X[0]], 1.0)
    with pytest.raises(ValueError, match=r"update\[0\] has dtype float64, but the running sum\[0\] "
                                         "accumulates float32"):
        acc.add([X[0].astype(np.float64)], 1.0)
    assert acc.count == 1 and acc.total_weight == 1.0
    np.testing.assert_array_equal(acc.result(), [X[0]])
    rows = ops.Accumulator()
    with pytest.raises(ValueError, match="w must be finite"):
        rows.add_rows(X, [1.0, np.nan])
    rows.add_rows(X[:, :2], [1.0, 1.0])  # a different shape is fine: nothing was fixed
    assert rows.count == 2


def test_failed_call_leaves_out_untouched(rng):
    X = rng.standard_normal((3, 4))
    out = np.full(4, 7.0)
    with pytest.raises(ValueError):
        ops.weighted_average(X, [1.0, np.nan, 1.0], out=out)
    np.testing.assert_array_equal(out, np.full(4, 7.0))


def test_cuda_array_needs_a_cuda_build_and_device():
    fake = FakeDeviceArray((2, 3))
    weights = FakeDeviceArray((2,))
    out = FakeDeviceArray((3,))
    if fastfair.build_info()["cuda"] and torch.cuda.is_available():
        pytest.skip("a real GPU is present; covered by the CUDA tests")
    expected = ("built without CUDA, but X is on cuda:0; rebuild with FASTFAIR_CUDA=ON" if not
                fastfair.build_info()["cuda"] else "no CUDA device is usable")
    with pytest.raises(RuntimeError, match=expected):
        _C.weighted_average_rows(fake, weights, out, "write", 1.0, 1, ("X", "w", "out", True, True))


# ----------------------------------------------------------------------------- Accumulator

@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulator_mean(rng, dtype):
    rows = rng.standard_normal((20, 77))
    w = rng.random(20)
    acc = ops.Accumulator()
    for i in range(20):
        acc.add(make_array(rows[i], dtype), w[i])
    stored = np.stack([to_numpy64(make_array(rows[i], dtype)) for i in range(20)])
    expected = w @ stored / w.sum()
    got = acc.result()
    assert str(got.dtype).endswith(dtype)
    assert_close(got, expected, dtype, scale=np.abs(w) @ np.abs(stored) / w.sum())
    assert acc.count == 20 and acc.total_weight == pytest.approx(w.sum())


def test_accumulator_rows_and_lists(rng):
    X = rng.standard_normal((50, 9)).astype(np.float32)
    w = rng.random(50)
    acc = ops.Accumulator()
    acc.add_rows(X[:30], w[:30])
    acc.add_rows(X[30:], w[30:])
    assert_close(acc.result(normalize=False), reference.weighted_average(X, w), "float32",
                 scale=sum_scale(X, w))

    acc = ops.Accumulator()
    clients = [[torch.randn(2, 3), torch.randn(4)] for _ in range(5)]
    for c in clients:
        acc.add(c, 2.0)
    mean = acc.result()
    ref = reference.weighted_average(clients, [0.2] * 5)
    for got, exp in zip(mean, ref):
        assert isinstance(got, torch.Tensor)
        assert_close(got, exp, "float32", scale=np.abs(exp) + 1)


def test_accumulator_errors_and_reset():
    acc = ops.Accumulator()
    with pytest.raises(ValueError, match="no update has been added"):
        acc.result()
    acc.add(np.ones(3), 0.0)
    with pytest.raises(ValueError, match="total weight is zero"):
        acc.result()
    np.testing.assert_array_equal(acc.result(normalize=False), np.zeros(3))
    with pytest.raises(ValueError, match="does not match the structure"):
        acc.add(np.ones(4), 1.0)
    with pytest.raises(ValueError, match="weight must be finite"):
        acc.add(np.ones(3), float("nan"))
    acc.add(np.full(3, 2.0), 1.0)
    np.testing.assert_array_equal(acc.result(), np.full(3, 2.0))
    acc.reset()
    assert acc.count == 0 and acc.total_weight == 0.0
    acc.add(np.full(3, 5.0), 2.0)
    np.testing.assert_array_equal(acc.result(), np.full(3, 5.0))


# ----------------------------------------------------------------------------- build info

def test_build_info_reports_the_build():
    info = fastfair.build_info()
    for key in ("cuda", "openmp", "openmp_threads", "compiler", "version", "pybind11",
                "cuda_version", "cpu_isa"):
        assert key in info
    assert info["version"] == fastfair.__version__
    assert info["openmp_threads"] >= 1
    assert info["cpu_isa"] in ("base", "avx2", "avx512")


# ----------------------------------------------------------------------------- CUDA

@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_matches_reference(rng, dtype):
    for shape in [(1, 1), (5, 1037), (3000, 3), (64, 70000)]:
        Xv = rng.standard_normal(shape)
        w = rng.random(shape[0])
        X = make_array(Xv, dtype, "torch", "cuda")
        out = ops.weighted_average(X, torch.as_tensor(w, device="cuda"))
        assert out.device == X.device
        assert_close(out.cpu(), reference.weighted_average(X.cpu(), w), dtype,
                     scale=sum_scale(X.cpu(), w))


@requires_cuda
def test_cuda_lists_server_step_and_stream(rng):
    params = [torch.randn(4, 3, device="cuda"), torch.randn(5, device="cuda")]
    deltas = [[torch.randn(4, 3, device="cuda"), torch.randn(5, device="cuda")] for _ in range(3)]
    w = [0.2, 0.3, 0.5]
    expected = reference.weighted_average([[d.cpu() for d in c] for c in deltas], w,
                                          base=[p.cpu() for p in params], lr=0.7)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        ops.weighted_average(deltas, w, base=params, lr=0.7)
    s.synchronize()
    for got, exp in zip(params, expected):
        assert_close(got.cpu(), exp, "float32", scale=np.abs(exp) + 3)
    acc = ops.Accumulator()
    for c in deltas:
        acc.add(c, 1.0)
    for got, exp in zip(acc.result(), reference.weighted_average(
            [[d.cpu() for d in c] for c in deltas], [1 / 3] * 3)):
        assert_close(got.cpu(), exp, "float32", scale=np.abs(exp) + 3)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_vector_scalar_paths_and_lanes(rng, dtype):
    """16-byte loads where every row and length allow them, element loads otherwise (odd D or a
    misaligned start), and 1 to 32 row lanes: each against the reference, bit-identical on rerun."""
    for n, d, offset in [(1, 8, 0), (7, 4096, 0), (33, 1001, 0), (257, 64, 1), (1000, 100003, 0),
                         (100, 2 ** 16, 3)]:
        flat = make_array(rng.standard_normal(n * d + offset), dtype, "torch", "cuda")
        X = flat[offset:].view(n, d)
        w = torch.as_tensor(rng.random(n) - 0.2, device="cuda")
        out = ops.weighted_average(X, w)
        assert_close(out.cpu(), reference.weighted_average(X.cpu(), w.cpu()), dtype,
                     scale=sum_scale(X.cpu(), w.cpu()))
        assert torch.equal(out, ops.weighted_average(X, w))


@requires_cuda
def test_cuda_many_segments_and_accumulator(rng):
    shapes = [(3,), (64, 3, 7, 7), (1,), (1000, 51), (17, 5), (4096,)]
    clients = [[torch.randn(s, device="cuda", dtype=torch.float64) for s in shapes]
               for _ in range(9)]
    w = rng.random(9)
    expected = reference.weighted_average([[t.cpu() for t in c] for c in clients], w)
    for got, exp in zip(ops.weighted_average(clients, w), expected):
        assert_close(got.cpu(), exp, "float64", scale=np.abs(exp) + 3)
    acc = ops.Accumulator()
    acc.add_rows(torch.stack([c[3] for c in clients]), w)
    mean = expected[3] / w.sum()  # result() normalises by the total weight
    assert_close(acc.result().cpu(), mean, "float64", scale=np.abs(mean) + 3)


@requires_cuda
def test_cuda_explicit_stream_waits_for_the_current_one(rng):
    """With stream=, the kernel runs there but must still see what torch's current stream wrote
    before the call (the ordering a DLPack exchange gives)."""
    src = torch.randn(64, 4096, device="cuda")
    X = torch.zeros_like(src)
    w = torch.rand(64, device="cuda", dtype=torch.float64)
    expected = reference.weighted_average(src.cpu(), w.cpu())
    side = torch.cuda.Stream()
    torch.cuda._sleep(50_000_000)  # keeps the current stream busy, so a missed wait reads zeros
    X.copy_(src)
    out = ops.weighted_average(X, w, stream=side.cuda_stream)
    side.synchronize()
    assert_close(out.cpu(), expected, "float32", scale=sum_scale(src.cpu(), w.cpu()))


@requires_cuda
def test_cuda_mixed_devices_error():
    """An output on another device than the updates is refused, naming both (through the public
    op: the binding's private signature is not this test's business)."""
    X = torch.randn(3, 4, device="cuda")
    with pytest.raises(ValueError, match="out is on cpu.* but X is on cuda"):
        ops.weighted_average(X, np.full(3, 1 / 3), out=torch.empty(4))
    with pytest.raises(ValueError, match="out.* is on cpu.* but X.* is on cuda"):
        ops.weighted_average([[X[0]], [X[1]]], [0.5, 0.5], out=[torch.empty(4)])


def test_empty_rows_need_no_contiguity():
    """NumPy exports zero-size arrays with zero strides; no element is addressed, so such rows are
    contiguous (they were rejected as 'must be contiguous within each row')."""
    X = np.zeros((2, 0), np.float32)
    assert X.strides == (0, 0)
    assert ops.weighted_average(X, [0.5, 0.5]).shape == (0,)
    assert [a.shape for a in ops.weighted_average([[X[0]], [X[1]]], [0.5, 0.5])] == [(0,)]


def test_a_float16_result_in_the_subnormal_range_is_rounded_to_nearest():
    """Sums that cancel to below float16's smallest normal land on its subnormal grid (spacing
    2^-24 = 6e-8): 3.5e-8 rounds up to one step, an error of 2.5e-8 that no relative tolerance of
    the result covers (found by the property test on another CPU)."""
    X = np.array([[1e-3], [1e-3]], dtype=np.float16)
    x = float(X[0, 0])
    for target in (3.5e-8, 2.0e-8, -4.0e-8, 9.0e-8):
        w = np.array([1.0, -(x - target) / x])
        exact = w[0] * x + w[1] * x
        assert ops.weighted_average(X, w)[0] == np.float16(exact), target


def _batchnorm_nets(n):
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)) for _ in range(n)]
    for i, net in enumerate(nets):
        net[1].num_batches_tracked.fill_(i + 5)
    return nets


def test_state_dicts_average_float_entries_and_copy_counters_from_the_first():
    nets, w = _batchnorm_nets(3), [0.2, 0.3, 0.5]
    states = [net.state_dict() for net in nets]
    result = ops.weighted_average(states, w)
    assert list(result) == list(states[0])
    for name, value in result.items():
        if value.dtype.is_floating_point:
            expected = sum(c * s[name].double() for c, s in zip(w, states)).float()
            torch.testing.assert_close(value, expected)
        else:
            assert value.dtype == torch.int64 and int(value) == 5   # X[0]'s counter
    from_modules = ops.weighted_average(nets, w)                    # modules: their state dicts
    assert all(torch.equal(from_modules[k], result[k]) for k in result)


def test_state_dicts_server_step_updates_a_module_in_place_and_keeps_its_counters():
    nets, w = _batchnorm_nets(3), [0.2, 0.3, 0.5]
    server = _batchnorm_nets(1)[0]
    server[1].num_batches_tracked.fill_(99)
    before = {k: v.clone() for k, v in server.state_dict().items()}
    assert ops.weighted_average(nets, w, base=server, lr=0.5) is server
    after = server.state_dict()
    step = ops.weighted_average(nets, w)
    torch.testing.assert_close(after["0.weight"], before["0.weight"] - 0.5 * step["0.weight"])
    assert int(after["1.num_batches_tracked"]) == 99


def test_state_dicts_of_other_models_are_refused_naming_the_client():
    nets = _batchnorm_nets(2)
    other = torch.nn.Linear(3, 2).state_dict()
    with pytest.raises(ValueError, match=r"X\[1\] has other keys than X\[0\] \(first differing: "
                       r"0.bias\)"):
        ops.weighted_average([nets[0].state_dict(), other], [0.5, 0.5])
    with pytest.raises(TypeError, match=r"X\[1\] is a list, but X\[0\] is a state dict"):
        ops.weighted_average([nets[0].state_dict(), [torch.ones(2)]], [0.5, 0.5])
