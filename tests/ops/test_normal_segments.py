"""normal_segments: bit-exact against the float64 reference on every CPU instruction-set copy and
thread count, independent of how segments are grouped into calls, awkward layouts (m = 0, empty
and very unequal segments), NumPy and torch, the normal distribution's moments, errors, CUDA.

Tolerances: none. The kernels evaluate the header's fixed sequence of IEEE operations, double for
float64 and float for float32, so either dtype equals ``fastfair.reference.normal_segments`` in
that dtype bit for bit; CUDA equals the CPU bit for bit. The formulas' own accuracy is checked
against long-double libm (float64) and against the float64 values (float32: within 4 ulp).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fastfair import _C, ops, reference
from fastfair.reference.normal_segments import (
    TAG_NORMAL,
    cos_sin_turn,
    cos_sin_turn32,
    log_uniform,
    log_uniform32,
)
from fastfair.reference.sampling import draw
from tests.helpers.arrays import requires_cuda, torch
from tests.helpers.isa import run_under_every_isa

P_MIN = 1e-4  # goodness-of-fit p-value below which a test fails (fixed keys: no flakes)


def _layout(rng, lengths):
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    keys = rng.integers(0, 2 ** 64, size=lengths.size, dtype=np.uint64)
    return keys, offsets


def _assert_exact(keys, offsets, out64=None, out32=None):
    if out64 is not None:
        np.testing.assert_array_equal(np.asarray(out64), reference.normal_segments(keys, offsets))
    if out32 is not None:
        np.testing.assert_array_equal(np.asarray(out32),
                                      reference.normal_segments(keys, offsets, "float32"))


# ---------------------------------------------------------------------------- the formula
def _edge_words():
    """2^18 Philox words and the edges: 0, 2^32 - 1, where float32(w) rounds up to 2^32 or stops
    being exact, the quarter turns and their neighbours."""
    return np.concatenate(draw(3, 0, TAG_NORMAL, np.arange(1 << 16, dtype=np.uint64)) + (
        np.array([0, 1, 2 ** 32 - 1, 2 ** 32 - 2, 2 ** 32 - 128, 2 ** 32 - 129, 2 ** 24,
                  2 ** 24 + 1], dtype=np.uint64),
        (np.arange(9, dtype=np.uint64)[:, None] * np.uint64(2 ** 29)
         + np.arange(-2, 3).astype(np.uint64)[None, :]).reshape(-1) % np.uint64(2 ** 32)))


@pytest.mark.parametrize("log, cos_sin, log_ulps, trig_error", [
    (log_uniform, cos_sin_turn, 1.0, 2.0 ** -52),
    (log_uniform32, cos_sin_turn32, 1.5, 2.0 ** -23),  # measured: 1.24 ulp and 1.75 2^-24
], ids=["float64", "float32"])
def test_formula_accuracy(log, cos_sin, log_ulps, trig_error):
    """ln, cos and sin of the header's formulas against long-double libm over the words of
    :func:`_edge_words`; the quarter turns are exact."""
    if np.finfo(np.longdouble).nmant < 60:
        pytest.skip("needs an extended-precision long double for the exact values")
    words = _edge_words()
    L = np.longdouble
    exact_log = np.log((words.astype(L) + L(0.5)) * L(2) ** -32)
    theta = L("6.283185307179586476925286766559005768") * words.astype(L) * L(2) ** -32
    got_log = log(words)
    assert np.all(np.abs(got_log - exact_log) <= log_ulps * np.spacing(np.abs(got_log)))
    c, s = cos_sin(words)
    assert np.all(np.abs(c - np.cos(theta)) <= trig_error)
    assert np.all(np.abs(s - np.sin(theta)) <= trig_error)
    c, s = cos_sin(np.array([0, 2 ** 30, 2 ** 31, 3 * 2 ** 30], dtype=np.uint64))
    np.testing.assert_array_equal(c, [1.0, 0.0, -1.0, 0.0])
    np.testing.assert_array_equal(s, [0.0, 1.0, 0.0, -1.0])


def test_float32_normals_are_within_4_ulp_of_the_float64_ones():
    """Measured: 3.7 ulp at most over 10^6 draws."""
    keys, offsets = np.array([7, 2 ** 63 + 5], dtype=np.uint64), np.array([0, 500_000, 10 ** 6])
    z32 = ops.normal_segments(keys, offsets)
    z64 = ops.normal_segments(keys, offsets, dtype="float64")
    assert np.all(np.abs(z32 - z64) <= 4 * np.spacing(np.abs(z32)).astype(np.float64))


def test_reference_layout():
    """z(4c + k) pairs word 0 (radius) with word 1 (angle) and word 2 with word 3."""
    key, n = 0x0123456789ABCDEF, 10
    w = draw(key, 0, TAG_NORMAL, np.arange(3, dtype=np.uint64))
    r0, r2 = np.sqrt(-2 * log_uniform(w[0])), np.sqrt(-2 * log_uniform(w[2]))
    c1, s1 = cos_sin_turn(w[1])
    c3, s3 = cos_sin_turn(w[3])
    want = np.stack([r0 * c1, r0 * s1, r2 * c3, r2 * s3], axis=1).reshape(-1)[:n]
    np.testing.assert_array_equal(reference.normal_segments([key], [0, n]), want)


# ---------------------------------------------------------------------------- exact results
@pytest.mark.parametrize("lengths", [[1], [2], [3], [4], [5], [7, 0, 0, 9, 1], [257, 4096, 31],
                                     [0, 0, 0], [1000] * 20])
def test_exact_against_reference(rng, lengths):
    keys, offsets = _layout(rng, lengths)
    _assert_exact(keys, offsets, out64=ops.normal_segments(keys, offsets, dtype="float64"),
                  out32=ops.normal_segments(keys, offsets))


def test_every_cpu_isa_copy_is_exact():
    """Each ISA copy (base, AVX2, AVX-512 where this CPU has them) in its own process, since the
    copy is chosen once per process (FASTFAIR_CPU_ISA caps it)."""
    code = ("import numpy as np, fastfair\n"
            "from fastfair import ops, reference\n"
            "rng = np.random.default_rng(5)\n"
            "lengths = rng.integers(0, 700, 60); lengths[::5] = 0; lengths[3] = 20011\n"
            "offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)\n"
            "keys = rng.integers(0, 2 ** 64, 60, dtype=np.uint64)\n"
            "want = reference.normal_segments(keys, offsets)\n"
            "assert np.array_equal(ops.normal_segments(keys, offsets, dtype='float64'), want)\n"
            "want32 = reference.normal_segments(keys, offsets, 'float32')\n"
            "assert np.array_equal(ops.normal_segments(keys, offsets), want32)\n"
            "print(fastfair.build_info()['cpu_isa'])\n")
    assert "base" in run_under_every_isa(code)


def test_independent_of_threads(rng):
    lengths = rng.integers(0, 3000, 200)
    lengths[7] = 300_001
    keys, offsets = _layout(rng, lengths)
    before = _C.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            _C.set_num_threads(threads)
            results.append(ops.normal_segments(keys, offsets, dtype="float64"))
    finally:
        _C.set_num_threads(before)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    _assert_exact(keys, offsets, out64=results[0])


def test_independent_of_the_cohort(rng):
    """A segment's numbers depend only on (its key, the element index): any subset of the
    segments, in any order, gets the same numbers, and a longer segment extends a shorter one."""
    lengths = rng.integers(0, 500, 50)
    keys, offsets = _layout(rng, lengths)
    whole = ops.normal_segments(keys, offsets, dtype="float64")
    pick = rng.permutation(50)[:17]
    sub_keys, sub_off = keys[pick], np.concatenate([[0], np.cumsum(lengths[pick])])
    part = ops.normal_segments(sub_keys, sub_off, dtype="float64")
    for j, i in enumerate(pick):
        np.testing.assert_array_equal(part[sub_off[j]:sub_off[j + 1]],
                                      whole[offsets[i]:offsets[i + 1]])
    longer = ops.normal_segments(keys[:1], [0, lengths[0] + 13], dtype="float64")
    np.testing.assert_array_equal(longer[:lengths[0]], whole[:lengths[0]])
    # Another key, another stream.
    other = ops.normal_segments(keys[:1] + np.uint64(1), [0, 64], dtype="float64")
    assert not np.any(other == ops.normal_segments(keys[:1], [0, 64], dtype="float64"))


def test_empty_layouts():
    out = ops.normal_segments(np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64))
    assert out.shape == (0,) and out.dtype == np.float32
    out = ops.normal_segments(np.arange(5, dtype=np.uint64), np.zeros(6, dtype=np.int64),
                              dtype="float64")
    assert out.shape == (0,) and out.dtype == np.float64
    given = np.empty(0)
    assert ops.normal_segments(np.zeros(0, dtype=np.int64), [0], given) is given


def test_very_unequal_segments(rng):
    """One segment of 10^6 next to 10^4 empty ones and a few short ones: every slot is visited
    once and the long segment is split across threads."""
    lengths = np.zeros(10_000, dtype=np.int64)
    lengths[5000] = 1_000_000
    lengths[[0, 1, 9998, 9999]] = [1, 3, 5, 2]
    keys, offsets = _layout(rng, lengths)
    out = np.full(int(offsets[-1]), np.nan)
    ops.normal_segments(keys, offsets, out)
    for i in (0, 1, 5000, 9998, 9999):
        np.testing.assert_array_equal(out[offsets[i]:offsets[i + 1]],
                                      reference.normal_segments(keys[i:i + 1],
                                                                [0, lengths[i]]))


# ---------------------------------------------------------------------------- frameworks
def test_numpy_and_torch_inputs(rng):
    keys, offsets = _layout(rng, [13, 0, 40, 7])
    want = reference.normal_segments(keys, offsets)
    signed = keys.view(np.int64)  # int64 keys are the same 64 bits
    want32 = reference.normal_segments(keys, offsets, np.float32)
    t = ops.normal_segments(torch.from_numpy(signed), torch.from_numpy(offsets))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (60,)
    np.testing.assert_array_equal(t.numpy(), want32)
    t64 = ops.normal_segments(torch.from_numpy(signed), torch.from_numpy(offsets),
                              dtype=torch.float64)
    np.testing.assert_array_equal(t64.numpy(), want)
    out = torch.empty(60, dtype=torch.float64)
    assert ops.normal_segments(torch.from_numpy(signed), torch.from_numpy(offsets), out) is out
    np.testing.assert_array_equal(out.numpy(), want)
    n = ops.normal_segments(signed, offsets, dtype=np.float64)
    assert isinstance(n, np.ndarray)
    np.testing.assert_array_equal(n, want)
    listed = ops.normal_segments([int(k) for k in keys], offsets.tolist(), total=60)
    np.testing.assert_array_equal(listed, want32)


# ---------------------------------------------------------------------------- distribution
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_moments(dtype):
    """10^6 draws over 250 keys (4000 each): 5-sigma bounds of the sample mean, variance,
    skewness and kurtosis of N(0, 1), the 5% two-sided tail, a Kolmogorov-Smirnov test, and no
    correlation within a Box-Muller pair or between neighbouring keys."""
    m, per = 250, 4000
    n = m * per
    keys = np.arange(1000, 1000 + m, dtype=np.uint64)  # neighbouring keys
    z = ops.normal_segments(keys, np.arange(m + 1) * per, dtype=dtype).astype(np.float64)
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)
    assert abs(np.mean(z ** 3)) < 5 * np.sqrt(15 / n)
    assert abs(np.mean(z ** 4) - 3) < 5 * np.sqrt(96 / n)
    assert abs(np.mean(np.abs(z) > 1.959964) - 0.05) < 5 * np.sqrt(0.05 * 0.95 / n)
    assert stats.kstest(z, "norm").pvalue > P_MIN
    assert np.abs(z).max() <= np.sqrt(66 * np.log(2)) * (1 + 4 * np.finfo(dtype).eps)
    assert abs(np.mean(z[0::2] * z[1::2])) < 5 / np.sqrt(n / 2)
    rows = z.reshape(m, per)
    assert abs(np.mean(rows[:-1] * rows[1:])) < 5 / np.sqrt((m - 1) * per)


# ---------------------------------------------------------------------------- errors
def test_errors(rng):
    keys, offsets = _layout(rng, [3, 4])
    out = np.empty(7, dtype=np.float32)
    cases = [
        ((keys.astype(np.float64), offsets, out), "keys must have dtype uint64 or int64"),
        ((keys.astype(np.int32), offsets, out), "keys must have dtype uint64 or int64"),
        ((keys.reshape(1, 2), offsets, out), r"keys must have shape \[m\]"),
        ((keys, offsets[:2], out), r"offsets must have shape \[m \+ 1\] = \[3\]"),
        ((keys, offsets.astype(np.int32), out), "offsets must have dtype int64"),
        ((keys, np.array([1, 3, 7]), out), "offsets must start at 0; got 1"),
        ((keys, np.array([0, 5, 4]), np.empty(4, np.float32)),
         "offsets must be non-decreasing; got 4 < 5 at position 2"),
        ((keys, offsets, np.empty(8, np.float32)), "offsets must end at N = out's length 8; got 7"),
        ((keys, offsets, np.empty(7, np.float16)), "out must be float32 or float64; got float16"),
        ((keys, offsets, np.empty((7, 1), np.float32)), r"out must have shape \[N\]"),
        ((keys, offsets, np.empty(14, np.float32)[::2]), "out must be C-contiguous"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            ops.normal_segments(*args)
    frozen = np.empty(7, dtype=np.float64)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        ops.normal_segments(keys, offsets, frozen)
    with pytest.raises(ValueError, match="dtype must be float32 or float64; got int32"):
        ops.normal_segments(keys, offsets, dtype="int32")
    with pytest.raises(ValueError, match="total must be >= 0"):
        ops.normal_segments(keys, offsets, total=-1)
    with pytest.raises(ValueError, match="offsets must end at N"):
        ops.normal_segments(keys, offsets, total=6)
    # A failed call writes nothing.
    out[:] = 0
    with pytest.raises(ValueError):
        ops.normal_segments(keys, np.array([0, 8, 7]), out)
    assert not out.any()


# ---------------------------------------------------------------------------- CUDA
@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_identical_to_cpu(rng, dtype):
    lengths = rng.integers(0, 2000, 300)
    lengths[::9] = 0
    lengths[11] = 500_003
    keys, offsets = _layout(rng, lengths)
    cpu = ops.normal_segments(keys, offsets, dtype=dtype)
    k, o = torch.from_numpy(keys.view(np.int64)).cuda(), torch.from_numpy(offsets).cuda()
    gpu = ops.normal_segments(k, o, total=int(offsets[-1]), dtype=dtype)
    assert gpu.is_cuda and str(gpu.dtype) == f"torch.{dtype}"
    np.testing.assert_array_equal(gpu.cpu().numpy(), cpu)
    stream = torch.cuda.Stream()
    out = torch.empty(int(offsets[-1]), dtype=getattr(torch, dtype), device="cuda")
    with torch.cuda.stream(stream):
        ops.normal_segments(k, o, out)
    stream.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), cpu)
    # Only the first 100 segments: the same numbers for them.
    part = ops.normal_segments(k[:100], o[:101], dtype=dtype)
    np.testing.assert_array_equal(part.cpu().numpy(), cpu[:offsets[100]])


@requires_cuda
def test_cuda_errors(rng):
    keys, offsets = _layout(rng, [3, 4])
    k = torch.from_numpy(keys.view(np.int64)).cuda()
    with pytest.raises(ValueError, match="offsets is on"):
        ops.normal_segments(k, torch.from_numpy(offsets), total=7)
    with pytest.raises(ValueError, match="out is on"):
        ops.normal_segments(k, torch.from_numpy(offsets).cuda(), torch.empty(7))
