"""Local training of a cohort client by client, each copy as the plain module: for models whose
batched form (``vmap`` over ``[m, P]`` rows) is slower on the CPU than the module itself
(:meth:`~fastfair.sim.models.flat.FlatModel.trains_alone`). The cohort's clients train
concurrently, one per thread, as many at a time as the process's torch threads
(``torch.set_num_threads``, ``--threads``, ``Experiment(threads=)``), each client's operations on
one thread; a client's numbers are therefore the same for any thread count and in any company.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastfair.sim.data.base import ClientBatch
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.process import one_thread_each
from fastfair.sim.seeding import CohortKeys, advance_keys
from fastfair.sim.training.lanes import Lane, LaneObjectives
from fastfair.sim.training.precision import autocast
from fastfair.sim.training.schedule import LocalTrainingConfig, keyed_schedule


def train_alone(model: ModuleModel, batch: ClientBatch, keys: CohortKeys, lanes: Sequence[Lane],
                config: LocalTrainingConfig, sorted_client: np.ndarray, sorted_lane: np.ndarray,
                position: np.ndarray, starts: torch.Tensor, updates: torch.Tensor,
                extra: Optional[torch.Tensor]) -> None:
    r"""The updates of the copies of a training pass, each trained alone: copy ``i`` (batch
    client ``sorted_client[i]`` of lane ``sorted_lane[i]``, longest first, as
    :func:`~fastfair.sim.training.local.train_lanes` sorts them) starts from its lane's
    ``starts[sorted_lane[i]] [P]``, trains through all its local steps,
    ``theta <- theta - lr * grad`` on each parameter tensor in place (a view of the copy's
    own row) with the loss its objective of its mean loss over the minibatch's real samples
    only (no padding rows are computed), and leaves
    :math:`\Delta = \theta_{start} - \theta` in row ``position[i]`` of ``updates [M, P]``;
    its trained scalar goes to
    ``extra[position[i]]`` (float64; None when no lane trains one).

    ``min(torch.get_num_threads(), M)`` copies train at a time, each on its own thread, with
    torch's intra-op threads set to one for the duration
    (:func:`~fastfair.sim.process.one_thread_each`), so the arithmetic of a copy never depends
    on the thread count or on the other copies.
    """
    device = updates.device
    schedule = [(take, valid.sum(1)) for take, valid in
                keyed_schedule(batch.counts.astype(np.int64), config, keys.shuffle,
                               sorted_client, device)]
    dropout = keys.dropout[sorted_client]

    def row(i: int) -> None:
        objectives = LaneObjectives(lanes, sorted_lane[i:i + 1], starts, config.lr, device)
        # The copy's row is a tensor of its own: views of the shared updates would share their
        # version counter, and one thread's write could invalidate another's graph.
        start = starts[int(sorted_lane[i])]
        own = start.clone()
        state = _train_row(model, batch, config, schedule, i, dropout[i], objectives, own)
        torch.sub(start, own, out=updates[int(position[i])])
        if extra is not None and state is not None:
            extra[int(position[i])] = state[0]

    one_thread_each(row, range(len(sorted_client)))  # handed out longest first


def _train_row(model: ModuleModel, batch: ClientBatch, config: LocalTrainingConfig,
               schedule: List[Tuple[torch.Tensor, torch.Tensor]], i: int, dropout_key: np.uint64,
               objectives: LaneObjectives, row: torch.Tensor) -> Optional[torch.Tensor]:
    """All the local steps of row ``i`` (``row [P]``, trained in place); returns its final
    trained scalar ``[1]`` (None when no lane trains one)."""
    key = np.array([dropout_key], dtype=np.uint64)
    state = objectives.initial_state()
    with model.client_module(row) as (module, leaves):
        for t, (take, counts) in enumerate(schedule):
            if i >= take.shape[0]:
                break  # rows still training are a prefix: this one has finished
            n = int(counts[i])
            rows = take[i, :n]  # a row's real samples are the first n of its minibatch
            x, y = batch.x.index_select(0, rows), batch.y.index_select(0, rows)
            step_key = torch.from_numpy(advance_keys(key, t))[0] if model.random else None
            with model.client_mode(step_key, n), autocast(config.precision, x.device):
                logits = module(model.input_layout(x))
            mean = model.sample_loss(logits.float().unsqueeze(0), y.unsqueeze(0)).mean(1)
            s = None if state is None else state.detach().requires_grad_(True)
            flat = _flat(leaves, row) if objectives.groups else row  # read by objectives only
            loss = objectives.total(mean, flat.unsqueeze(0), s)
            grads = torch.autograd.grad(loss, leaves + ([] if s is None else [s]))
            with torch.no_grad():
                for leaf, grad in zip(leaves, grads):
                    leaf.sub_(grad, alpha=config.lr)
                if state is not None:
                    state -= objectives.state_lr[:1] * grads[-1]
    return state


def _flat(leaves: Sequence[torch.Tensor], row: torch.Tensor) -> torch.Tensor:
    """``[P]``: the trained ``leaves`` side by side (differentiable), then the rest of ``row``
    (the buffers, no gradient), for objectives that read a client's whole parameter row."""
    parts = [leaf.reshape(-1) for leaf in leaves]
    width = sum(p.numel() for p in parts)
    if width < row.numel():
        parts.append(row[width:].detach())
    return torch.cat(parts)

