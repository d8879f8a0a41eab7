"""SuPerFed fused passes against autograd (float64) on a small MLP: reduce, mix, the gradient
split with the proximity and orthogonality terms, SGD with momentum; thread-count invariance."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair import _C, ops
from fastfair.reference.superfed import superfed_gradients
from fastfair.sim.models.flat import MLP

torch = pytest.importorskip("torch")

MODEL = MLP(6, 4, hidden=5)  # segments: W1 (twinned), b1, W2 (twinned), b2
LAYOUT = ops.SegmentLayout.from_shapes(MODEL.shapes)


def _cohort(m=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    P = LAYOUT.num_params
    f, l, glob = (torch.randn(m, P, generator=g), torch.randn(m, P, generator=g),
                  torch.randn(P, generator=g))
    x = torch.randn(m, 7, 6, generator=g)
    y = torch.randint(0, 4, (m, 7), generator=g)
    return f, l, glob, x, y


def _loss(x, y):
    def loss(mixed):
        logits = MODEL.forward(mixed, x.to(mixed.dtype))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 4), y.reshape(-1),
                                                 reduction="none").reshape(y.shape).mean(1).sum()
    return loss


def test_reduce_and_mix():
    f, l, g, _, _ = _cohort()
    r = ops.superfed_reduce(f, l, g, LAYOUT).double()
    for s in range(LAYOUT.num_segments):
        a, b = LAYOUT.offsets[s], LAYOUT.offsets[s + 1]
        fs, ls, gs = f[:, a:b].double(), l[:, a:b].double(), g[a:b].double()
        tw = float(LAYOUT.twinned[s])
        torch.testing.assert_close(r[:, s, 0], tw * (fs * ls).sum(1))
        torch.testing.assert_close(r[:, s, 1], tw * (fs * fs).sum(1))
        torch.testing.assert_close(r[:, s, 2], tw * (ls * ls).sum(1))
        torch.testing.assert_close(r[:, s, 3], ((fs - gs) ** 2).sum(1))
    lam = np.array([0.0, 0.3, 1.0])  # MM: one lambda per client
    mixed = ops.superfed_mix(f, l, lam, LAYOUT)
    for s in range(LAYOUT.num_segments):
        a, b = LAYOUT.offsets[s], LAYOUT.offsets[s + 1]
        w = torch.tensor(lam, dtype=torch.float32)[:, None] * float(LAYOUT.twinned[s])
        torch.testing.assert_close(mixed[:, a:b], (1 - w) * f[:, a:b] + w * l[:, a:b])


@pytest.mark.parametrize("prox", ["paper", "reference_code"])
@pytest.mark.parametrize("mode", ["mm", "lm"])
def test_step_gradients_match_autograd(prox, mode):
    f, l, g, x, y = _cohort(seed=1)
    rng = np.random.default_rng(2)
    m, S = f.shape[0], LAYOUT.num_segments
    lam = np.repeat(rng.uniform(size=(m, 1)), S, 1) if mode == "mm" else rng.uniform(size=(m, S))
    mu, nu = 0.3, 1.7
    gf, gl, gmix = superfed_gradients(f, l, g, lam, LAYOUT.offsets, LAYOUT.twinned,
                                      _loss(x, y), mu=mu, nu=nu, prox=prox)
    reduced = ops.superfed_reduce(f, l, g, LAYOUT)
    f1, l1 = f.clone(), l.clone()
    mixed = torch.empty_like(f)
    ops.superfed_step(f1, l1, g, gmix.float(), layout=LAYOUT, lam=lam, mixed=mixed,
                      buf_f=torch.zeros_like(f), buf_l=torch.zeros_like(f),
                      prox=ops.prox_coefficients(reduced, LAYOUT, mu, prox),
                      orth=ops.orthogonality_coefficients(reduced, LAYOUT, nu), lr=1.0)
    torch.testing.assert_close((f - f1).double(), gf, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close((l - l1).double(), gl, rtol=1e-4, atol=1e-5)
    # The mixed output is the new models mixed with the same lambda.
    torch.testing.assert_close(mixed, ops.superfed_mix(f1, l1, lam, LAYOUT))


def test_momentum_weight_decay_and_inactive_rows_match_torch_sgd():
    f, l, g, x, y = _cohort(seed=3)
    m, S = f.shape[0], LAYOUT.num_segments
    lam = np.full((m, S), 0.4)
    pf = f.double().clone().requires_grad_(True)
    pl = l.double().clone().requires_grad_(True)
    opt = torch.optim.SGD([pf, pl], lr=0.05, momentum=0.9, weight_decay=1e-2)
    f1, l1 = f.clone(), l.clone()
    bf, bl, mixed = torch.zeros_like(f), torch.zeros_like(f), torch.empty_like(f)
    active = np.array([True, False, True])
    for _ in range(3):
        gf, gl, gmix = superfed_gradients(pf, pl, g, lam, LAYOUT.offsets, LAYOUT.twinned,
                                          _loss(x, y), mu=0.2, nu=0.0)
        pf.grad, pl.grad = gf * torch.as_tensor(active, dtype=torch.float64)[:, None], gl
        with torch.no_grad():
            keep = pl.detach().clone()
        opt.step()
        with torch.no_grad():  # shared layers of l and inactive clients keep their values
            tw = torch.as_tensor(np.repeat(LAYOUT.twinned, np.diff(LAYOUT.offsets)))
            rows = torch.as_tensor(active)[:, None]
            pl.copy_(torch.where(tw[None, :] & rows, pl, keep))
        reduced = ops.superfed_reduce(f1, l1, g, LAYOUT)
        ops.superfed_step(f1, l1, g, gmix.float(), layout=LAYOUT, lam=lam, mixed=mixed,
                          buf_f=bf, buf_l=bl,
                          prox=ops.prox_coefficients(reduced, LAYOUT, 0.2),
                          orth=ops.orthogonality_coefficients(reduced, LAYOUT, 0.0), lr=0.05,
                          momentum=0.9, weight_decay=1e-2, active=active)
    # torch applies weight decay to inactive rows too (their grad is 0, not absent): compare the
    # active rows, and check inactive rows did not move.
    torch.testing.assert_close(f1[active].double(), pf.detach()[active], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(l1[active].double(), pl.detach()[active], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(f1[1], f[1], rtol=0, atol=0)
    torch.testing.assert_close(l1[1], l[1], rtol=0, atol=0)


def test_frozen_local_model_and_zero_regularisers_is_plain_sgd():
    # lambda = 0, nu = mu = 0: the federated model takes plain SGD steps on the data loss and
    # the local model does not move (the FedAvg client update).
    f, l, g, x, y = _cohort(seed=4)
    m, S = f.shape[0], LAYOUT.num_segments
    zeros = np.zeros((m, S))
    f1, l1, mixed = f.clone(), l.clone(), torch.empty_like(f)
    leaf = f.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_loss(x, y)(leaf), [leaf])
    ops.superfed_step(f1, l1, g, grad, layout=LAYOUT, lam=zeros, mixed=mixed,
                      buf_f=torch.zeros_like(f), buf_l=torch.zeros_like(f), prox=zeros,
                      orth=np.zeros((m, 4)), lr=0.1, train_local=False)
    torch.testing.assert_close(f1, f - 0.1 * grad, rtol=0, atol=1e-6)
    torch.testing.assert_close(l1, l, rtol=0, atol=0)
    torch.testing.assert_close(mixed, f1, rtol=0, atol=0)


def test_reduce_independent_of_threads():
    layout = ops.SegmentLayout.from_shapes([(300, 100), (100,), (100, 10)])
    g = torch.Generator().manual_seed(5)
    f, l = torch.randn(4, layout.num_params, generator=g), torch.randn(4, layout.num_params,
                                                                       generator=g)
    glob = torch.randn(layout.num_params, generator=g)
    before = _C.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            _C.set_num_threads(threads)
            outs.append(ops.superfed_reduce(f, l, glob, layout))
    finally:
        _C.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])


def test_layout_and_argument_errors():
    with pytest.raises(ValueError, match="offsets"):
        ops.SegmentLayout(np.array([0, 5, 3]), np.array([True, False]))
    with pytest.raises(ValueError, match="twinned"):
        ops.SegmentLayout(np.array([0, 5]), np.array([True, False]))
    f, l, g, _, _ = _cohort()
    with pytest.raises(ValueError, match="g must have shape"):
        ops.superfed_reduce(f, l, g[:-1].clone(), LAYOUT)
    with pytest.raises(ValueError, match="lam must have shape"):
        ops.superfed_mix(f, l, np.zeros((3, 2)), LAYOUT)
    with pytest.raises(ValueError, match="out must have shape"):  # superfed_mix calls it out
        ops.superfed_mix(f, l, np.zeros(f.shape[0]), LAYOUT, out=f[:, :-1].clone())
    with pytest.raises(ValueError, match=r"lam must be in \[0, 1\]; got 1.5"):
        ops.superfed_mix(f, l, np.full(f.shape[0], 1.5), LAYOUT)
    with pytest.raises(ValueError, match="float32"):
        ops.superfed_reduce(f.double(), l, g, LAYOUT)


def test_rejected_step_writes_nothing():
    f, l, g, _, _ = _cohort(seed=4)
    m, S = f.shape[0], LAYOUT.num_segments
    states = [f.clone(), l.clone(), torch.zeros_like(f), torch.zeros_like(f), torch.zeros_like(f)]
    before = [t.clone() for t in states]
    prox = np.zeros((m, S))
    prox[1, 0] = np.nan
    with pytest.raises(ValueError, match="prox must be finite; got nan at position"):
        ops.superfed_step(states[0], states[1], g, torch.ones_like(f), layout=LAYOUT,
                          lam=np.full(m, 0.5), mixed=states[4], buf_f=states[2], buf_l=states[3],
                          prox=prox, orth=np.zeros((m, 4)), lr=0.1)
    with pytest.raises(ValueError, match=r"lam_next must be in \[0, 1\]"):
        ops.superfed_step(states[0], states[1], g, torch.ones_like(f), layout=LAYOUT,
                          lam=np.full(m, 0.5), lam_next=np.full(m, -0.1), mixed=states[4],
                          buf_f=states[2], buf_l=states[3], prox=np.zeros((m, S)),
                          orth=np.zeros((m, 4)), lr=0.1)
    for t, b in zip(states, before):
        torch.testing.assert_close(t, b, rtol=0, atol=0)
