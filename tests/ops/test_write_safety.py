"""Ops that write in place never give a wrong answer: an output that shares memory with another
argument is refused before anything is written (naming both), every argument is validated before
the first write, and the streaming Accumulator does not lose updates added from several threads.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fastfair import _C, ops

torch = pytest.importorskip("torch")


def _floats(n, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


# ----------------------------------------------------------------------------- weighted averages

def test_flat_out_shifted_off_the_row_grid_is_refused():
    """An out that starts inside a row of X (not on the row grid) used to give a wrong sum."""
    N, d = 4, 64
    buf = _floats(N * d + 3 * d)
    X = buf[:N * d].reshape(N, d)
    before = buf.copy()
    with pytest.raises(ValueError, match="out overlaps X; pass a separate buffer"):
        ops.weighted_average(X, np.ones(N), out=buf[d // 2 + 1:d // 2 + 1 + d])
    assert np.array_equal(buf, before)


@pytest.mark.parametrize("start", [0, 2])  # a row of X itself, and rows past the first
def test_flat_out_on_a_row_of_X_is_refused(start):
    X = _floats(16).reshape(4, 4)
    with pytest.raises(ValueError, match="out overlaps X"):
        ops.weighted_average(X, np.ones(4), out=X[start])


def test_flat_base_overlapping_X_is_refused():
    X = _floats(16, np.float64).reshape(4, 4)
    with pytest.raises(ValueError, match="base overlaps X"):
        ops.weighted_average(X, np.ones(4), base=X[3])


def test_flat_out_overlapping_w_is_refused():
    buf = _floats(8, np.float64)
    X = np.ones((4, 4))
    with pytest.raises(ValueError, match="out overlaps w"):
        ops.weighted_average(X, buf[:4], out=buf[2:6])


def test_strided_rows_and_an_out_between_them_are_fine():
    """The check is exact for rows: an out in the gap between strided rows shares no memory."""
    buf = _floats(8 * 10)
    X = buf.reshape(8, 10)[::2]  # rows 0, 2, 4, 6
    out = buf.reshape(8, 10)[1]  # row 1 lies between rows 0 and 2
    want = X.astype(np.float64).sum(0)
    got = ops.weighted_average(X, np.ones(4), out=out)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_list_out_overlapping_an_update_is_refused():
    a, buf = _floats(6), _floats(8, seed=1)
    with pytest.raises(ValueError, match=r"out\[0\] overlaps X\[1\]\[0\]"):
        ops.weighted_average([[a], [buf[:6]]], [0.5, 0.5], out=[buf[2:8]])


def test_list_outputs_overlapping_each_other_are_refused():
    buf = np.zeros(8, np.float32)
    X = [[_floats(4), _floats(4)], [_floats(4, seed=1), _floats(4, seed=2)]]
    with pytest.raises(ValueError, match=r"out\[[01]\] overlaps out\[[01]\]"):
        ops.weighted_average(X, [0.5, 0.5], out=[buf[:4], buf[2:6]])


def test_list_form_with_many_arrays_finds_the_overlap():
    """Large calls take the sorted path; it finds an overlap among hundreds of arrays too."""
    X = [[_floats(3, seed=10 * i + l) for l in range(40)] for i in range(30)]
    outs = [np.empty(3, np.float32) for _ in range(40)]
    ops.weighted_average(X, np.ones(30), out=outs)  # disjoint: fine
    outs[17] = X[12][5][:]
    with pytest.raises(ValueError, match=r"out\[17\] overlaps X\[12\]\[5\]"):
        ops.weighted_average(X, np.ones(30), out=outs)


# ----------------------------------------------------------------------------- other ops

def _eg_case():
    G = _floats(12, np.float64).reshape(2, 6)
    return G, _floats(12, np.float64, seed=1).reshape(2, 6)


def _superfed():
    layout = ops.SegmentLayout.from_shapes([(3, 2), (2,)])
    P = layout.num_params
    f, l, grad = (torch.randn(2, P, generator=torch.Generator().manual_seed(s)) for s in range(3))
    return layout, f, l, grad


def _overlap_cases():
    """(call, message): each call writes into memory shared with another argument."""
    buf64 = _floats(40, np.float64)
    buf32 = _floats(40)

    def softmax():
        x = buf64[:12].reshape(2, 6)
        ops.softmax(x, out=buf64[3:15].reshape(2, 6))

    def lse():
        x = buf64[:12].reshape(2, 6)
        _C.softmax_rows(x, [1.0], None, buf64[10:12], None, -1)

    def eg_g():
        buf = _floats(18, np.float64)
        ops.eg_step(buf[:12].reshape(2, 6), buf[6:18].reshape(2, 6), eta=0.1)

    def eg_values():
        G = _floats(6, np.float64)
        ids = np.array([0, 1], np.int64)
        _C.eg_step(G, None, ids, G[4:6], [-0.1], np.empty(6), np.empty(1), None, -1)

    def simplex():
        ops.project_simplex(buf64[:10].reshape(2, 5), out=buf64[5:15].reshape(2, 5))

    def sgld_grad():
        x = _floats(12).reshape(3, 4)
        grad = _floats(12, seed=1).reshape(3, 4)
        ops.sgld_step(x, grad, step=0.1, noise_std=0.1, seed=0, offset=0, out=grad)

    def sgld_shifted():
        x = buf32[:12].reshape(3, 4)
        ops.sgld_step(x, _floats(12).reshape(3, 4), step=0.1, noise_std=0.1, seed=0, offset=0,
                      out=buf32[1:13].reshape(3, 4))

    def fedevg():
        x = _floats(6).reshape(3, 2)
        G = _floats(12).reshape(2, 3, 2)
        ops.fedevg_server_step(x, G, np.ones((2, 3)), [1.0, 1.0], step=0.1, noise_std=0.0,
                               seed=0, offset=0, out=G[1])

    def superfed_mix():
        layout, f, l, _ = _superfed()
        ops.superfed_mix(f, l, np.zeros(2 * layout.num_segments), layout, out=l)

    def superfed_step():
        layout, f, l, grad = _superfed()
        S = layout.num_segments
        ops.superfed_step(f, l, torch.zeros(layout.num_params), grad, layout=layout,
                          lam=np.zeros((2, S)), mixed=grad, buf_f=torch.zeros_like(f),
                          buf_l=torch.zeros_like(f), prox=np.zeros((2, S)), orth=np.zeros((2, 4)),
                          lr=0.1)

    def superfed_state():
        layout, f, l, grad = _superfed()
        S = layout.num_segments
        ops.superfed_step(f, l, torch.zeros(layout.num_params), grad, layout=layout,
                          lam=np.zeros((2, S)), mixed=torch.zeros_like(f), buf_f=f,
                          buf_l=torch.zeros_like(f), prox=np.zeros((2, S)), orth=np.zeros((2, 4)),
                          lr=0.1)

    def superfed_reduce():
        layout, f0, l, _ = _superfed()
        P, S = layout.num_params, layout.num_segments
        buf = torch.zeros(2 * P + 2 * S * 4 * 2)
        f = buf[:2 * P].view(2, P)
        f.copy_(f0)
        out = buf[P:P + 2 * S * 4 * 2].view(torch.float64).reshape(2, S, 4)
        _C.superfed_reduce(f, l, torch.zeros(P), *layout.arrays(f), out, -1)

    def dr_gradient():
        p = np.full(6, 1 / 6)
        ops.dr_gradient([0.5, 0.2], [1, 4], p, sample_prob=0.5, out=p)

    def dr_lazy():
        state = np.zeros(6)
        ops.dr_lazy_step(state, [1, 4], [0.5, 0.2], sample_prob=0.5, eta=0.1, out=state[2:4])

    def normal_segments():
        offsets = np.array([0, 2, 4], np.int64)
        _C.normal_segments(np.array([1, 2], np.int64), offsets, offsets.view(np.float32)[:4], -1)

    def availability():
        prob = np.full(8, 0.5)
        _C.availability(prob, 0.0, 0, 0, prob.view(np.uint8)[:8], -1)

    def simplex_qp_batched():
        H = np.stack([np.eye(3)] * 2)
        b = np.ones((2, 3))
        _C.simplex_qp_batched(H, b, H.reshape(-1)[:6].reshape(2, 3), np.empty(2),
                              np.empty(2, np.int64), np.empty(2, np.int64), 0, 0, 1e-12, -1)

    def ons_step():
        ons = ops.OnlineNewtonStep(3, alpha=1.0, beta=0.5)
        _C.ons_step(ons._H, ons._Hinv, ons._pending_u, ons._pending_c, ons._pending_g, ons._b,
                    ons._p, ons._b, 0.5, True, 1e-10, 0)

    return [
        (softmax, "out overlaps x"), (lse, "lse overlaps x"), (eg_g, "G overlaps g"),
        (eg_values, "G overlaps values"), (simplex, "out overlaps v"),
        (sgld_grad, "out overlaps grad"), (sgld_shifted, "out overlaps x"),
        (fedevg, "out overlaps G"), (superfed_mix, "out overlaps l"),
        (superfed_step, "mixed overlaps grad"),
        (superfed_state, "f overlaps buf_f|buf_f overlaps f"),
        (superfed_reduce, "out overlaps f"), (dr_gradient, "out overlaps p"),
        (dr_lazy, "out overlaps state|state overlaps out"),
        (normal_segments, "out overlaps offsets"), (availability, "out overlaps prob"),
        (simplex_qp_batched, "out overlaps H"), (ons_step, "b overlaps g|g overlaps b"),
    ]


@pytest.mark.parametrize("call,message", _overlap_cases(),
                         ids=[c.__name__ for c, _ in _overlap_cases()])
def test_outputs_sharing_memory_with_an_argument_are_refused(call, message):
    with pytest.raises(ValueError, match=f"({message}); pass a separate buffer"):
        call()


def test_eg_step_out_on_the_state_is_refused():
    G, g = _eg_case()
    before = G.copy()
    with pytest.raises(ValueError, match="out overlaps G"):
        ops.eg_step(G, g, eta=0.1, out=G)
    assert np.array_equal(G, before)


def test_documented_in_place_updates_still_work():
    """sgld_step and fedevg_server_step update x in place (out=x, or by default)."""
    x = _floats(12).reshape(3, 4)
    grad = _floats(12, seed=1).reshape(3, 4)
    want = ops.sgld_step(x.copy(), grad, step=0.1, noise_std=0.1, seed=3, offset=0)
    got = ops.sgld_step(x, grad, step=0.1, noise_std=0.1, seed=3, offset=0, out=x)
    assert got is x and np.array_equal(x, want)
    xs = _floats(6).reshape(3, 2)
    G = _floats(12, seed=2).reshape(2, 3, 2)
    want = ops.fedevg_server_step(xs.copy(), G, np.ones((2, 3)), [1.0, 2.0], step=0.1,
                                  noise_std=0.1, seed=1, offset=0)
    ops.fedevg_server_step(xs, G, np.ones((2, 3)), [1.0, 2.0], step=0.1, noise_std=0.1, seed=1,
                           offset=0, out=xs)
    assert np.array_equal(xs, want)


# ----------------------------------------------------------------------------- softmax regression

def _regression(N=40, F=3, C=4, K=4, seed=0):
    rng = np.random.default_rng(seed)
    store = np.zeros(N * F + 200, np.float32)
    x = store[:N * F].reshape(N, F)
    x[:] = rng.standard_normal((N, F))
    return {"x": x, "y": rng.integers(0, C, N).astype(np.int64),
            "offsets": np.arange(0, N + 1, N // K, dtype=np.int64),
            "keys": np.arange(K, dtype=np.int64), "clients": np.arange(K, dtype=np.int64),
            "steps": np.full(K, 3, np.int64), "params": np.zeros((K, F * C + C), np.float32),
            "batch_size": 4, "lr": 0.1}, store


def test_a_bad_label_is_refused_before_any_row_trains():
    """One label outside [0, C) in the last client used to raise only after the other clients'
    rows of params were trained."""
    args, _ = _regression()
    args["y"][35] = 4
    args["params"][:] = np.random.default_rng(1).standard_normal(args["params"].shape)
    before = args["params"].copy()
    with pytest.raises(ValueError, match=r"y\[35\] = 4 is a class outside \[0, C\) = \[0, 4\)"):
        ops.softmax_regression_sgd(**args)
    assert args["params"].tobytes() == before.tobytes()


def test_params_sharing_memory_with_x_are_refused():
    """params over x's memory trained on data it was overwriting (a result off by 5e-3)."""
    args, store = _regression()
    args["params"] = store[60:60 + args["params"].size].reshape(args["params"].shape)
    before = store.copy()
    with pytest.raises(ValueError, match="params overlaps x; pass a separate buffer"):
        ops.softmax_regression_sgd(**args)
    assert store.tobytes() == before.tobytes()


