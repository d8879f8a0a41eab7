"""Batched local training and evaluation of a whole cohort of clients at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import numpy as np
import torch

from fastfair.aggregators.objectives import ClientObjective
from fastfair.sim.data import ClientBatch
from fastfair.sim.models import FlatModel, TrainingStep
from fastfair.sim.seeding import shuffle_uniforms, step_keys


@dataclass
class LocalTrainingConfig:
    """Local minibatch SGD: ``epochs`` passes over each client's data (each epoch a fresh
    shuffle, the last batch possibly smaller) or, when ``steps`` is set, exactly that many
    minibatch steps per client (epochs restart as needed). ``lr`` is this round's learning rate."""

    epochs: int = 1
    steps: Optional[int] = None
    batch_size: int = 32
    lr: float = 0.05

    def __post_init__(self) -> None:
        if self.steps is None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1; got {self.epochs}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1; got {self.steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0; got {self.lr}")


def masked_mean(per_sample_loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[m]`` mean loss of each client's real samples: ``per_sample_loss [m, B]`` averaged over
    the rows where ``mask [m, B]`` is 1 (0 for a client with none)."""
    return (per_sample_loss * mask).sum(1) / mask.sum(1).clamp(min=1)


def _segment_ids(counts: np.ndarray) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(counts)), torch.as_tensor(counts))


def evaluate_clients(model: FlatModel, params: torch.Tensor, batch: ClientBatch,
                     chunk: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Loss and accuracy of one model ``params [P]`` on each client's samples, ``chunk`` samples
    per forward pass (default ``model.eval_rows``).

    Returns ``(loss [m], accuracy [m])`` as float64 NumPy arrays: per-client means of the
    model's sample loss and accuracy (cross-entropy and ``argmax == y`` by default, averaged
    over positions for a label per position; NaN for a client with no samples).
    """
    chunk = chunk or model.eval_rows
    counts = batch.counts
    m = len(counts)
    seg = _segment_ids(counts)
    loss_sum = torch.zeros(m, dtype=torch.float64)
    hit_sum = torch.zeros(m, dtype=torch.float64)
    with torch.no_grad():
        p = params.reshape(1, -1)
        for start in range(0, batch.x.shape[0], chunk):
            xs = batch.x[start:start + chunk].unsqueeze(0)
            logits = model.forward(p, xs)
            ys = batch.y[start:start + chunk].unsqueeze(0)
            loss = model.sample_loss(logits, ys)[0]
            segs = seg[start:start + chunk]
            loss_sum.index_add_(0, segs, loss.double())
            hit_sum.index_add_(0, segs, model.sample_hits(logits, ys)[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        n = counts.astype(np.float64)
        return loss_sum.numpy() / n, hit_sum.numpy() / n


def minibatch_schedule(counts: np.ndarray, config: LocalTrainingConfig, client_ids: np.ndarray,
                       seed: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """The minibatches of local training, for all clients at once.

    ``counts [m]`` are the clients' sample counts (rows of client k are
    ``offsets[k]:offsets[k] + counts[k]`` of the concatenated batch). Yields per step
    ``(rows [m, B], valid [m, B])``: the rows each client uses, and which of them are real (a
    client's last batch of an epoch may be short; a client that has finished its own number of
    steps has none). Each epoch of a client is a fresh shuffle of its rows, keyed by
    (seed, client id, epoch) alone, so a client trains identically in any cohort or process.
    """
    counts = np.asarray(counts, dtype=np.int64)
    ids = np.asarray(client_ids, dtype=np.int64)
    if ids.shape != counts.shape:
        raise ValueError(f"client_ids has {ids.size} entries but counts has {counts.size}")
    B = config.batch_size
    offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]))
    n = torch.as_tensor(counts)
    per_epoch = (n + B - 1) // B
    total_steps = torch.full_like(n, config.steps) if config.steps else per_epoch * config.epochs
    seg = _segment_ids(counts)
    rows = torch.arange(seg.numel())
    perm = rows.clone()
    lanes = torch.arange(B)
    for t in range(int(total_steps.max()) if len(counts) else 0):
        active = t < total_steps
        within = t % per_epoch
        restart = active & (within == 0)
        if restart.any():
            chosen = restart[seg]
            r = rows[chosen]
            owner = seg[chosen]
            epoch = (t // per_epoch)[owner]
            u = shuffle_uniforms(seed, ids[owner.numpy()], epoch.numpy(),
                                 (r - offsets[owner]).numpy())
            perm[r] = r[torch.argsort(owner.double() + torch.from_numpy(u))]
        pos = within.unsqueeze(1) * B + lanes  # position inside the client's epoch order
        valid = (pos < n.unsqueeze(1)) & active.unsqueeze(1)
        take = perm[(offsets.unsqueeze(1) + pos).clamp(max=seg.numel() - 1)]
        yield torch.where(valid, take, offsets.unsqueeze(1).expand_as(take)), valid


def train_clients(model: FlatModel, global_params: torch.Tensor, batch: ClientBatch,
                  config: LocalTrainingConfig, client_ids: np.ndarray, seed: int,
                  objective: Optional[ClientObjective] = None
                  ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    r"""Trains one copy of ``global_params [P]`` per client of ``batch``.

    Returns the updates :math:`\Delta_k = \theta - \theta_k` as ``[m, P]`` float32 (the
    pseudo-gradients the server step subtracts) and the final ``[m]`` float64 values of the
    scalar the objective trains beside the model (None unless it trains one; see
    :mod:`fastfair.aggregators.objectives`). ``client_ids [m]`` and ``seed`` key the shuffles
    (see :func:`minibatch_schedule`) and each step's dropout masks (see
    :func:`fastfair.sim.seeding.step_keys`). All m clients step together on those minibatches:
    one backward pass over :math:`\sum_k \mathrm{objective}_k` of each client's masked mean loss
    gives every client its own gradient, and ``theta_k <- theta_k - lr * grad_k`` for the
    clients still training (the scalar steps with ``objective.state_lr(lr)``). The model's
    buffers (running statistics) take no gradient step: they leave training as its forward
    passes left them.
    """
    objective = objective or ClientObjective()
    counts = batch.counts.astype(np.int64)
    m = len(counts)
    if (counts < 1).any():
        raise ValueError("every trained client needs at least one training sample")
    params = global_params.detach().reshape(1, -1).repeat(m, 1).requires_grad_(True)
    start = objective.initial_state()
    extra = None if start is None else torch.full((m,), float(start), dtype=torch.float64)
    extra_lr = objective.state_lr(config.lr)
    trained = [params] if extra is None else [params, extra.requires_grad_(True)]
    buffers = model.split_buffers(params)
    ids = np.asarray(client_ids, dtype=np.int64)
    for t, (take, valid) in enumerate(minibatch_schedule(counts, config, client_ids, seed)):
        keys = torch.from_numpy(step_keys(seed, ids, t)).to(params.device)
        logits = model.forward(params, batch.x[take], TrainingStep(valid, keys, buffers))
        per_sample = model.sample_loss(logits, batch.y[take])
        loss = objective(masked_mean(per_sample, valid.to(per_sample.dtype)), params,
                         global_params, extra).sum()
        grads = torch.autograd.grad(loss, trained)
        active = valid.any(1)
        with torch.no_grad():
            params -= grads[0].mul_(config.lr * active.to(params.dtype).unsqueeze(1))
            if extra is not None:
                extra -= extra_lr * active.to(extra.dtype) * grads[1]
    trained_params = params.detach()
    if model.num_buffers:
        trained_params[:, trained_params.shape[1] - model.num_buffers:] = buffers
    updates = (global_params.reshape(1, -1) - trained_params).float()
    return updates, (None if extra is None else extra.detach())
