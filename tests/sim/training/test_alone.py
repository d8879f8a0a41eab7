"""Alone training (each copy as the plain module, the cohort's clients on the process's threads):
the same bits for any thread count and in any company, the objectives of the rules, and the
choice between alone and batched training."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fastfair.aggregators.objectives import CVaRObjective, ProximalObjective
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.models.zoo import two_conv_cnn
from fastfair.sim.process import torch_threads
from fastfair.sim.seeding import CohortKeys
from fastfair.sim.training.lanes import Lane
from fastfair.sim.training.local import train_clients, train_lanes
from fastfair.sim.training.schedule import LocalTrainingConfig
from tests.helpers.cohorts import image_cohort


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * 3 * 3, 16),
                         nn.ReLU(), nn.Linear(16, 3))


CONFIG = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1)


def test_a_client_gets_the_same_bits_on_any_threads_and_in_any_company():
    counts = [7, 3, 12, 5, 9]
    batch, ids = image_cohort(counts), np.array([4, 9, 1, 30, 2])
    model = ModuleModel(_net(), cohort="alone")
    theta = model.init(torch.Generator().manual_seed(2))
    runs = []
    for threads in (1, 2, 3):
        with torch_threads(threads):
            runs.append(train_clients(model, theta, batch, CONFIG, ids, seed=5)[0])
            assert torch.get_num_threads() == threads  # restored after training
    assert all(torch.equal(runs[0], other) for other in runs[1:])
    rows = slice(batch.offsets[2], batch.offsets[3])
    alone = SimpleNamespace(x=batch.x[rows], y=batch.y[rows], offsets=np.array([0, 12]),
                            counts=np.array([12]))
    with torch_threads(2):
        one, _ = train_clients(model, theta, alone, CONFIG, ids[2:3], seed=5)
    assert torch.equal(one[0], runs[0][2])
    # Batched training takes the same steps (its rounding differs).
    batched, _ = train_clients(ModuleModel(_net(), cohort="vmap"), theta, batch, CONFIG, ids,
                               seed=5)
    torch.testing.assert_close(batched, runs[0], rtol=1e-4, atol=1e-5)
    assert runs[0].abs().sum() > 0


def test_rule_objectives_and_their_scalars_train_alone_as_batched():
    counts = [7, 3, 12, 5]
    batch = image_cohort(counts, seed=1)
    keys = CohortKeys.of(9, np.array([3, 77, 500, 999]), torch.device("cpu"))
    g = torch.Generator().manual_seed(4)
    results = []
    for cohort in ("alone", "vmap"):
        model = ModuleModel(_net(), cohort=cohort)
        theta = [model.init(None) + 0.01 * torch.randn(model.num_params, generator=g)
                 for _ in range(3)]
        lanes = [Lane(theta[0], np.array([0, 1, 3])),
                 Lane(theta[1], np.array([1, 2, 3]), ProximalObjective(0.3)),
                 Lane(theta[2], np.array([0, 2, 3]),
                      CVaRObjective(0.2, 0.1, 1.5, lr_threshold=0.05))]
        g = torch.Generator().manual_seed(4)  # the same starts for both
        with torch_threads(2):
            results.append(train_lanes(model, batch, keys, lanes, CONFIG))
    for (u_alone, s_alone), (u_vmap, s_vmap) in zip(*results):
        torch.testing.assert_close(u_alone, u_vmap, rtol=1e-4, atol=1e-5)
        assert (s_alone is None) == (s_vmap is None)
        if s_alone is not None:
            torch.testing.assert_close(s_alone, s_vmap, rtol=1e-6, atol=1e-8)
    threshold = results[0][2][1]  # Fed-CVaR's, trained from 1.5
    assert threshold is not None and not torch.equal(threshold, torch.full_like(threshold, 1.5))


def test_large_models_train_alone_on_the_cpu_and_small_ones_batched():
    big = ModuleModel(two_conv_cnn((1, 28, 28), 10, 512, "cnn"))   # 1.66M parameters
    small = ModuleModel(_net())
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert big.trains_alone(cpu) and not big.trains_alone(cuda)
    assert not small.trains_alone(cpu) and ModuleModel(_net(), cohort="alone").trains_alone(cpu)
    assert not ModuleModel(two_conv_cnn((1, 28, 28), 10, 512, "c"), cohort="vmap") \
        .trains_alone(cpu)
    with pytest.raises(ValueError, match="cohort must be one of 'auto', 'vmap', 'alone'"):
        ModuleModel(_net(), cohort="threads")


def test_a_random_operation_other_than_dropout_is_refused_alone():
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(36, 3)

        def forward(self, x):
            return self.lin(x.flatten(1) + torch.randn_like(x.flatten(1)))

    model = ModuleModel(Noisy(), cohort="alone")
    with pytest.raises(ValueError, match="random operation other than dropout"):
        train_clients(model, model.init(None), image_cohort([5, 4]), CONFIG, np.arange(2), seed=1)


def test_a_model_that_has_trained_alone_pickles_and_copies():
    import copy
    import pickle

    model = ModuleModel(_net(), cohort="alone")
    theta = model.init(None)
    batch = image_cohort([5, 4])
    first, _ = train_clients(model, theta, batch, CONFIG, np.arange(2), seed=1)
    for other in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        again, _ = train_clients(other, theta, batch, CONFIG, np.arange(2), seed=1)
        assert torch.equal(first, again)


def test_a_clients_parameters_train_64_byte_aligned_and_return_to_its_row():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(81, 8), nn.Flatten(), nn.Linear(8 * 3, 5),
                        nn.BatchNorm1d(5))  # the Linear's weight lies 648 floats into the row
    model = ModuleModel(net, cohort="alone")
    row = model.init(None).clone()
    tokens = torch.randint(0, 81, (4, 3))
    with model.client_module(row) as (module, leaves):
        assert all(leaf.data_ptr() % 64 == 0 for leaf in leaves)
        module(tokens)  # batch norm updates its running statistics
        with torch.no_grad():
            for leaf in leaves:
                leaf.add_(1.0)
    expected = model.init(None) + torch.cat([torch.ones(sum(l.numel() for l in leaves)),
                                             torch.zeros(model.num_buffers)])
    width = row.numel() - model.num_buffers
    assert torch.equal(row[:width], expected[:width])
    assert not torch.equal(row[width:], expected[width:])  # running statistics written back


def test_updates_summed_as_clients_finish_are_the_held_updates_folded_in_hand_out_order():
    """``summed_with`` returns the bits of the held updates folded in the order the clients are
    handed out (longest first), on any thread count, holding one update at a time on one
    thread."""
    from fastfair.sim.training import alone
    from fastfair.sim.training.schedule import longest_first

    counts = [7, 3, 12, 5, 9, 12]
    batch, ids = image_cohort(counts), np.arange(6)
    model = ModuleModel(_net(), cohort="alone")
    theta = model.init(torch.Generator().manual_seed(2))
    keys = CohortKeys.of(5, ids, theta.device)
    w = np.array([0.1, -0.3, 0.25, 0.0, 0.5, 0.45])
    held = train_lanes(model, batch, keys, [Lane(theta, ids)], CONFIG)[0][0]
    want = alone.fold_in_order(held, w, longest_first(batch.counts, CONFIG))
    torch.testing.assert_close(want, (torch.from_numpy(w).float()[:, None] * held).sum(0),
                               rtol=1e-5, atol=1e-7)
    waiting = []
    put = alone.OrderedFold.put

    def counted(self, i, update):
        put(self, i, update)
        waiting.append(len(self._waiting))

    for threads in (1, 3):
        with torch_threads(threads), pytest.MonkeyPatch.context() as patch:
            patch.setattr(alone.OrderedFold, "put", counted)
            got = train_lanes(model, batch, keys, [Lane(theta, ids)], CONFIG, summed_with=w)
        assert got[0][1] is None and torch.equal(got[0][0], want), threads
        if threads == 1:
            assert max(waiting) == 0  # every update was folded as soon as it arrived
    with pytest.raises(ValueError, match="summed_with needs one lane"):
        train_lanes(ModuleModel(_net(), cohort="vmap"), batch, keys, [Lane(theta, ids)], CONFIG,
                    summed_with=w)
    with pytest.raises(ValueError, match="trains no scalar"):
        cvar = CVaRObjective(0.2, 0.1, 1.5, lr_threshold=0.05)
        train_lanes(model, batch, keys, [Lane(theta, ids, cvar)], CONFIG, summed_with=w)


def test_an_ordered_fold_waits_for_the_rows_before_and_refuses_an_unfinished_sum():
    from fastfair.sim.training.alone import OrderedFold

    rows = torch.randn(4, 5)
    w = np.array([0.5, 2.0, -1.0, 3.0])
    fold = OrderedFold(w)
    for i in (2, 3, 1):
        fold.put(i, rows[i])
    with pytest.raises(RuntimeError, match="0 of 4 rows folded"):
        _ = fold.result
    fold.put(0, rows[0])
    in_order = OrderedFold(w)
    for i in range(4):
        in_order.put(i, rows[i])
    assert torch.equal(fold.result, in_order.result)


def test_a_module_whose_calls_need_no_cohort_mode_trains_without_it_to_the_same_bits():
    """A pass whose module calls no dropout, batch norm, convolution or max pooling lets the
    next passes skip the cohort mode's dispatch: the same bits as under it. A module with
    dropout keeps the mode; one that calls dropout only on a later pass is refused."""
    counts = [7, 3, 12]
    batch, ids = image_cohort(counts), np.arange(3)

    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Flatten(), nn.Linear(36, 16), nn.ReLU(), nn.Linear(16, 3))

    plain = ModuleModel(mlp(), cohort="alone")
    theta = plain.init(torch.Generator().manual_seed(2))
    fresh = train_clients(plain, theta, batch, CONFIG, ids, seed=5)[0]
    assert plain._alone_needs_no_mode
    assert torch.equal(train_clients(plain, theta, batch, CONFIG, ids, seed=5)[0], fresh)
    held = ModuleModel(mlp(), cohort="alone")
    held.saw_pass = lambda mode: None  # always under the mode
    assert torch.equal(train_clients(held, theta, batch, CONFIG, ids, seed=5)[0], fresh)

    dropout = ModuleModel(_net(), cohort="alone")
    train_clients(dropout, dropout.init(torch.Generator().manual_seed(2)), batch, CONFIG, ids,
                  seed=5)
    assert not dropout._alone_needs_no_mode

    class LateDropout(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.passes = mlp(), 0

        def forward(self, x):
            self.passes += 1
            out = self.body(x)
            return nn.functional.dropout(out, 0.5) if self.passes > 1 else out

    late = ModuleModel(LateDropout(), cohort="alone")
    with pytest.raises(ValueError, match="random operation other than dropout"):
        train_clients(late, late.init(torch.Generator().manual_seed(2)), batch, CONFIG, ids,
                      seed=5)
