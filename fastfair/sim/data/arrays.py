"""Your own arrays as a federated data set (:class:`ArrayDataset`), the label partitions that
split them across clients (:func:`partition_labels`), and scikit-learn's digits split that way."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastfair.sim.data.base import ClientBatch, FederatedDataset, check_finite, split_sizes
from fastfair.sim.seeding import Stream, numpy_rng


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
        for k, (_, y) in enumerate(pairs):
            if len(y) == 0:
                raise ValueError(f"train[{k}] (client {k}) has no training samples; remove it "
                                 "or give it samples")
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
        integers (integer-valued floats are accepted, never rounded or truncated), features
        finite (as float32: 1e39 is inf)."""
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        if x.ndim >= 1 and x.shape[0]:
            check_finite(x.numpy(), name, "x")
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