def test_received_loss_sharing_memory_with_params_is_refused():
    args, _ = _regression()
    loss = args["params"].view(np.float64)[0, :4]
    with pytest.raises(ValueError, match="received_loss overlaps params"):
        ops.softmax_regression_sgd(**args, received_loss=loss)


# ----------------------------------------------------------------------------- Accumulator

def _hammer(acc, n_threads, adds, make_call):
    start = threading.Barrier(n_threads)

    def work():
        start.wait()
        for _ in range(adds):
            make_call(acc)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.parametrize("form", ["add", "add_list", "add_rows"])
def test_accumulator_loses_no_update_under_threads(form):
    """8 threads adding at once used to lose 1-3% of the sum while count said all arrived."""
    n_threads, adds, d = 8, 150, 50_000
    u = np.ones(d)
    rows = np.ones((2, d))
    call = {"add": lambda a: a.add(u, 1.0),
            "add_list": lambda a: a.add([u[:10], u[10:]], 1.0),
            "add_rows": lambda a: a.add_rows(rows, [1.0, 1.0])}[form]
    acc = ops.Accumulator()
    _hammer(acc, n_threads, adds, call)
    per_call = 2 if form == "add_rows" else 1
    total = n_threads * adds * per_call
    assert acc.count == total and acc.total_weight == total
    result = acc.result(normalize=False)
    result = np.concatenate(result) if isinstance(result, list) else result
    assert np.all(result == total)
