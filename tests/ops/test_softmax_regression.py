"""The cohort's local SGD of logistic regression in one kernel call, against the batched autograd
program it stands in for (same schedule, float32 in both), and its contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair import ops, reference
from fastfair.aggregators.objectives import ProximalObjective
from fastfair.sim.data.arrays import ArrayDataset
from fastfair.sim.data.synthetic import SyntheticDataset
from fastfair.sim.models.flat import MLP, LogisticRegression
from fastfair.sim.seeding import CohortKeys
from fastfair.sim.training.evaluate import evaluate_clients
from fastfair.sim.training.lanes import Lane
from fastfair.sim.training.local import _train_by_autograd, train_lanes, trains_by_kernel
from fastfair.sim.training.schedule import LocalTrainingConfig, local_steps
from tests.helpers.arrays import requires_cuda
from tests.helpers.tolerances import SOFTMAX_REGRESSION_CUDA


def _cohort(classes: int, features: int, clients: int = 12, seed: int = 0):
    """Clients of 1 .. 90 rows with ``classes`` classes and ``features`` features."""
    rng = np.random.default_rng(seed)
    data = [(rng.normal(size=(n, features)).astype(np.float32),
             rng.integers(0, classes, size=n)) for n in rng.integers(1, 90, size=clients)]
    d = ArrayDataset(data, test=data, num_classes=classes)
    return d.client_data(np.arange(clients))


@pytest.mark.parametrize("classes,features", [(10, 60), (2, 13), (20, 7), (40, 9), (128, 3)])
@pytest.mark.parametrize("config", [LocalTrainingConfig(epochs=1, batch_size=32, lr=0.1),
                                    LocalTrainingConfig(epochs=3, batch_size=5, lr=0.01),
                                    LocalTrainingConfig(steps=9, batch_size=64, lr=0.2)])
def test_kernel_matches_the_autograd_program(classes, features, config, cpu_isa):
    batch = _cohort(classes, features)
    model = LogisticRegression(features, classes)
    theta = torch.randn(model.num_params, generator=torch.Generator().manual_seed(1)) * 0.1
    keys = CohortKeys.of(4, np.arange(12))
    lane = Lane(theta, np.arange(12))
    assert trains_by_kernel(model, lane, batch)
    (got, state, loss), = train_lanes(model, batch, keys, [lane], config, received_loss=True)
    (expected, _), = _train_by_autograd(model, batch, keys, [lane], config)
    assert state is None and got.abs().max() > 1e-3
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=2e-6)
    received, _ = evaluate_clients(model, theta, batch, accuracy=False)
    np.testing.assert_allclose(loss, received, rtol=1e-6)


def test_kernel_matches_the_float64_reference():
    batch = _cohort(10, 11, clients=6, seed=3)
    args = _args(batch)
    args["params"] = torch.randn(6, 11 * 10 + 10, generator=torch.Generator().manual_seed(2))
    args["keys"] = torch.tensor([-5, 2**62, 3, 0, 9, -1], dtype=torch.int64)
    args["steps"] = args["steps"] * 2 + 1  # into a third epoch
    expected, expected_loss = reference.softmax_regression_sgd(
        **{k: v.numpy() if torch.is_tensor(v) else v for k, v in args.items()})
    loss = torch.empty(6, dtype=torch.float64)
    got = ops.softmax_regression_sgd(**args, received_loss=loss)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss.numpy(), expected_loss, rtol=1e-6)


def test_a_row_trains_the_same_in_any_company_and_thread_count():
    d = SyntheticDataset(300, seed=2)
    batch = d.client_data(np.arange(300))
    model = LogisticRegression(d.num_features, d.num_classes)
    keys = CohortKeys.of(1, np.arange(300))
    config = LocalTrainingConfig(epochs=2, batch_size=16, lr=0.05)
    theta = torch.full((model.num_params,), 0.01)
    threads = torch.get_num_threads()
    (alone, _), = train_lanes(model, batch, keys, [Lane(theta, np.array([7]))], config)
    try:
        torch.set_num_threads(2)
        (crowd, _), = train_lanes(model, batch, keys, [Lane(theta, np.arange(300))], config)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(alone[0], crowd[7])


def test_lanes_of_other_models_or_objectives_train_by_autograd():
    batch = _cohort(10, 6)
    theta = torch.zeros(LogisticRegression(6, 10).num_params)
    assert not trains_by_kernel(MLP(6, 10, hidden=4), Lane(theta, np.arange(3)), batch)
    proximal = Lane(theta, np.arange(3), ProximalObjective(0.1))
    assert not trains_by_kernel(LogisticRegression(6, 10), proximal, batch)
    assert trains_by_kernel(LogisticRegression(6, 10), Lane(theta, np.arange(3)), batch)


def _args(batch, classes=10):
    features = batch.x.shape[1]
    rows = len(batch.counts)
    config = LocalTrainingConfig(epochs=1, batch_size=8, lr=0.1)
    return dict(x=batch.x, y=batch.y, offsets=torch.from_numpy(batch.offsets),
                keys=torch.arange(rows, dtype=torch.int64),
                clients=torch.arange(rows, dtype=torch.int64),
                steps=torch.from_numpy(local_steps(batch.counts, config)),
                params=torch.zeros(rows, features * classes + classes), batch_size=8, lr=0.1)


@pytest.mark.parametrize("change,message", [
    (dict(x=lambda a: a["x"].double()), "x must have dtype float32"),
    (dict(y=lambda a: a["y"].clone().fill_(10)), "class outside"),
    (dict(clients=lambda a: a["clients"] + 1), "clients\\[11\\] = 12 is out of range"),
    (dict(steps=lambda a: -a["steps"]), "steps\\[0\\] must be >= 0"),
    (dict(offsets=lambda a: a["offsets"].flip(0)), "offsets must start at 0"),
    (dict(params=lambda a: torch.zeros(12, 200 * 65)), "params must have shape"),
    (dict(lr=lambda a: 0.0), "lr must be finite and > 0"),
])
def test_bad_arguments_are_named(change, message):
    args = _args(_cohort(10, 6))
    for name, make in change.items():
        args[name] = make(args)
    with pytest.raises(ValueError, match=message):
        ops.softmax_regression_sgd(**args)


def test_more_than_128_classes_are_refused():
    batch = _cohort(129, 2)
    args = _args(batch, classes=129)
    with pytest.raises(ValueError, match="1 to 128 classes; got 129"):
        ops.softmax_regression_sgd(**args)


@requires_cuda
@pytest.mark.parametrize("classes,features,batch_size,epochs", [
    (10, 60, 32, 1), (2, 13, 5, 3), (128, 3, 64, 2), (62, 784, 50, 1), (10, 9, 100, 2)])
def test_cuda_matches_the_cpu_kernel(classes, features, batch_size, epochs):
    # (62, 784): the model does not fit in shared memory and trains in place; batch 100: a
    # step's rows span several logit chunks.
    batch = _cohort(classes, features, clients=20, seed=classes)
    rows = 40
    rng = np.random.default_rng(features)
    config = LocalTrainingConfig(epochs=epochs, batch_size=batch_size, lr=0.05)
    args = dict(x=batch.x, y=batch.y, offsets=torch.from_numpy(batch.offsets),
                keys=torch.from_numpy(rng.integers(-2**63, 2**63 - 1, size=20, dtype=np.int64)),
                clients=torch.from_numpy(rng.integers(0, 20, size=rows)),
                steps=torch.from_numpy(local_steps(batch.counts, config)[rng.integers(0, 20,
                                                                                       size=rows)]),
                params=torch.randn(rows, features * classes + classes,
                                   generator=torch.Generator().manual_seed(3)) * 0.1,
                batch_size=batch_size, lr=0.05)
    cpu_loss = torch.empty(rows, dtype=torch.float64)
    expected = ops.softmax_regression_sgd(**{**args, "params": args["params"].clone()},
                                          received_loss=cpu_loss)
    on_gpu = {k: (v.cuda() if k in ("x", "y", "keys", "params") else v) for k, v in args.items()}
    gpu_loss = torch.empty(rows, dtype=torch.float64, device="cuda")
    got = ops.softmax_regression_sgd(**on_gpu, received_loss=gpu_loss)
    tol = SOFTMAX_REGRESSION_CUDA
    assert (expected - args["params"]).abs().max() > 1e-3
    torch.testing.assert_close(got.cpu(), expected, rtol=tol["rtol"], atol=tol["atol"])
    np.testing.assert_allclose(gpu_loss.cpu().numpy(), cpu_loss.numpy(), rtol=tol["loss_rtol"])


@requires_cuda
def test_cuda_labels_are_checked_or_leave_rows_untouched():
    batch = _cohort(10, 6)
    args = _args(batch)
    args.update(x=args["x"].cuda(), y=args["y"].cuda().clone(), keys=args["keys"].cuda(),
                params=args["params"].cuda())
    args["y"][int(batch.offsets[3])] = 10
    before = args["params"].clone()
    with pytest.raises(ValueError, match=rf"y\[{int(batch.offsets[3])}\] = 10 is a class outside"):
        ops.softmax_regression_sgd(**args)
    assert torch.equal(args["params"], before)
    loss = torch.zeros(12, dtype=torch.float64, device="cuda")
    ops.softmax_regression_sgd(**args, received_loss=loss, check_labels=False)
    assert torch.equal(args["params"][3], before[3]) and not torch.equal(args["params"], before)
    assert torch.isnan(loss[3]) and torch.isfinite(loss[torch.arange(12) != 3]).all()


@requires_cuda
def test_cuda_host_tables_must_stay_on_the_host():
    args = _args(_cohort(10, 6))
    args.update(x=args["x"].cuda(), y=args["y"].cuda(), keys=args["keys"].cuda(),
                params=args["params"].cuda(), steps=args["steps"].cuda())
    with pytest.raises(ValueError, match="steps is on cuda:0: the host sizes the launch from it"):
        ops.softmax_regression_sgd(**args)


@requires_cuda
def test_cuda_lanes_train_through_the_kernel_only_when_switched_on(monkeypatch):
    d = SyntheticDataset(60, seed=4)
    model = LogisticRegression(d.num_features, d.num_classes)
    config = LocalTrainingConfig(epochs=2, batch_size=16, lr=0.05)
    theta = torch.full((model.num_params,), 0.01)
    lanes = [Lane(theta, np.arange(0, 60, 2)), Lane(theta * 2, np.arange(1, 60, 3))]
    cpu_batch = d.client_data(np.arange(60))
    (cpu_a, _, cpu_loss_a), (cpu_b, _, _) = train_lanes(
        model, cpu_batch, CohortKeys.of(5, np.arange(60)), lanes, config, received_loss=True)
    batch = d.client_data(np.arange(60), device=torch.device("cuda"))
    keys = CohortKeys.of(5, np.arange(60), torch.device("cuda"))
    gpu_lanes = [Lane(lane.global_params.cuda(), lane.clients) for lane in lanes]
    monkeypatch.setenv("FASTFAIR_CUDA_SOFTMAX_REGRESSION", "off")
    assert not trains_by_kernel(model, gpu_lanes[0], batch)
    monkeypatch.setenv("FASTFAIR_CUDA_SOFTMAX_REGRESSION", "on")
    assert trains_by_kernel(model, gpu_lanes[0], batch)
    (gpu_a, _, loss_a), (gpu_b, _, _) = train_lanes(model, batch, keys, gpu_lanes, config,
                                                    received_loss=True)
    tol = SOFTMAX_REGRESSION_CUDA
    torch.testing.assert_close(gpu_a.cpu(), cpu_a, rtol=tol["rtol"], atol=tol["atol"])
    torch.testing.assert_close(gpu_b.cpu(), cpu_b, rtol=tol["rtol"], atol=tol["atol"])
    np.testing.assert_allclose(loss_a, cpu_loss_a, rtol=tol["loss_rtol"])
    monkeypatch.setenv("FASTFAIR_CUDA_SOFTMAX_REGRESSION", "maybe")
    with pytest.raises(ValueError, match="FASTFAIR_CUDA_SOFTMAX_REGRESSION must be 'on' or 'off'"):
        trains_by_kernel(model, gpu_lanes[0], batch)
