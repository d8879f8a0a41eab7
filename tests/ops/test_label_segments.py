"""label_segments: bit-exact against the NumPy reference on every CPU instruction-set copy and
thread count, independent of a segment's company, awkward layouts (m = 0, empty segments, one
class, classes beyond a vector), NumPy and torch, errors before anything is written, CUDA.

Tolerances: none. The kernels evaluate the header's fixed sequence of IEEE operations (float32
transform, float64 logits in feature order, no fused multiply-add), as the reference does."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair import _C, ops, reference
from tests.helpers.arrays import requires_cuda, torch
from tests.helpers.isa import run_under_every_isa


def _problem(rng, lengths, F=7, C=10):
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    m, N = lengths.shape[0], int(offsets[-1])
    f32 = np.float32
    return dict(x=rng.standard_normal((N, F)).astype(f32), offsets=offsets,
                W=rng.standard_normal((m, F, C)).astype(f32),
                b=rng.standard_normal((m, C)).astype(f32),
                scale=rng.uniform(0.1, 2.0, F).astype(f32),
                shift=rng.standard_normal((m, F)).astype(f32))


def _run(p, transform=True):
    x = p["x"].copy()
    kw = dict(scale=p["scale"], shift=p["shift"]) if transform else {}
    y = ops.label_segments(x, p["offsets"], p["W"], p["b"], **kw)
    return x, y


@pytest.mark.parametrize("F, C", [(7, 10), (1, 1), (60, 10), (5, 13), (3, 16), (4, 33), (2, 40)])
@pytest.mark.parametrize("transform", [True, False])
def test_matches_the_reference_bit_for_bit(F, C, transform):
    rng = np.random.default_rng(F * 100 + C)
    p = _problem(rng, [5, 0, 40, 1, 0, 133], F, C)
    x, y = _run(p, transform)
    kw = dict(scale=p["scale"], shift=p["shift"]) if transform else {}
    want_x, want_y = reference.label_segments(p["x"], p["offsets"], p["W"], p["b"], **kw)
    np.testing.assert_array_equal(x.view(np.uint32), want_x.view(np.uint32))
    np.testing.assert_array_equal(y, want_y)
    assert y.dtype == np.int64 and (0 <= y).all() and (y < C).all()
    if not transform:
        np.testing.assert_array_equal(x, p["x"])


def test_transform_is_the_torch_idiom_and_labels_follow_each_model():
    """x * scale + shift[i] as ``x.mul_(scale).add_(shift)``; a near-tie-free label equals the
    argmax of the float64 logits."""
    rng = np.random.default_rng(1)
    p = _problem(rng, [30, 70])
    x, y = _run(p)
    t = torch.from_numpy(p["x"].copy())
    owner = torch.from_numpy(np.repeat([0, 1], [30, 70]))
    t.mul_(torch.from_numpy(p["scale"])).add_(torch.from_numpy(p["shift"])[owner])
    np.testing.assert_array_equal(x, t.numpy())
    logits = np.einsum("nf,nfc->nc", x.astype(np.float64), p["W"][owner.numpy()]) + p["b"][
        owner.numpy()]
    np.testing.assert_array_equal(y, logits.argmax(1))


def test_a_segment_is_labelled_the_same_in_any_company():
    rng = np.random.default_rng(2)
    p = _problem(rng, [50, 20, 90])
    _, together = _run(p)
    alone = _problem(rng, [20])
    alone.update(x=p["x"][50:70], W=p["W"][1:2], b=p["b"][1:2], shift=p["shift"][1:2],
                 scale=p["scale"])
    _, y = _run(alone)
    np.testing.assert_array_equal(y, together[50:70])


def test_independent_of_threads():
    rng = np.random.default_rng(3)
    p = _problem(rng, rng.integers(0, 400, 300), F=60)
    before = _C.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            _C.set_num_threads(threads)
            results.append(_run(p))
    finally:
        _C.set_num_threads(before)
    for x, y in results[1:]:
        np.testing.assert_array_equal(x, results[0][0])
        np.testing.assert_array_equal(y, results[0][1])


def test_every_cpu_isa_copy_is_exact():
    """Each ISA copy in its own process (FASTFAIR_CPU_ISA caps the copy chosen per process)."""
    code = ("import numpy as np, fastfair\n"
            "from fastfair import ops, reference\n"
            "rng = np.random.default_rng(5)\n"
            "lengths = rng.integers(0, 90, 40); lengths[::7] = 0\n"
            "offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)\n"
            "N, F, C, m = int(offsets[-1]), 9, 11, 40\n"
            "x = rng.standard_normal((N, F)).astype(np.float32)\n"
            "W = rng.standard_normal((m, F, C)).astype(np.float32)\n"
            "b = rng.standard_normal((m, C)).astype(np.float32)\n"
            "s = rng.uniform(0.1, 2, F).astype(np.float32)\n"
            "h = rng.standard_normal((m, F)).astype(np.float32)\n"
            "wx, wy = reference.label_segments(x, offsets, W, b, s, h)\n"
            "y = ops.label_segments(x, offsets, W, b, scale=s, shift=h)\n"
            "assert np.array_equal(x, wx) and np.array_equal(y, wy)\n"
            "print(fastfair.build_info()['cpu_isa'])\n")
    assert "base" in run_under_every_isa(code)


def test_no_segments_and_torch_in_torch_out():
    empty = ops.label_segments(np.zeros((0, 3), np.float32), np.zeros(1, np.int64),
                               np.zeros((0, 3, 2), np.float32), np.zeros((0, 2), np.float32))
    assert empty.shape == (0,) and empty.dtype == np.int64
    rng = np.random.default_rng(4)
    p = _problem(rng, [4, 6])
    t = {k: torch.from_numpy(v.copy()) for k, v in p.items()}
    y = ops.label_segments(t["x"], t["offsets"], t["W"], t["b"], scale=t["scale"],
                           shift=t["shift"])
    assert isinstance(y, torch.Tensor) and y.dtype == torch.int64
    np.testing.assert_array_equal(y.numpy(), _run(p)[1])


@pytest.mark.parametrize("change, message", [
    (lambda p: p.update(offsets=np.array([0, 5, 3, p["x"].shape[0]])), "offsets"),
    (lambda p: p.update(offsets=p["offsets"][:-1]), "W"),
    (lambda p: p.update(W=p["W"][:, :, :3]), "b"),
    (lambda p: p.update(b=p["b"].astype(np.float64)), "b"),
    (lambda p: p.update(shift=p["shift"][:, :2]), "shift"),
    (lambda p: p.update(scale=None), "scale and shift"),
    (lambda p: p.update(x=p["x"].astype(np.float64)), "x"),
])
def test_bad_arguments_raise_before_anything_is_written(change, message):
    rng = np.random.default_rng(6)
    p = _problem(rng, [3, 2, 4])
    change(p)
    x0 = p["x"].copy()
    with pytest.raises(ValueError, match=message):
        ops.label_segments(p["x"], p["offsets"], p["W"], p["b"], scale=p["scale"],
                           shift=p["shift"])
    np.testing.assert_array_equal(p["x"], x0)


@requires_cuda
def test_cuda_equals_cpu_bit_for_bit():
    rng = np.random.default_rng(7)
    p = _problem(rng, rng.integers(0, 300, 64), F=60)
    x, y = _run(p)
    t = {k: torch.from_numpy(v.copy()).cuda() for k, v in p.items()}
    yc = ops.label_segments(t["x"], t["offsets"], t["W"], t["b"], scale=t["scale"],
                            shift=t["shift"])
    np.testing.assert_array_equal(t["x"].cpu().numpy(), x)
    np.testing.assert_array_equal(yc.cpu().numpy(), y)
