"""Batched local training and evaluation of a whole cohort of clients at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import numpy as np
import torch

from fastfair.aggregators.objectives import ClientObjective
from fastfair.sim.data import ClientBatch
from fastfair.sim.models import FlatModel, TrainingStep
from fastfair.sim.seeding import shuffle_client_keys, shuffle_uniforms, step_keys


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


def _segment_ids(counts: np.ndarray, device: Optional[torch.device] = None) -> torch.Tensor:
    counts = torch.as_tensor(counts, device=device)
    return torch.repeat_interleave(torch.arange(len(counts), device=device), counts)


def evaluate_clients(model: FlatModel, params: torch.Tensor, batch: ClientBatch,
                     chunk: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Loss and accuracy of one model ``params [P]`` on each client's samples, ``chunk`` samples
    per forward pass (default ``model.eval_rows``).

    Returns ``(loss [m], accuracy [m])`` as float64 NumPy arrays: per-client means of the
    model's sample loss and accuracy (cross-entropy and ``argmax == y`` by default, averaged
    over positions for a label per position; NaN for a client with no samples). Runs on the
    device of ``params`` and ``batch``; only the ``[m]`` results travel to the host.
    """
    chunk = chunk or model.eval_rows
    counts = batch.counts
    m = len(counts)
    device = params.device
    seg = _segment_ids(counts, device)
    loss_sum = torch.zeros(m, dtype=torch.float64, device=device)
    hit_sum = torch.zeros(m, dtype=torch.float64, device=device)
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
        return loss_sum.cpu().numpy() / n, hit_sum.cpu().numpy() / n


def local_steps(counts: np.ndarray, config: LocalTrainingConfig) -> np.ndarray:
    """``[m]`` minibatch steps each client takes: ``config.steps``, or ``epochs`` times its
    number of batches ``ceil(n_k / B)``."""
    counts = np.asarray(counts, dtype=np.int64)
    if config.steps:
        return np.full(counts.shape, config.steps, dtype=np.int64)
    return -(-counts // config.batch_size) * config.epochs


def longest_first(counts: np.ndarray, config: LocalTrainingConfig) -> np.ndarray:
    """A permutation of the m clients by non-increasing :func:`local_steps` (ties in index
    order): with it, the clients still training at any step are a prefix."""
    return np.argsort(-local_steps(counts, config), kind="stable")


def minibatch_schedule(counts: np.ndarray, config: LocalTrainingConfig, client_ids: np.ndarray,
                       seed: int, order: Optional[np.ndarray] = None,
                       device: Optional[torch.device] = None
                       ) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """The minibatches of local training, for all clients at once.

    ``counts [m]`` are the clients' sample counts (rows of client k are
    ``offsets[k]:offsets[k] + counts[k]`` of the concatenated batch). Yields per step
    ``(rows [m, B], valid [m, B])``: the rows each client uses, and which of them are real (a
    client's last batch of an epoch may be short; a client that has finished its own number of
    steps has none). Each epoch of a client is a fresh shuffle of its rows, keyed by
    (seed, client id, epoch) alone, so a client trains identically in any cohort or process.

    With ``order`` (:func:`longest_first`), a step yields only the a clients still training,
    as rows ``order[:a]``: ``(rows [a, B], valid [a, B])``, so that the arithmetic of a round
    follows the clients' real steps rather than the longest client's. The schedule is built on
    ``device`` (default CPU); only ``[m]`` per-client values come from the host.
    """
    counts = np.asarray(counts, dtype=np.int64)
    ids = np.asarray(client_ids, dtype=np.int64)
    if ids.shape != counts.shape:
        raise ValueError(f"client_ids has {ids.size} entries but counts has {counts.size}")
    B = config.batch_size
    offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]), device=device)
    n = torch.as_tensor(counts, device=device)
    per_epoch = (n + B - 1) // B
    total_steps = torch.as_tensor(local_steps(counts, config), device=device)
    steps = int(total_steps.max()) if len(counts) else 0
    sorted_ids = None if order is None else torch.as_tensor(order, device=device)
    client_keys = shuffle_client_keys(seed, ids, device)
    seg = _segment_ids(counts, device)
    rows = torch.arange(seg.numel(), device=device)
    perm = rows.clone()
    lanes = torch.arange(B, device=device)
    for t in range(steps):
        active = t < total_steps
        within = t % per_epoch
        restart = active & (within == 0)
        if restart.any():
            chosen = restart[seg]
            r = rows[chosen]
            owner = seg[chosen]
            u = shuffle_uniforms(seed, client_keys[owner], (t // per_epoch)[owner],
                                 r - offsets[owner])
            perm[r] = r[torch.argsort(owner.double() + u)]
        pos = within.unsqueeze(1) * B + lanes  # position inside the client's epoch order
        valid = (pos < n.unsqueeze(1)) & active.unsqueeze(1)
        take = perm[(offsets.unsqueeze(1) + pos).clamp(max=seg.numel() - 1)]
        take = torch.where(valid, take, offsets.unsqueeze(1).expand_as(take))
        if sorted_ids is None:
            yield take, valid
        else:
            still = sorted_ids[:int(active.sum())]
            yield take[still], valid[still]


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
    # Rows in longest-first order: the clients still training are always a prefix, trained as
    # views of it, so finished clients cost nothing.
    order = longest_first(counts, config)
    device = global_params.device
    params = global_params.detach().reshape(1, -1).repeat(m, 1)
    start = objective.initial_state()
    extra = None if start is None else torch.full((m,), float(start), dtype=torch.float64,
                                                  device=device)
    extra_lr = objective.state_lr(config.lr)
    buffers = model.split_buffers(params)  # rows in ``order`` like params'
    ids = np.asarray(client_ids, dtype=np.int64)[order]
    schedule = minibatch_schedule(counts, config, client_ids, seed, order, device)
    for t, (take, valid) in enumerate(schedule):
        a = take.shape[0]
        trained = [params[:a].detach().requires_grad_(True)]
        if extra is not None:
            trained.append(extra[:a].detach().requires_grad_(True))
        keys = torch.from_numpy(step_keys(seed, ids[:a], t)).to(device)
        logits = model.forward(trained[0], batch.x[take], TrainingStep(valid, keys, buffers[:a]))
        per_sample = model.sample_loss(logits, batch.y[take])
        loss = objective(masked_mean(per_sample, valid.to(per_sample.dtype)), trained[0],
                         global_params, None if extra is None else trained[1]).sum()
        grads = torch.autograd.grad(loss, trained)
        with torch.no_grad():
            params[:a] -= grads[0].mul_(config.lr)
            if extra is not None:
                extra[:a] -= extra_lr * grads[1]
    if model.num_buffers:
        params[:, params.shape[1] - model.num_buffers:] = buffers
    inverse = torch.as_tensor(np.argsort(order), device=device)
    updates = (global_params.reshape(1, -1) - params[inverse]).float()
    return updates, (None if extra is None else extra[inverse])
