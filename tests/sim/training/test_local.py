"""Batched local training against a per-client loop, evaluation, and the minibatch schedule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair.sim.data.arrays import ArrayDataset
from fastfair.sim.data.base import take_rows
from fastfair.sim.data.synthetic import SyntheticDataset
from fastfair.sim.models.flat import MLP, LogisticRegression, make_model
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.products import affine
from fastfair.sim.training.evaluate import evaluate_clients
from fastfair.sim.training.local import train_clients
from fastfair.sim.training.schedule import LocalTrainingConfig, minibatch_schedule


def _cohort():
    d = SyntheticDataset(1000, 1.0, 1.0, seed=5, max_samples=120)
    return d, d.client_data(np.array([3, 77, 500, 999, 12]))


def _loop_reference(model, theta, batch, config, schedule):
    """Each client alone: plain autograd SGD on exactly the scheduled rows (float64)."""
    updates = []
    steps = list(schedule)
    for k in range(len(batch.counts)):
        p = theta.double().clone().reshape(1, -1).requires_grad_(True)
        for take, valid in steps:
            if not valid[k].any():
                continue
            rows = take[k][valid[k]]
            logits = model.forward(p, batch.x[rows].double().unsqueeze(0))[0]
            loss = torch.nn.functional.cross_entropy(logits, batch.y[rows])
            (g,) = torch.autograd.grad(loss, p)
            with torch.no_grad():
                p -= config.lr * g
        updates.append((theta.double() - p.detach()[0]))
    return torch.stack(updates)


@pytest.mark.parametrize("model_name", ["logreg", "mlp"])
@pytest.mark.parametrize("config", [LocalTrainingConfig(epochs=2, batch_size=16, lr=0.1),
                                    LocalTrainingConfig(steps=7, batch_size=40, lr=0.05)])
def test_batched_training_matches_per_client_loop(model_name, config):
    d, batch = _cohort()
    model = make_model(model_name, d.num_features, d.num_classes, hidden=8)
    theta = model.init(torch.Generator().manual_seed(1)) + 0.01
    ids = np.array([3, 77, 500, 999, 12])
    got, _ = train_clients(model, theta, batch, config, ids, seed=9)
    schedule = minibatch_schedule(batch.counts, config, ids, seed=9)
    expected = _loop_reference(model, theta, batch, config, schedule)
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=2e-6)
    assert got.abs().sum() > 0


def test_schedule_visits_every_sample_once_per_epoch():
    counts = np.array([5, 1, 12, 7])
    config = LocalTrainingConfig(epochs=3, batch_size=4, lr=0.1)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    seen = {k: [] for k in range(4)}
    for take, valid in minibatch_schedule(counts, config, np.arange(4), seed=0):
        for k in range(4):
            seen[k].extend(take[k][valid[k]].tolist())
    for k, n in enumerate(counts):
        rows = np.array(seen[k]).reshape(3, n)  # three epochs of n rows each
        for epoch in rows:
            np.testing.assert_array_equal(np.sort(epoch), offsets[k] + np.arange(n))
    # Shuffled: the first epoch of the largest client is not in order.
    assert not np.array_equal(np.array(seen[2][:12]), offsets[2] + np.arange(12))


def test_schedule_steps_mode_counts():
    counts = np.array([3, 50])
    config = LocalTrainingConfig(steps=5, batch_size=8, lr=0.1)
    steps = list(minibatch_schedule(counts, config, np.array([7, 8]), seed=0))
    assert len(steps) == 5
    assert all(v[0].sum() == 3 and v[1].sum() == 8 for _, v in steps)


def test_a_client_trains_identically_in_any_cohort():
    d, batch = _cohort()
    ids = np.array([3, 77, 500, 999, 12])
    model = make_model("logreg", d.num_features, d.num_classes)
    theta = model.init(torch.Generator().manual_seed(1))
    config = LocalTrainingConfig(epochs=2, batch_size=16, lr=0.1)
    full, _ = train_clients(model, theta, batch, config, ids, seed=4)
    alone, _ = train_clients(model, theta, d.client_data(ids[2:3]), config, ids[2:3], seed=4)
    torch.testing.assert_close(alone[0], full[2], rtol=1e-6, atol=1e-7)


def test_evaluate_clients_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = np.array([0, 1, 1])
    d = ArrayDataset([(x[:2], y[:2]), (x[2:], y[2:])], test=[(x[:2], y[:2]), (x[2:], y[2:])])
    model = LogisticRegression(2, 2)
    theta = torch.tensor([2.0, 0.0, 0.0, 1.0, 0.0, 0.0])  # W = [[2, 0], [0, 1]], b = 0
    loss, acc = evaluate_clients(model, theta, d.client_data([0, 1], "test"))
    np.testing.assert_allclose(acc, [1.0, 1.0 * (1 > 2)])  # client 1: logits [2, 1] -> class 0
    l0 = np.log1p(np.exp(-2.0))
    l1 = np.log1p(np.exp(-1.0))
    np.testing.assert_allclose(loss, [(l0 + l1) / 2, np.log1p(np.exp(1.0))], rtol=1e-6)


def test_module_model_matches_builtin_mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    wrapped = ModuleModel(net)
    mlp = MLP(4, 3, hidden=6)
    # nn.Linear stores W as [out, in]; the built-in MLP as [in, out].
    W1, b1, W2, b2 = [p.detach() for p in net.parameters()]
    theta = torch.cat([W1.T.reshape(-1), b1, W2.T.reshape(-1), b2])
    x = torch.randn(2, 5, 4)
    expected = mlp.forward(theta.repeat(2, 1), x)
    got = wrapped.forward(wrapped.init(None).repeat(2, 1), x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_training_config_errors():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        LocalTrainingConfig(batch_size=0)
    with pytest.raises(ValueError, match="lr must be > 0"):
        LocalTrainingConfig(lr=0)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        LocalTrainingConfig(steps=0)


@pytest.mark.parametrize("rows", [2, 4])  # C = 3 outputs: x W + b at 2 rows, W^T x^T at 4
def test_affine_is_x_w_plus_b_with_its_gradients(rows):
    # Shapes as small as the two paths allow: gradcheck perturbs every input element.
    g = torch.Generator().manual_seed(1)
    x, W, b = (torch.randn(2, rows, 5, generator=g, dtype=torch.float64, requires_grad=True),
               torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True),
               torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True))
    out = affine(x, W, b)
    assert out.shape == (2, rows, 3) and out.is_contiguous()
    torch.testing.assert_close(out, x @ W + b.unsqueeze(1))
    assert torch.autograd.gradcheck(affine, (x, W, b))


def test_affine_gives_a_model_the_same_bits_alone_and_in_company_on_any_threads():
    # Alone, one product gets all of BLAS's threads, which may split its sum differently from
    # the per-model products of a batch; affine runs it on one thread.
    g = torch.Generator().manual_seed(2)
    x, W, b = torch.randn(5, 32, 60, generator=g), torch.randn(5, 60, 10, generator=g), \
        torch.randn(5, 10, generator=g)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            Wr = W.clone().requires_grad_(True)
            together = affine(x, Wr, b)
            (g_together,) = torch.autograd.grad(together.square().sum(), [Wr])
            for k in range(5):
                Wk = W[k:k + 1].clone().requires_grad_(True)
                alone = affine(x[k:k + 1], Wk, b[k:k + 1])
                (g_alone,) = torch.autograd.grad(alone.square().sum(), [Wk])
                assert torch.equal(alone[0], together[k]), (threads, k)
                assert torch.equal(g_alone[0], g_together[k]), (threads, k)
    finally:
        torch.set_num_threads(before)


def test_take_rows_is_advanced_indexing():
    t = torch.randn(50, 3, 4)
    index = torch.randint(0, 50, (6, 7))
    assert torch.equal(take_rows(t, index), t[index])
    assert torch.equal(take_rows(t[:, 0, 0], index), t[:, 0, 0][index])


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_chunks_of_a_training_pass_do_not_change_any_number(chunk):
    # Three lanes (plain, FedProx, Fed-CVaR with its trained threshold) over 4 clients of
    # different step counts, trained in chunks of 1, 2 or 5 rows against one pass of all 12.
    from fastfair.aggregators.objectives import CVaRObjective, ProximalObjective
    from fastfair.sim.seeding import CohortKeys
    from fastfair.sim.training.lanes import Lane
    from fastfair.sim.training.local import train_lanes

    d, batch = _cohort()
    ids = np.array([3, 77, 500, 999, 12])
    model = MLP(d.num_features, d.num_classes, hidden=8)
    g = torch.Generator().manual_seed(4)
    lanes = [Lane(torch.randn(model.num_params, generator=g), np.array([0, 1, 2, 4])),
             Lane(torch.randn(model.num_params, generator=g), np.array([1, 2, 3, 4]),
                  ProximalObjective(0.3)),
             Lane(torch.randn(model.num_params, generator=g), np.array([0, 2, 3, 4]),
                  CVaRObjective(0.2, 0.1, 1.5, lr_threshold=0.05))]
    keys = CohortKeys.of(9, ids, torch.device("cpu"))
    config = LocalTrainingConfig(epochs=2, batch_size=16, lr=0.1)
    whole = train_lanes(model, batch, keys, lanes, config, chunk=12)
    parts = train_lanes(model, batch, keys, lanes, config, chunk=chunk)
    for (u_whole, s_whole), (u_parts, s_parts) in zip(whole, parts):
        assert torch.equal(u_whole, u_parts)
        assert (s_whole is None and s_parts is None) or torch.equal(s_whole, s_parts)
    assert whole[2][1] is not None and whole[0][1] is None


def test_a_schedule_over_some_clients_ends_with_their_last_step():
    counts = np.array([100, 30, 10])
    config = LocalTrainingConfig(epochs=1, batch_size=10)
    from fastfair.sim.seeding import shuffle_client_keys
    from fastfair.sim.training.schedule import keyed_schedule

    keys = shuffle_client_keys(0, np.arange(3))
    assert [t.shape[0] for t, _ in keyed_schedule(counts, config, keys, np.array([1, 2]))] == \
        [2, 1, 1]
