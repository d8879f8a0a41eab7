"""A client's local training, step by step: the settings (:class:`LocalTrainingConfig`), how many
minibatch steps each client takes, and the keyed shuffle that picks every step's rows, the same
for a client in any company."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import numpy as np
import torch

from fastfair.sim.seeding import shuffle_client_keys, shuffle_uniforms
from fastfair.sim.training.settings import PRECISIONS


@dataclass
class LocalTrainingConfig:
    """Local minibatch SGD: ``epochs`` passes over each client's data (each epoch a fresh
    shuffle, the last batch possibly smaller) or, when ``steps`` is set, exactly that many
    minibatch steps per client (epochs restart as needed). ``lr`` is this round's learning rate.
    ``precision`` is the arithmetic of the forward and backward passes (``"fp32"``, or
    ``"bf16"`` / ``"fp16"`` autocast; :mod:`fastfair.sim.training.precision`)."""

    epochs: int = 1
    steps: Optional[int] = None
    batch_size: int = 32
    lr: float = 0.05
    precision: str = "fp32"

    def __post_init__(self) -> None:
        if self.steps is None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1; got {self.epochs}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1; got {self.steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0; got {self.lr}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be 'fp32', 'bf16' or 'fp16'; got "
                             f"{self.precision!r}")


def masked_mean(per_sample_loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[m]`` mean loss of each client's real samples: ``per_sample_loss [m, B]`` averaged over
    the rows where ``mask [m, B]`` is 1 (0 for a client with none)."""
    return (per_sample_loss * mask).sum(1) / mask.sum(1).clamp(min=1)


def segment_ids(counts: np.ndarray, device: Optional[torch.device] = None) -> torch.Tensor:
    """``[sum(counts)]`` int64: each row's client position, ``k`` repeated ``counts[k]`` times."""
    repeats = torch.as_tensor(counts, device=device)
    return torch.repeat_interleave(torch.arange(len(repeats), device=device), repeats)


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
        entries = torch.as_tensor(np.asarray(order), device=device)
    total_steps = torch.as_tensor(host_steps, device=device)
    steps = int(host_steps.max()) if len(counts) else 0
    seg = segment_ids(counts, device)
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
            # order as the doubles do: an integer sort (radix), faster than a floating one.
            key = (owner.double() + u).view(torch.int64)
            perm[r] = r[torch.sort(key, stable=True).indices]
        pos = within.unsqueeze(1) * B + lanes  # position inside the client's epoch order
        valid = (pos < n.unsqueeze(1)) & active.unsqueeze(1) & (lanes < B)
        take = perm[(offsets.unsqueeze(1) + pos).clamp(max=seg.numel() - 1)]
        take = torch.where(valid, take, offsets.unsqueeze(1).expand_as(take))
        if order is None:
            yield take, valid
        else:
            still = entries[:int(np.searchsorted(remaining, -t, side="left"))]
            yield take[still], valid[still]
