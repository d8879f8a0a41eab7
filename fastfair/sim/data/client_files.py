"""Data sets read from disk one client at a time: the sample counts are known when the data set
opens, a client's samples are read when it is sampled, and the latest reads are kept in memory
up to a budget."""

from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, TypeVar

import numpy as np
import torch

from fastfair.sim.data.base import ClientBatch, FederatedDataset, resident_split
from fastfair.sim.seeding import Stream, numpy_rng

SPLITS = ("train", "test")
KINDS = ("image", "float", "tokens")
T = TypeVar("T")


def choose_clients(own: Sequence[T], clients: Optional[int], seed: int, what: str) -> List[T]:
    """The clients of a data set with its own (``own``, e.g. users or files): all when
    ``clients`` is None, else a seeded random subset of that size (``CLIENT_SUBSET`` stream) in
    their order; ``what`` names them in the error for a size out of range."""
    if clients is not None and not 1 <= clients <= len(own):
        raise ValueError(f"clients must be in [1, {len(own)}], the {what}; got {clients}")
    if clients is None or clients == len(own):
        return list(own)
    pick = numpy_rng(seed, Stream.CLIENT_SUBSET).choice(len(own), clients, replace=False)
    return [own[i] for i in np.sort(pick)]


class ClientFiles(FederatedDataset):
    """A data set whose client k's samples of a split come from ``self._read(split, k)``.

    Parameters
    ----------
    counts
        ``{"train": [K], "test": [K]}`` int64 sample counts, known up front.
    sample_shape, num_classes
        The shape of one sample and the number of classes.
    kind
        How stored samples become batch tensors: ``image`` (uint8 scaled to [0, 1], or float
        as stored; float32), ``float`` (float32) or ``tokens`` (int64 ids below ``vocab_size``).
    label_shape
        ``()`` for one class per sample, ``(T,)`` for one per position.
    cache_bytes
        Memory for the latest clients read (least recently used ones are dropped first).
    """

    def __init__(self, counts: Dict[str, np.ndarray], sample_shape: Tuple[int, ...],
                 num_classes: int, *, kind: str, vocab_size: Optional[int] = None,
                 label_shape: Tuple[int, ...] = (), cache_bytes: int = 1 << 30) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
        self._counts = {s: np.asarray(counts[s], dtype=np.int64) for s in SPLITS}
        self.num_clients = int(self._counts["train"].shape[0])
        self.sample_shape = tuple(int(d) for d in sample_shape)
        self.num_features = int(np.prod(self.sample_shape))
        self.num_classes, self.kind = int(num_classes), kind
        self.vocab_size, self.label_shape = vocab_size, tuple(label_shape)
        self.cache_bytes = int(cache_bytes)
        empty = np.flatnonzero(self._counts["train"] <= 0)
        if empty.size:
            k = int(empty[0])
            raise ValueError(f"{self.describe(k)} (client {k}) has no training samples; remove "
                             "it or give it samples")
        self._cache: "OrderedDict[Tuple[str, int], Tuple[np.ndarray, np.ndarray]]" = OrderedDict()
        self._cached_bytes = 0

    def _read(self, split: str, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Client ``k``'s ``(x [n, *sample_shape], y [n, *label_shape])`` of ``split``."""
        raise NotImplementedError

    def describe(self, k: int, split: str = "train") -> str:
        """How error messages name client ``k`` (and the file of its ``split`` data, where
        each client's data are in files of their own)."""
        return f"client {k}"

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
        return self._counts["train"][self._check_ids(ids)]

    def _client(self, split: str, k: int) -> Tuple[np.ndarray, np.ndarray]:
        key = (split, k)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        x, y = self._read(split, k)
        want = int(self._counts[split][k])
        if len(x) != want or len(y) != want or tuple(x.shape[1:]) != self.sample_shape \
                or tuple(y.shape[1:]) != self.label_shape:
            raise ValueError(f"{self.describe(k, split)}: its {split} data hold x "
                             f"{list(x.shape)} and y {list(y.shape)}; the index promises {want} "
                             f"samples of {list(self.sample_shape)} with labels "
                             f"{list(self.label_shape)}")
        size = x.nbytes + y.nbytes
        if size <= self.cache_bytes:
            self._cache[key] = (x, y)
            self._cached_bytes += size
            while self._cached_bytes > self.cache_bytes:
                _, (ox, oy) = self._cache.popitem(last=False)
                self._cached_bytes -= ox.nbytes + oy.nbytes
        return x, y

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(x))
        if self.kind == "tokens":
            return t.long()
        if self.kind == "image" and t.dtype == torch.uint8:
            return t.float().div_(255.0)
        return t.float()

    def _whole(self, split: str) -> Tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """Every client's ``split`` samples as one batch tensor, its labels, and the clients'
        counts."""
        parts = [self._client(split, k) for k in range(self.num_clients)]
        x = self._tensor(np.concatenate([p[0] for p in parts]))
        y = torch.from_numpy(np.concatenate([p[1] for p in parts]).astype(np.int64))
        return x, y, self._counts[split]

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        """The clients' samples, read on the host, then moved to ``device`` (None: the CPU); on
        a GPU gathered from the whole split kept there (:func:`resident_split`)."""
        ids = self._check_ids(ids)
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
        if device is not None and torch.device(device).type != "cpu":
            resident = resident_split(
                self, split, torch.device(device),
                lambda: int(self._counts[split].sum()) * (self.num_features * 4 + 8),
                lambda: self._whole(split))
            if resident is not None:
                return resident.gather(ids)
        parts = [self._client(split, k) for k in ids.tolist()]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(y) for _, y in parts], out=offsets[1:])
        if not parts:
            dtype = torch.int64 if self.kind == "tokens" else torch.float32
            batch = ClientBatch(torch.empty((0,) + self.sample_shape, dtype=dtype),
                                torch.empty((0,) + self.label_shape, dtype=torch.int64), offsets)
        else:
            x = torch.cat([self._tensor(p[0]) for p in parts])
            y = torch.from_numpy(np.concatenate([p[1] for p in parts]).astype(np.int64))
            batch = ClientBatch(x, y, offsets)
        return batch if device is None else batch.to(device)
