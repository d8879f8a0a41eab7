"""Federated data sets with no downloads.

Every data set answers two questions for any set of client ids, in O(number of ids): how many
training samples each client has, and the clients' samples as one ragged batch. Synthetic data is
generated on demand from (seed, client id), so a population of 10^7 clients costs no memory until
a client is sampled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastfair import ops
from fastfair.sim.products import affine
from fastfair.sim.seeding import Stream, keys, numpy_rng, torch_seed, uniform

TRAIN_FRACTION = 0.8


def take_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``t[index]`` for ``t [N, *rest]`` and integer ``index [*shape]``: ``[*shape, *rest]``.
    Through ``index_select`` of the flattened index: the same copy as advanced indexing, which
    on the CPU computes every element's address and runs 2.5x slower on rows of 60 floats."""
    return t.index_select(0, index.reshape(-1)).view(*index.shape, *t.shape[1:])


@dataclass
class ClientBatch:
    """Samples of several clients, concatenated.

    x: ``[N, *sample_shape]``, float32 (feature vectors ``[F]``, images ``[C, H, W]``) or int64
    (token ids ``[T]``); y: ``[N]`` int64 class labels, or ``[N, T]`` for a label per position
    (next-character prediction); offsets: ``[m + 1]`` int64, client k owns rows
    ``offsets[k]:offsets[k + 1]``.
    """

    x: torch.Tensor
    y: torch.Tensor
    offsets: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to(self, device: torch.device) -> "ClientBatch":
        """The batch with ``x`` and ``y`` on ``device`` (offsets stay on the host)."""
        return ClientBatch(self.x.to(device), self.y.to(device), self.offsets)


def concat_batches(batches: Sequence[ClientBatch]) -> ClientBatch:
    """One batch of the clients of ``batches`` (in order): x and y concatenated, offsets
    shifted."""
    counts = np.concatenate([b.counts for b in batches])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return ClientBatch(torch.cat([b.x for b in batches]), torch.cat([b.y for b in batches]),
                       offsets)


class FederatedDataset:
    """Interface of every data set: ``num_clients``, ``num_features`` (the product of
    ``sample_shape``, the shape of one sample), ``num_classes``, ``vocab_size`` (token data: x
    holds ids in ``[0, vocab_size)``; None for float features), ``label_shape`` (``()``, or
    ``(T,)`` for a label per position), ``fixed_data``, ``num_samples(ids)`` and
    ``client_data(ids, split, device)``.

    ``fixed_data``: ``client_data`` returns the same samples for the same ids and split on every
    call (every built-in data set); a data set that draws fresh samples per call (augmentation)
    sets it False, and the simulator then never reuses a cohort's batch."""

    num_clients: int
    num_features: int
    num_classes: int
    sample_shape: Tuple[int, ...]
    vocab_size: Optional[int] = None
    label_shape: Tuple[int, ...] = ()
    fixed_data: bool = True

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
        """Training-sample counts of clients ``ids`` ([m] int64 -> [m] int64)."""
        raise NotImplementedError

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        """The ``split`` ('train' or 'test') samples of clients ``ids``, in the order of ``ids``,
        on ``device`` (default CPU; generated there where the data set can)."""
        raise NotImplementedError

    def groups(self, ids) -> Optional[np.ndarray]:
        """``[m]`` latent group of each client where the data set has groups (None otherwise);
        the report then adds per-group accuracy."""
        return None

    def _check_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_clients):
            bad = int(ids[(ids < 0) | (ids >= self.num_clients)][0])
            raise ValueError(f"client id {bad} is out of range [0, {self.num_clients})")
        return ids


