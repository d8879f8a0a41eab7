"""Batched local training and evaluation of a whole cohort of clients at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastfair.aggregators.objectives import ClientObjective
from fastfair.sim.data import ClientBatch, take_rows
from fastfair.sim.models import FlatModel, TrainingStep
from fastfair.sim.seeding import CohortKeys, advance_keys, shuffle_client_keys, shuffle_uniforms


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
                     chunk: Optional[int] = None, accuracy: bool = True
                     ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Loss and accuracy of a model ``params [P]``, or of L models ``params [L, P]``, on each
    client's samples, ``chunk`` samples per forward pass (default ``model.eval_rows``).

    Returns ``(loss, accuracy)`` as float64 NumPy arrays, ``[m]`` for one model and ``[L, m]``
    for L: per-client means of the model's sample loss and accuracy (cross-entropy and
    ``argmax == y`` by default, averaged over positions for a label per position; NaN for a
    client with no samples; accuracy None when ``accuracy`` is False, for a round's losses).
    The L models read the same inputs in one forward pass per chunk.
    Runs on the device of ``params`` and ``batch``; only the results travel to the host.
    """
    chunk = chunk or model.eval_rows
    counts = batch.counts
    m = len(counts)
    device = params.device
    p = params.reshape(-1, params.shape[-1])
    L = p.shape[0]
    seg = _segment_ids(counts, device)
    loss_sum = torch.zeros(L, m, dtype=torch.float64, device=device)
    hit_sum = torch.zeros(L, m, dtype=torch.float64, device=device)
    with torch.no_grad():
        for start in range(0, batch.x.shape[0], chunk):
            xs, ys = batch.x[start:start + chunk], batch.y[start:start + chunk]
            n = xs.shape[0]
            # Whole multiples of 16 rows keep every model's block of outputs 64-byte aligned:
            # BLAS kernels round differently at other alignments, and a run's numbers must not
            # depend on how many models share the pass.
            pad = -n % 16
            if pad:
                xs = torch.cat([xs, xs[:1].expand(pad, *xs.shape[1:])])
                ys = torch.cat([ys, ys[:1].expand(pad, *ys.shape[1:])])
            logits = model.forward(p, xs.unsqueeze(0).expand(L, *xs.shape))
            ys = ys.unsqueeze(0).expand(L, *ys.shape)
            loss = model.sample_loss(logits, ys)[:, :n].double()
            segs = seg[start:start + n]
            loss_sum.index_add_(1, segs, loss)
            if accuracy:
                hit_sum.index_add_(1, segs, model.sample_hits(logits, ys)[:, :n])
    with np.errstate(invalid="ignore", divide="ignore"):
        n = counts.astype(np.float64)
        loss = loss_sum.cpu().numpy() / n
        acc = hit_sum.cpu().numpy() / n if accuracy else None
    if params.dim() == 1:
        return loss[0], None if acc is None else acc[0]
    return loss, acc


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
    ids = np.asarray(client_ids, dtype=np.int64)
    if ids.shape != np.shape(counts):
        raise ValueError(f"client_ids has {ids.size} entries but counts has {np.size(counts)}")
    return keyed_schedule(counts, config, shuffle_client_keys(seed, ids, device), order, device)


