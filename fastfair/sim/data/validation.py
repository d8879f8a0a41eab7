"""A validation split carved from each client's training data, so that a sweep chooses
hyperparameters without ever looking at the test split."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from fastfair.sim.data.base import ClientBatch, FederatedDataset

SPLITS = ("train", "val", "test")


class ValidationSplit(FederatedDataset):
    r"""``dataset`` with the last :math:`v_k = \lfloor f\, n_k \rfloor` of client k's
    :math:`n_k` training samples held out as its validation split (``client_data(ids, 'val')``):
    ``'train'`` gives the first :math:`n_k - v_k` (never none, as f <= 1/2 and n_k >= 1),
    ``'test'`` is the data set's test split unchanged. A client with :math:`v_k = 0` has no
    validation samples."""

    def __init__(self, dataset: FederatedDataset, fraction: float) -> None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
                or not 0 < fraction <= 0.5:
            raise ValueError(f"validation fraction must be in (0, 0.5]; got {fraction!r}")
        self.base, self.fraction = dataset, float(fraction)
        self.num_clients, self.num_features = dataset.num_clients, dataset.num_features
        self.num_classes, self.sample_shape = dataset.num_classes, dataset.sample_shape
        self.vocab_size, self.label_shape = dataset.vocab_size, dataset.label_shape
        self.num_groups, self.group_ids = dataset.num_groups, dataset.group_ids

    @property
    def fixed_data(self) -> bool:  # type: ignore[override]  # the wrapped set's, read-only
        """The wrapped data set's: a split of fresh samples is fresh too."""
        return self.base.fixed_data

    def held_out(self, counts: np.ndarray) -> np.ndarray:
        """``[m]`` validation samples of clients with ``counts [m]`` training samples."""
        return np.floor(self.fraction * np.asarray(counts, dtype=np.int64)).astype(np.int64)

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
        n = self.base.num_samples(ids)
        return n - self.held_out(n)

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        """The clients' ``split`` samples ('train', 'val' or 'test'), in the order of ``ids``."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
        if split == "test":
            return self.base.client_data(ids, "test", device)
        full = self.base.client_data(ids, "train", device)
        n = full.counts
        v = self.held_out(n)
        keep = n - v if split == "train" else v
        first = full.offsets[:-1] + (0 if split == "train" else n - v)
        offsets = np.concatenate([[0], np.cumsum(keep)]).astype(np.int64)
        rows = np.repeat(first - offsets[:-1], keep) + np.arange(offsets[-1])
        index = torch.from_numpy(rows).to(full.x.device)
        return ClientBatch(full.x[index], full.y[index], offsets)

    def groups(self, ids: np.ndarray) -> Optional[np.ndarray]:
        return self.base.groups(ids)


def with_validation(dataset: FederatedDataset, fraction: float) -> FederatedDataset:
    """``dataset`` with a :class:`~fastfair.sim.data.validation.ValidationSplit` of ``fraction``
    (unchanged for 0, or when it already holds that split)."""
    if not fraction or (isinstance(dataset, ValidationSplit) and dataset.fraction == fraction):
        return dataset
    return ValidationSplit(dataset, fraction)