def split_sizes(total: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-client 80/20 train/test sizes; at least one training sample each."""
    train = np.maximum(1, np.floor(TRAIN_FRACTION * total + 0.5).astype(np.int64))
    train = np.minimum(train, total)
    return train, total - train


class SyntheticDataset(FederatedDataset):
    r"""Synthetic(alpha, beta): the multinomial logistic-regression generator of the FedProx/LEAF
    line of work, generated a whole cohort at a time.

    Client k draws :math:`u_k \sim N(0, \alpha^2)`, :math:`B_k \sim N(0, \beta^2)`, a model
    :math:`W_k \sim N(u_k, 1)^{F \times C}`, :math:`b_k \sim N(u_k, 1)^C`, a feature mean
    :math:`v_k \sim N(B_k, 1)^F` and samples :math:`x \sim N(v_k, \Sigma)` with
    :math:`\Sigma_{jj} = j^{-1.2}`, labelled :math:`y = \arg\max(W_k^\top x + b_k)`.
    Sizes follow the power law :math:`n_k = \lfloor e^{4 + 2 z_k} \rfloor + 50`, capped at
    ``max_samples`` (the generator's tail is unbounded; the cap keeps batches dense). With
    ``iid=True`` every client shares one model and ``v_k = 0``, as in Synthetic-IID.

    Everything about client k comes from (seed, k) alone: any subset of clients, in any order and
    any round, sees the same data.
    """

    def __init__(self, num_clients: int, alpha: float = 1.0, beta: float = 1.0, *, seed: int = 0,
                 num_features: int = 60, num_classes: int = 10, max_samples: int = 500,
                 iid: bool = False) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1; got {num_clients}")
        if alpha < 0 or beta < 0:
            raise ValueError(f"alpha and beta must be >= 0; got alpha={alpha}, beta={beta}")
        if max_samples < 51:
            raise ValueError(f"max_samples must be >= 51 (every client has >= 51); got {max_samples}")
        self.num_clients = int(num_clients)
        self.alpha, self.beta, self.seed, self.iid = float(alpha), float(beta), int(seed), iid
        self.num_features, self.num_classes = int(num_features), int(num_classes)
        self.sample_shape = (self.num_features,)
        self.max_samples = int(max_samples)
        self._feature_std = torch.arange(1, num_features + 1, dtype=torch.float64).pow(-0.6).float()
        if iid:
            g = torch.Generator().manual_seed(torch_seed(self.seed, Stream.SYNTHETIC_SHARED_MODEL))
            self._shared_model = (torch.randn(num_features, num_classes, generator=g),
                                  torch.randn(num_classes, generator=g))

    def total_samples(self, ids) -> np.ndarray:
        """Train + test samples of each client ([m] int64)."""
        ids = self._check_ids(ids)
        u1 = uniform(keys(self.seed, Stream.SYNTHETIC_SIZE_A, ids))
        u2 = uniform(keys(self.seed, Stream.SYNTHETIC_SIZE_B, ids))
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)  # Box-Muller
        n = np.floor(np.exp(np.minimum(4.0 + 2.0 * z, 30.0))).astype(np.int64) + 50
        return np.minimum(n, self.max_samples)

    def num_samples(self, ids) -> np.ndarray:
        return split_sizes(self.total_samples(ids))[0]

    def _model(self, ids: np.ndarray, device: torch.device
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(W [m, F, C], b [m, C], v [m, F])`` of clients ``ids``: one keyed normal row each."""
        F, C = self.num_features, self.num_classes
        m = ids.shape[0]
        if self.iid:
            W, b = self._shared_model
            return (W.to(device).expand(m, F, C), b.to(device).expand(m, C),
                    torch.zeros(m, F, device=device))
        width = 2 + F * C + C + F
        z = normals(keys(self.seed, Stream.SYNTHETIC_CLIENT, ids),
                     np.arange(m + 1, dtype=np.int64) * width, device).reshape(m, width)
        u, shift = z[:, :1] * self.alpha, z[:, 1:2] * self.beta
        W = (z[:, 2:2 + F * C] + u).reshape(m, F, C)
        b = z[:, 2 + F * C:2 + F * C + C] + u
        v = z[:, 2 + F * C + C:] + shift
        return W, b, v

    def client_data(self, ids, split: str = "train", device=None) -> ClientBatch:
        """The clients' ``split`` samples, generated for the whole cohort in one vectorised pass
        on ``device`` (default CPU): two calls of :func:`fastfair.ops.normal_segments` keyed by
        the clients' keys (their models; their samples), then one batched labelling."""
        ids = self._check_ids(ids)
        device = torch.device("cpu") if device is None else torch.device(device)
        F = self.num_features
        rows = PrefixSplit(self.total_samples(ids), split)
        W, b, v = self._model(ids, device)
        x = normals(keys(self.seed, Stream.SYNTHETIC_SAMPLES, ids), rows.starts * F,
                     device).reshape(-1, F)
        owner = torch.from_numpy(np.repeat(np.arange(ids.shape[0]), rows.drawn)).to(device)
        x.mul_(self._feature_std.to(device)).add_(take_rows(v, owner))
        return rows.batch(x, label_segments(x, rows.starts, W, b))


class PrefixSplit:
    """Which rows of a generated cohort a split needs, for data sets whose client k's samples
    are the prefix of its own keyed stream, the first ``train[k]`` of its ``totals[k]``
    (:func:`split_sizes`) training and the rest test: the training split (every round's data)
    draws only its own rows, the test split draws them all and keeps the rest.

    ``drawn [m]``: rows to draw per client; ``starts [m + 1]``: their offsets in the drawn
    batch; :meth:`batch` turns the drawn ``x``, ``y`` into the split's :class:`ClientBatch`.
    """

    def __init__(self, totals: np.ndarray, split: str) -> None:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
        self.totals, self.split = totals, split
        self.train, _ = split_sizes(totals)
        self.drawn = self.train if split == "train" else totals
        self.starts = np.concatenate([[0], np.cumsum(self.drawn)]).astype(np.int64)

    def batch(self, x: torch.Tensor, y: torch.Tensor) -> ClientBatch:
        """The split's batch from the drawn rows ``x [sum drawn, ...]``, ``y``."""
        if self.split == "train":
            return ClientBatch(x, y, self.starts)
        position = torch.arange(x.shape[0], device=x.device) - torch.from_numpy(
            np.repeat(self.starts[:-1], self.totals)).to(x.device)
        keep = position >= torch.from_numpy(np.repeat(self.train, self.totals)).to(x.device)
        offsets = np.concatenate([[0], np.cumsum(self.totals - self.train)]).astype(np.int64)
        return ClientBatch(x[keep], y[keep], offsets)


def label_segments(x: torch.Tensor, starts: np.ndarray, W: torch.Tensor, b: torch.Tensor,
                   chunk: int = 64) -> torch.Tensor:
    """``[N]`` labels ``argmax(x_n W_k + b_k)`` of each row n through its client k's model.

    ``x [N, F]`` holds client k's rows at ``starts[k]:starts[k+1]``; ``W [m, F, C]``,
    ``b [m, C]``. Clients are taken in size order, ``chunk`` at a time, each chunk padded to its
    longest client and labelled by one batched matmul, so padding stays small whatever the size
    distribution and no Python runs per client.
    """
    sizes = np.diff(starts)
    y = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
    order = np.argsort(sizes, kind="stable")
    for first in range(0, order.size, chunk):
        part = order[first:first + chunk]
        n = int(sizes[part].max())
        if n == 0:
            continue
        rows = torch.from_numpy(starts[part][:, None] + np.arange(n)[None, :]).to(x.device)
        real = torch.from_numpy(np.arange(n)[None, :] < sizes[part][:, None]).to(x.device)
        rows = torch.where(real, rows, rows[:, :1])           # padding repeats a real row
        idx = torch.from_numpy(part).to(x.device)
        labels = affine(take_rows(x, rows), take_rows(W, idx), take_rows(b, idx)).argmax(2)
        y[rows[real]] = labels[real]
    return y


def normals(client_keys: np.ndarray, offsets: np.ndarray, device: torch.device) -> torch.Tensor:
    """Keyed standard normals ``[offsets[-1]]`` float32 on ``device``: segment i
    (``offsets[i]:offsets[i+1]``) from uint64 key ``client_keys[i]``
    (:func:`fastfair.ops.normal_segments`), so a client's draws do not depend on its cohort."""
    return ops.normal_segments(torch.from_numpy(client_keys.view(np.int64)).to(device),
                               torch.from_numpy(offsets).to(device))


def _concat(xs: List[torch.Tensor], ys: List[torch.Tensor], counts: List[int],
            sample_shape: Tuple[int, ...]) -> ClientBatch:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if not xs:
        return ClientBatch(torch.empty(0, *sample_shape), torch.empty(0, dtype=torch.int64),
                           offsets)
    return ClientBatch(torch.cat(xs).float(), torch.cat(ys).long(), offsets)


class ArrayDataset(FederatedDataset):
    """A user's own per-client arrays.

    ``train[k] = (x_k [n_k, F], y_k [n_k])`` and optionally ``test[k]`` likewise (NumPy or torch;
    labels are integer classes in ``[0, num_classes)``). Without ``test``, each client's arrays
    are split 80/20 in their given order.
    """

    def __init__(self, train: Sequence[Tuple[object, object]],
                 test: Optional[Sequence[Tuple[object, object]]] = None,
                 num_classes: Optional[int] = None) -> None:
        if len(train) == 0:
            raise ValueError("train must hold at least one client's (x, y)")
        if test is not None and len(test) != len(train):
            raise ValueError(f"test has {len(test)} clients but train has {len(train)}")
        pairs = [self._pair(x, y, f"train[{k}]") for k, (x, y) in enumerate(train)]
        if test is None:
            split = [split_sizes(np.array([len(y)]))[0][0] for _, y in pairs]
            test_pairs = [(x[n:], y[n:]) for (x, y), n in zip(pairs, split)]
            pairs = [(x[:n], y[:n]) for (x, y), n in zip(pairs, split)]
        else:
            test_pairs = [self._pair(x, y, f"test[{k}]") for k, (x, y) in enumerate(test)]
        features = {p[0].shape[1] for p in pairs + test_pairs}
        if len(features) != 1:
            raise ValueError(f"every client needs the same number of features; got {sorted(features)}")
        labels = torch.cat([p[1] for p in pairs + test_pairs])
        if labels.numel() and labels.min() < 0:
            raise ValueError("labels must be >= 0")
        self.num_classes = int(num_classes or (int(labels.max()) + 1 if labels.numel() else 1))
        if labels.numel() and labels.max() >= self.num_classes:
            raise ValueError(f"labels must be < num_classes={self.num_classes}")
        self.num_clients = len(pairs)
        self.num_features = features.pop()
        self.sample_shape = (self.num_features,)
        self._data = {"train": pairs, "test": test_pairs}
        self._train_counts = np.array([len(y) for _, y in pairs], dtype=np.int64)

    @staticmethod
    def _pair(x, y, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """Client ``name``'s (``"train[k]"``) arrays as float32 x and int64 y; labels must be
        integers (integer-valued floats are accepted, never rounded or truncated)."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        labels = np.asarray(y)
        if labels.dtype.kind == "f":
            bad = ~np.isfinite(labels) | (labels != np.round(labels))
            if bad.any():
                pos = np.unravel_index(int(np.flatnonzero(bad)[0]), labels.shape)
                raise ValueError(f"{name}: y must hold integer class labels; got "
                                 f"{labels[pos]} at position {pos[0] if len(pos) == 1 else pos}")
        elif labels.dtype.kind not in "biu":
            raise TypeError(f"{name}: y must hold integer class labels; got dtype {labels.dtype}")
        y = torch.as_tensor(labels).long()
        if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise ValueError(f"{name} must be x [n, F] and y [n]; got {tuple(x.shape)} and "
                             f"{tuple(y.shape)}")
        return x, y

    def num_samples(self, ids) -> np.ndarray:
        return self._train_counts[self._check_ids(ids)]

    def client_data(self, ids, split: str = "train", device=None) -> ClientBatch:
        ids = self._check_ids(ids)
        if split not in self._data:
            raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
        pairs = [self._data[split][k] for k in ids.tolist()]
        batch = _concat([p[0] for p in pairs], [p[1] for p in pairs], [len(p[1]) for p in pairs],
                       self.sample_shape)
        return batch if device is None else batch.to(device)


def partition_labels(labels: np.ndarray, num_clients: int, scheme: str, *, seed: int,
                     alpha: float = 0.5, classes_per_client: int = 2,
                     stream: Stream = Stream.DIGITS_PARTITION) -> List[np.ndarray]:
    """Sample indices of each client under a partition ``scheme``, drawn from ``stream``.

    'iid': a random equal split. 'dirichlet': for each class, proportions over clients drawn from
    Dirichlet(alpha) (small alpha: few classes per client). 'pathological': sorted by label and cut
    into ``num_clients * classes_per_client`` shards, ``classes_per_client`` shards per client.
    Every client gets at least two samples.
    """
    n = labels.shape[0]
    if not 1 <= num_clients <= n // 2:
        raise ValueError(f"num_clients must be in [1, {n // 2}] for {n} samples; got {num_clients}")
    rng = numpy_rng(seed, stream)
    if scheme == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(n), num_clients)]
    if scheme == "pathological":
        if classes_per_client < 1:
            raise ValueError(f"classes_per_client must be >= 1; got {classes_per_client}")
        order = np.argsort(labels, kind="stable")
        shards = np.array_split(order, num_clients * classes_per_client)
        pick = rng.permutation(len(shards)).reshape(num_clients, classes_per_client)
        return [np.sort(np.concatenate([shards[s] for s in row])) for row in pick]
    if scheme == "dirichlet":
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0; got {alpha}")
        parts: List[List[int]] = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(share)[:-1] * len(idx)).astype(np.int64)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(chunk.tolist())
        # Clients left with fewer than two samples take them from the largest client.
        for k in range(num_clients):
            while len(parts[k]) < 2:
                donor = max(range(num_clients), key=lambda j: len(parts[j]))
                parts[k].append(parts[donor].pop())
        return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"scheme must be 'iid', 'dirichlet' or 'pathological'; got {scheme!r}")


def digits_dataset(num_clients: int = 50, scheme: str = "dirichlet", *, seed: int = 0,
                   alpha: float = 0.5, classes_per_client: int = 2) -> ArrayDataset:
    """scikit-learn's bundled handwritten digits (1797 samples, 64 features scaled to [0, 1],
    10 classes), split across clients by :func:`partition_labels`, each client 80/20
    train/test in a seeded random order."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    parts = partition_labels(y, num_clients, scheme, seed=seed, alpha=alpha,
                             classes_per_client=classes_per_client)
    rng = numpy_rng(seed, Stream.DIGITS_ORDER)
    shuffled = [rng.permutation(p) for p in parts]
    return ArrayDataset([(x[p], y[p]) for p in shuffled], num_classes=10)