def keyed_schedule(counts: np.ndarray, config: LocalTrainingConfig, client_keys: torch.Tensor,
                   order: Optional[np.ndarray] = None, device: Optional[torch.device] = None
                   ) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """:func:`minibatch_schedule` from the clients' ``SHUFFLE`` keys ``client_keys [m]`` (int64,
    :func:`fastfair.sim.seeding.shuffle_client_keys`), so that clients of several seeds share one
    schedule. ``order`` may name a client more than once (several runs training the same
    client); it must list clients by non-increasing :func:`local_steps`, and a step yields its
    prefix of the entries still training."""
    counts = np.asarray(counts, dtype=np.int64)
    B = config.batch_size
    # Minibatches padded to whole multiples of 4 rows (never valid): every client's block of
    # activations then starts 16-byte aligned, and BLAS kernels, which round differently at
    # other alignments, give a client the same numbers in any company (a run in a sweep equals
    # the run alone).
    width = B + (-B % 4)
    offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]), device=device)
    n = torch.as_tensor(counts, device=device)
    per_epoch = (n + B - 1) // B
    host_steps = local_steps(counts, config)
    if order is not None:
        # Steps of the entries in order, negated: non-decreasing, so a searchsorted counts the
        # entries still training at step t. Clients outside order take no step (nor shuffle).
        remaining = -host_steps[np.asarray(order)]
        host_steps = np.where(np.isin(np.arange(len(counts)), order), host_steps, 0)
        order = torch.as_tensor(np.asarray(order), device=device)
    total_steps = torch.as_tensor(host_steps, device=device)
    steps = int(host_steps.max()) if len(counts) else 0
    seg = _segment_ids(counts, device)
    rows = torch.arange(seg.numel(), device=device)
    perm = rows.clone()
    lanes = torch.arange(width, device=device)
    for t in range(steps):
        active = t < total_steps
        within = t % per_epoch
        restart = active & (within == 0)
        if restart.any():
            chosen = restart[seg]
            r = rows[chosen]
            owner = seg[chosen]
            u = shuffle_uniforms(client_keys[owner], (t // per_epoch)[owner], r - offsets[owner])
            # Sorted by client + u through the bit patterns of those positive doubles, which
            # order as the doubles do: an integer sort (radix), 4x faster than a floating one.
            key = (owner.double() + u).view(torch.int64)
            perm[r] = r[torch.sort(key, stable=True).indices]
        pos = within.unsqueeze(1) * B + lanes  # position inside the client's epoch order
        valid = (pos < n.unsqueeze(1)) & active.unsqueeze(1) & (lanes < B)
        take = perm[(offsets.unsqueeze(1) + pos).clamp(max=seg.numel() - 1)]
        take = torch.where(valid, take, offsets.unsqueeze(1).expand_as(take))
        if order is None:
            yield take, valid
        else:
            still = order[:int(np.searchsorted(remaining, -t, side="left"))]
            yield take[still], valid[still]


@dataclass
class Lane:
    """One run's share of a batched training pass (:func:`train_lanes`): its global model
    ``global_params [P]``, the batch clients it trains (``clients [m_r]``, indices into the
    batch) and the objective its rule gives them (None: the plain mean loss)."""

    global_params: torch.Tensor
    clients: np.ndarray
    objective: Optional[ClientObjective] = None


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
    passes left them. One lane of :func:`train_lanes`.
    """
    ids = np.asarray(client_ids, dtype=np.int64)
    keys = CohortKeys.of(seed, ids, global_params.device)
    lane = Lane(global_params, np.arange(len(ids)), objective)
    return train_lanes(model, batch, keys, [lane], config)[0]


def train_lanes(model: FlatModel, batch: ClientBatch, keys: CohortKeys, lanes: Sequence[Lane],
                config: LocalTrainingConfig, chunk: Optional[int] = None
                ) -> List[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
    r"""Local training of several runs' cohorts as one program: lane r trains a copy of its
    ``global_params [P]`` for each of its batch clients, on the objective of its rule, exactly
    as :func:`train_clients` trains one cohort; the :math:`M = \sum_r m_r` copies step together
    (one forward and one backward pass per step), ``chunk`` copies at a time (default
    :meth:`~fastfair.sim.models.FlatModel.rows_per_pass`), so R runs cost one run's Python and
    kernel launches. ``keys`` are the batch clients' shuffle and dropout keys (a client of a run
    trains on (run seed, round, client id) alone, in any company, so the chunks do not change
    its numbers).

    Returns per lane ``(updates [m_r, P] float32, state [m_r] float64 or None)``, as
    :func:`train_clients` does (the updates are views of one ``[M, P]`` tensor).
    """
    counts = batch.counts.astype(np.int64)
    if (counts < 1).any():
        raise ValueError("every trained client needs at least one training sample")
    sizes = [len(lane.clients) for lane in lanes]
    row_client = np.concatenate([np.asarray(lane.clients, dtype=np.int64) for lane in lanes])
    row_lane = np.repeat(np.arange(len(lanes)), sizes)
    # Rows in longest-first order: the rows still training are always a prefix (of every
    # chunk too), trained as views of it, so finished clients cost nothing.
    order = np.argsort(-local_steps(counts, config)[row_client], kind="stable")
    sorted_client, sorted_lane = row_client[order], row_lane[order]
    device = lanes[0].global_params.device
    starts = torch.stack([lane.global_params.detach().reshape(-1) for lane in lanes])
    stateful = [lane.objective is not None and lane.objective.initial_state() is not None
                for lane in lanes]
    position = torch.as_tensor(order, device=device)
    updates = torch.empty(len(order), starts.shape[1], dtype=torch.float32, device=device)
    extra = torch.zeros(len(order), dtype=torch.float64, device=device) if any(stateful) \
        else None
    width = chunk or model.rows_per_pass(device) or len(order)
    for first in range(0, len(order), width):
        rows = slice(first, first + width)
        received = starts[0].expand(len(order[rows]), -1) if len(lanes) == 1 else \
            starts[torch.as_tensor(sorted_lane[rows], device=device)]
        params = received.clone()
        state = _train_chunk(model, batch, keys, lanes, config, sorted_client[rows],
                             sorted_lane[rows], starts, params)
        # The chunk's updates start - params, formed in place (negation is exact: the bits of
        # the subtraction) and written to their rows in lane order while still in the caches.
        updates.index_copy_(0, position[rows], params.neg_().add_(received))
        if extra is not None:
            extra.index_copy_(0, position[rows], state)
    out, first = [], 0
    for r, m_r in enumerate(sizes):
        rows = slice(first, first + m_r)
        out.append((updates[rows], extra[rows] if stateful[r] else None))
        first += m_r
    return out


def _train_chunk(model: FlatModel, batch: ClientBatch, keys: CohortKeys, lanes: Sequence[Lane],
                 config: LocalTrainingConfig, clients: np.ndarray, lane_of: np.ndarray,
                 starts: torch.Tensor, params: torch.Tensor) -> Optional[torch.Tensor]:
    """Trains rows ``params [c, P]`` in place (batch clients ``clients [c]`` of lanes
    ``lane_of [c]``, longest first) through all their local steps; returns the rows' final
    trained scalars ``[c]`` (None when no lane trains one)."""
    device = params.device
    objectives = _LaneObjectives(lanes, lane_of, starts, config.lr, device)
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
            logits = model.forward_pieces(trained, x, step)
            flat = _flat(trained, params[:a]) if objectives.groups else params[:a]
        else:
            views = [params[:a]]
            trained = [params[:a].detach().requires_grad_(True)]
            logits = model.forward(trained[0], x, step)
            flat = trained[0]
        state = None if extra is None else extra[:a].detach().requires_grad_(True)
        per_sample = model.sample_loss(logits, take_rows(batch.y, take))
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


class _LaneObjectives:
    """The lanes' client objectives over the rows of a :func:`train_lanes` pass (sorted order):
    which rows minimise their plain mean loss, which an objective (lanes whose objectives are
    equal, e.g. one rule's seeds, evaluate it in one call), and the scalar each row trains
    beside its model."""

    def __init__(self, lanes: Sequence[Lane], sorted_lane: np.ndarray, starts: torch.Tensor,
                 lr: float, device: torch.device) -> None:
        self.starts = [None if lane.objective is None else lane.objective.initial_state()
                       for lane in lanes]
        groups: Dict[Tuple[Any, ...], List[int]] = {}
        for r, lane in enumerate(lanes):
            if lane.objective is not None:
                key = tuple(sorted(lane.objective.to_config().items()))
                groups.setdefault(key, []).append(r)
        # Per group: its objective, the positions (ascending) of its rows, whose prefix below a
        # is the rows still training, and the received model of each row (one lane: its own).
        self.groups = []
        plain = np.ones(len(sorted_lane))
        for members in groups.values():
            positions = np.flatnonzero(np.isin(sorted_lane, members))
            plain[positions] = 0.0
            index = torch.as_tensor(positions, device=device)
            received = lanes[members[0]].global_params if len(members) == 1 else \
                starts[torch.as_tensor(sorted_lane[positions], device=device)]
            self.groups.append((lanes[members[0]].objective, positions, index, received,
                                self.starts[members[0]] is not None))
        self.whole = len(lanes) == 1  # one lane owns every row: no gathers
        # Plain rows' losses enter as mean * 1 (rows with an objective as mean * 0): exact, so
        # a row's gradient is the same in any company.
        self.plain = torch.as_tensor(plain, device=device) if plain.any() else None
        self.extra = None
        if any(s is not None for s in self.starts):
            start = np.array([self.starts[r] or 0.0 for r in sorted_lane], dtype=np.float64)
            lr_of = [0.0 if lane.objective is None else lane.objective.state_lr(lr)
                     for lane in lanes]
            self.extra = torch.as_tensor(start, device=device)
            self.state_lr = torch.as_tensor(np.array(lr_of, dtype=np.float64)[sorted_lane],
                                            device=device)

    def initial_state(self) -> Optional[torch.Tensor]:
        """``[M]`` float64 start values of the trained scalar (0 on rows without one), or None
        when no lane trains one."""
        return self.extra

    def total(self, mean: torch.Tensor, params: torch.Tensor,
              extra: Optional[torch.Tensor]) -> torch.Tensor:
        r""":math:`\sum` over the a rows still training of each row's objective of its masked
        mean loss ``mean [a]`` (``params [a, P]``, ``extra [a]``)."""
        if not self.groups:
            return mean.sum()
        a = mean.shape[0]
        total = 0.0 if self.plain is None else (mean * self.plain[:a].to(mean.dtype)).sum()
        for objective, positions, index, received, stateful in self.groups:
            if self.whole:
                loss, p, g, s = mean, params, received, extra
            else:
                n = int(np.searchsorted(positions, a))
                rows = index[:n]
                loss, p, s = mean[rows], params[rows], None if extra is None else extra[rows]
                g = received if received.dim() == 1 else received[:n]
            total = total + objective(loss, p, g, s if stateful else None).sum()
        return total
