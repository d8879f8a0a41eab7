"""A data set seen with other groups: :class:`Regrouped` wraps a data set and answers its
clients' groups from a function (a device population's tiers, for one), leaving the data, and
the data set itself, as they are."""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

from fastfair.sim.data.base import ClientBatch, FederatedDataset


class Regrouped(FederatedDataset):
    """``dataset`` whose clients fall into ``num_groups`` groups, ``groups_of(ids) [m]`` the
    group of each of clients ``ids [m]`` (answered per id: nothing K-long is built); every
    other attribute of the interface, and every sample, is ``dataset``'s."""

    def __init__(self, dataset: FederatedDataset, num_groups: int,
                 groups_of: Callable[[np.ndarray], np.ndarray]) -> None:
        self.base, self._groups_of = dataset, groups_of
        self.num_clients, self.num_features = dataset.num_clients, dataset.num_features
        self.num_classes, self.sample_shape = dataset.num_classes, dataset.sample_shape
        self.vocab_size, self.label_shape = dataset.vocab_size, dataset.label_shape
        self.num_groups, self.group_ids = int(num_groups), None

    @property
    def fixed_data(self) -> bool:  # type: ignore[override]  # the wrapped set's, read-only
        """The wrapped data set's."""
        return self.base.fixed_data

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
        return self.base.num_samples(ids)

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        return self.base.client_data(ids, split, device)

    def groups(self, ids: np.ndarray) -> Optional[np.ndarray]:
        return self._groups_of(self._check_ids(ids))
