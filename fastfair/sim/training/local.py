"""Batched local training of a whole cohort of clients at once: the compiled kernel for logistic
regression, autograd over the flat model for everything else."""

from __future__ import annotations

import functools
import os
from typing import Any, List, Optional, Sequence, Tuple, cast

import numpy as np
import torch

from fastfair import build_info, ops
from fastfair.aggregators.objectives import ClientObjective
from fastfair.sim.data.base import ClientBatch, take_rows
from fastfair.sim.models.flat import FlatModel, TrainingStep
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.process import one_thread_each
from fastfair.sim.seeding import CohortKeys, advance_keys
from fastfair.sim.training.alone import OrderedFold, train_alone
from fastfair.sim.training.lanes import Lane, LaneObjectives
from fastfair.sim.training.precision import autocast
from fastfair.sim.training.schedule import (
    LocalTrainingConfig,
    keyed_schedule,
    local_steps,
    longest_first,
    masked_mean,
)


def train_clients(model: FlatModel, global_params: torch.Tensor, batch: ClientBatch,
                  config: LocalTrainingConfig, client_ids: np.ndarray, seed: int,
                  objective: Optional[ClientObjective] = None
                  ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    r"""Trains one copy of ``global_params [P]`` per client of ``batch``.

    Returns the updates :math:`\Delta_k = \theta - \theta_k` as ``[m, P]`` float32 (the
    pseudo-gradients the server step subtracts) and the final ``[m]`` float64 values of the
    scalar the objective trains beside the model (None unless it trains one; see
    :mod:`fastfair.aggregators.objectives`). ``client_ids [m]`` and ``seed`` key the shuffles
    (see :func:`.minibatch_schedule`) and each step's dropout masks (see
    :func:`fastfair.sim.seeding.step_keys`). All m clients step together on those minibatches:
    one backward pass over :math:`\sum_k \mathrm{objective}_k` of each client's masked mean loss
    gives every client its own gradient, and ``theta_k <- theta_k - lr * grad_k`` for the
    clients still training (the scalar steps with ``objective.state_lr(lr)``). The model's
    buffers (running statistics) take no gradient step: they leave training as its forward
    passes left them. One lane of :func:`train_lanes`.
    """
    ids = np.asarray(client_ids, dtype=np.int64)
    keys = CohortKeys.of(seed, ids, global_params.device)
    lane = Lane(global_params, np.arange(len(ids)), objective)
    return train_lanes(model, batch, keys, [lane], config)[0]


def train_lanes(model: FlatModel, batch: ClientBatch, keys: CohortKeys, lanes: Sequence[Lane],
                config: LocalTrainingConfig, chunk: Optional[int] = None,
                received_loss: bool = False, summed_with: Optional[np.ndarray] = None
                ) -> List[Tuple[Any, ...]]:
    r"""Local training of several runs' cohorts as one program: lane r trains a copy of its
    ``global_params [P]`` for each of its batch clients, on the objective of its rule, exactly
    as :func:`train_clients` trains one cohort; the :math:`M = \sum_r m_r` copies step together
    (one forward and one backward pass per step), ``chunk`` copies at a time (default
    :meth:`~fastfair.sim.models.flat.FlatModel.rows_per_pass`), so R runs cost one run's Python and
    kernel launches. ``keys`` are the batch clients' shuffle and dropout keys (a client of a run
    trains on (run seed, round, client id) alone, in any company, so the chunks do not change
    its numbers).

    Forward passes run in ``config.precision`` (:mod:`fastfair.sim.training.precision`).
    Lanes that minimise the plain mean loss of a
    :class:`~fastfair.sim.models.flat.LogisticRegression` on CPU data in fp32 (on a CUDA device
    too where :func:`cuda_kernel_enabled`) train through
    :func:`fastfair.ops.softmax_regression_sgd` (the same steps on the same minibatches, each client
    in the caches from its first step to its last, in the kernel's float32 rounding); the rest
    through autograd as described.

    Returns per lane ``(updates [m_r, P] float32, state [m_r] float64 or None)``, as
    :func:`train_clients` does; with ``received_loss`` a third entry, the ``[m_r]`` float64
    mean loss of the received model on each client's rows for lanes of the kernel (which
    computes it on the way, :func:`trains_by_kernel`), None for the others.

    ``summed_with [m]`` (float64; one lane without a trained scalar, on a model that
    :meth:`~fastfair.sim.models.flat.FlatModel.trains_alone`) returns in place of the updates
    their weighted sum :math:`\sum_k w_k \Delta_k` ``[P]`` float32, folded as the clients finish
    (:class:`~fastfair.sim.training.alone.OrderedFold`): a round then holds one update rather
    than m.
    """
    if (batch.counts < 1).any():
        raise ValueError("every trained client needs at least one training sample")
    # The kernel computes in float32: other precisions train through autograd and autocast.
    by_kernel = [config.precision == "fp32" and trains_by_kernel(model, lane, batch)
                 for lane in lanes]
    out: List[Tuple[Any, ...]] = [()] * len(lanes)
    rest = [r for r, k in enumerate(by_kernel) if not k]
    if summed_with is not None and (len(lanes) != 1 or not rest
                                    or not model.trains_alone(lanes[0].global_params.device)):
        raise ValueError("summed_with needs one lane of a model that trains each client alone")
    if rest:
        trained = _train_by_autograd(model, batch, keys, [lanes[r] for r in rest], config, chunk,
                                     summed_with)
        for r, result in zip(rest, trained):
            out[r] = result + ((None,) if received_loss else ())
    mine = [r for r, k in enumerate(by_kernel) if k]
    if mine:
        by_kernel_out = _train_softmax_regression(batch, keys, [lanes[r] for r in mine], config,
                                                  received_loss)
        for r, (updates, loss) in zip(mine, by_kernel_out):
            out[r] = (updates, None) + ((loss,) if received_loss else ())
    return out


def trains_by_kernel(model: FlatModel, lane: Lane, batch: ClientBatch) -> bool:
    """Whether ``lane`` trains through :func:`fastfair.ops.softmax_regression_sgd`: the plain
    mean loss (no client objective) of a :class:`~fastfair.sim.models.flat.LogisticRegression` (the
    class itself) on float32 data with one label per sample and at most 128 classes, on the CPU,
    or on a CUDA device where :func:`cuda_kernel_enabled` says so."""
    device = lane.global_params.device
    return (model.is_softmax_regression() and lane.objective is None
            and batch.x.device == device
            and (device.type == "cpu" or (device.type == "cuda" and cuda_kernel_enabled()))
            and batch.x.dtype == torch.float32 and batch.y.dim() == 1
            and model.shapes[0][1] <= ops.softmax_regression.MAX_CLASSES)


#: The environment variable that turns the CUDA twin of the logistic-regression kernel on or
#: off for ``--device cuda`` (``on``/``off``; unset: ``CUDA_KERNEL_DEFAULT``).
CUDA_KERNEL_SWITCH = "FASTFAIR_CUDA_SOFTMAX_REGRESSION"
#: The kernel is on by default: it matched the CPU kernel on an H200
#: (tests/ops/test_softmax_regression.py) and halves the default job's time there against
#: autograd (docs/benchmarks.md).
CUDA_KERNEL_DEFAULT = "on"


def cuda_kernel_enabled() -> bool:
    """Whether lanes on a CUDA device train logistic regression through the CUDA kernel:
    ``FASTFAIR_CUDA_SOFTMAX_REGRESSION`` (``on`` or ``off``, default ``CUDA_KERNEL_DEFAULT``)
    and a build with CUDA. Raises ValueError naming the variable for any other value."""
    value = os.environ.get(CUDA_KERNEL_SWITCH, CUDA_KERNEL_DEFAULT).strip().lower()
    if value not in ("on", "off"):
        raise ValueError(f"{CUDA_KERNEL_SWITCH} must be 'on' or 'off'; got {value!r}")
    return value == "on" and _core_has_cuda()


@functools.lru_cache(maxsize=1)
def _core_has_cuda() -> bool:
    """Whether the compiled core was built with CUDA, asked once per process: ``build_info``
    also counts the GPUs, a driver call this check would otherwise make per lane and round."""
    return bool(build_info()["cuda"])


def _train_softmax_regression(batch: ClientBatch, keys: CohortKeys, lanes: Sequence[Lane],
                              config: LocalTrainingConfig, received_loss: bool
                              ) -> List[Tuple[torch.Tensor, Optional[np.ndarray]]]:
    """Each lane's updates ``[m_r, P]`` and, with ``received_loss``, its received models'
    losses ``[m_r]`` (else None) from one kernel call over all the lanes' clients."""
    sizes = [len(lane.clients) for lane in lanes]
    clients = np.concatenate([np.asarray(lane.clients, dtype=np.int64) for lane in lanes])
    received = torch.cat([lane.global_params.detach().reshape(1, -1).float().expand(m_r, -1)
                          for lane, m_r in zip(lanes, sizes)])
    params = received.clone()
    steps = local_steps(batch.counts, config)[clients]
    losses = (torch.empty(len(clients), dtype=torch.float64, device=params.device)
              if received_loss else None)
    # The labels were checked against the classes when the data set was made.
    ops.softmax_regression_sgd(batch.x.flatten(1).contiguous(), batch.y,
                               np.ascontiguousarray(batch.offsets, dtype=np.int64),
                               keys.shuffle, clients, steps, params, batch_size=config.batch_size,
                               lr=config.lr, received_loss=losses, check_labels=False)
    updates = params.neg_().add_(received).split(sizes)
    if losses is None:
        return [(u, None) for u in updates]
    # The round's one copy back from the device: the received models' losses.
    return list(zip(updates, np.split(losses.cpu().numpy(), np.cumsum(sizes)[:-1])))


def _train_by_autograd(model: FlatModel, batch: ClientBatch, keys: CohortKeys,
                       lanes: Sequence[Lane], config: LocalTrainingConfig,
                       chunk: Optional[int] = None, summed_with: Optional[np.ndarray] = None
                       ) -> List[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """:func:`train_lanes` through autograd: every row's steps as batched torch programs,
    ``chunk`` rows at a time (on the CPU the chunks concurrently on the process's threads, one
    thread each), or each row alone as the plain module where the model trains so
    (:meth:`~fastfair.sim.models.flat.FlatModel.trains_alone`; ``chunk`` then changes
    nothing; ``summed_with``: see :func:`train_lanes`)."""
    counts = batch.counts.astype(np.int64)
    sizes = [len(lane.clients) for lane in lanes]
    row_client = np.concatenate([np.asarray(lane.clients, dtype=np.int64) for lane in lanes])
    row_lane = np.repeat(np.arange(len(lanes)), sizes)
    # Rows in longest-first order: the rows still training are always a prefix (of every
    # chunk too), trained as views of it, so finished clients cost nothing.
    order = longest_first(counts[row_client], config)
    sorted_client, sorted_lane = row_client[order], row_lane[order]
    device = lanes[0].global_params.device
    starts = torch.stack([lane.global_params.detach().reshape(-1) for lane in lanes])
    stateful = [lane.trains_scalar for lane in lanes]
    position = torch.as_tensor(order, device=device)
    extra = torch.zeros(len(order), dtype=torch.float64, device=device) if any(stateful) \
        else None
    if summed_with is not None:
        if extra is not None:
            raise ValueError("summed_with needs a lane whose objective trains no scalar")
        fold = OrderedFold(np.asarray(summed_with, dtype=np.float64)[order])
        train_alone(cast(ModuleModel, model), batch, keys, lanes, config, sorted_client,
                    sorted_lane, order, starts, None, None, fold)
        return [(fold.result, None)]
    updates = torch.empty(len(order), starts.shape[1], dtype=torch.float32, device=device)
    if model.trains_alone(device):
        train_alone(cast(ModuleModel, model), batch, keys, lanes, config, sorted_client,
                    sorted_lane, order, starts, updates, extra)
    else:
        width = chunk or model.rows_per_pass(device) or len(order)

        def train(first: int) -> None:
            rows = slice(first, first + width)
            received = starts[0].expand(len(order[rows]), -1) if len(lanes) == 1 else \
                starts[torch.as_tensor(sorted_lane[rows], device=device)]
            params = received.clone()
            state = _train_chunk(model, batch, keys, lanes, config, sorted_client[rows],
                                 sorted_lane[rows], starts, params)
            # The chunk's updates start - params, formed in place (negation is exact: the bits
            # of the subtraction) and written to their rows in lane order while still in the
            # caches.
            updates.index_copy_(0, position[rows], params.neg_().add_(received))
            if extra is not None:
                assert state is not None  # a lane trains a scalar: every chunk returns the rows'
                extra.index_copy_(0, position[rows], state)

        firsts = range(0, len(order), width)
        # On the CPU the chunks train concurrently, one thread each: the same bits on any
        # thread count (the chunks do not depend on it).
        if device.type == "cpu":
            one_thread_each(train, firsts)
        else:
            for first in firsts:
                train(first)
    out, first = [], 0
    for r, m_r in enumerate(sizes):
        rows = slice(first, first + m_r)
        out.append((updates[rows], extra[rows] if stateful[r] and extra is not None else None))
        first += m_r
    return out


def _train_chunk(model: FlatModel, batch: ClientBatch, keys: CohortKeys, lanes: Sequence[Lane],
                 config: LocalTrainingConfig, clients: np.ndarray, lane_of: np.ndarray,
                 starts: torch.Tensor, params: torch.Tensor) -> Optional[torch.Tensor]:
    """Trains rows ``params [c, P]`` in place (batch clients ``clients [c]`` of lanes
    ``lane_of [c]``, longest first) through all their local steps; returns the rows' final
    trained scalars ``[c]`` (None when no lane trains one)."""
    device = params.device
    objectives = LaneObjectives(lanes, lane_of, starts, config.lr, device)
    extra = objectives.initial_state()
    buffers = model.split_buffers(params)
    dropout = keys.dropout[clients]
    no_keys = torch.zeros(len(clients), dtype=torch.int64, device=device)
    schedule = keyed_schedule(batch.counts.astype(np.int64), config, keys.shuffle, clients, device)
    pieced = model.trains_by_pieces
    for t, (take, valid) in enumerate(schedule):
        a = take.shape[0]
        step_key = torch.from_numpy(advance_keys(dropout[:a], t)).to(device) if model.random \
            else no_keys[:a]
        step = TrainingStep(valid, step_key, buffers[:a])
        x = take_rows(batch.x, take)
        if pieced:
            # Leaves per parameter tensor: their gradients arrive as they are, not gathered into
            # one flat row per client (a copy of every parameter every step).
            views = model.trained_pieces(params[:a])
            trained = [v.detach().requires_grad_(True) for v in views]
            with autocast(config.precision, device):
                logits = model.forward_pieces(trained, x, step)
            flat = _flat(trained, params[:a]) if objectives.groups else params[:a]
        else:
            views = [params[:a]]
            trained = [params[:a].detach().requires_grad_(True)]
            with autocast(config.precision, device):
                logits = model.forward(trained[0], x, step)
            flat = trained[0]
        state = None if extra is None else extra[:a].detach().requires_grad_(True)
        per_sample = model.sample_loss(logits.float(), take_rows(batch.y, take))
        mean = masked_mean(per_sample, valid.to(per_sample.dtype))
        loss = objectives.total(mean, flat, state)
        grads = torch.autograd.grad(loss, trained + ([] if state is None else [state]))
        with torch.no_grad():
            for view, grad in zip(views, grads):
                view.sub_(grad, alpha=config.lr)
            if extra is not None:
                extra[:a] -= objectives.state_lr[:a] * grads[-1]
    if model.num_buffers:
        params[:, params.shape[1] - model.num_buffers:] = buffers
    return extra


def _flat(pieces: Sequence[torch.Tensor], params: torch.Tensor) -> torch.Tensor:
    """``[a, P]``: the trained ``pieces`` side by side, then the rest of ``params [a, P]`` (the
    buffers, no gradient), for objectives that read a client's whole parameter row."""
    a = params.shape[0]
    width = sum(p[0].numel() for p in pieces)
    parts = [p.reshape(a, -1) for p in pieces]
    if width < params.shape[1]:
        parts.append(params[:, width:].detach())
    return torch.cat(parts, 1)
