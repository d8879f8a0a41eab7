r"""A million-client workload where one global model exists and fairness matters.

Clients fall into G latent groups of power-law sizes (group g holds a share
:math:`\propto (g+1)^{-a}` of the population). Every group labels its data with a shift of one
common linear model,

.. math:: y = \arg\max_c \big(x^\top (W_0 + s\,D_g)\big)_c, \qquad
          x \sim N(\mu_g, I_F), \quad \mu_g \sim N(0, s^2 I_F / 4),

with :math:`W_0, D_g \sim N(0, 1/F)^{F \times C}`. A model fitted to the population serves the
large groups and does worse on the small ones, so the per-group accuracy (reported as
``acc_group<g>`` and ``acc_worst_group``) is what a fair rule should lift. Client k has
:math:`n_k = \min(\lfloor e^{3 + 0.6 z_k}\rfloor + 10, n_{max})` samples (80 % train).

A cohort's data are generated in one vectorised pass on the device of the run
(:func:`fastfair.ops.normal_segments` keyed by each client's key), so a client's samples are a
pure function of (seed, client id) whatever cohort it is drawn in, and no per-client Python runs.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from fastfair.sim.data.base import ClientBatch, FederatedDataset, PrefixSplit, split_sizes
from fastfair.sim.data.synthetic import normals
from fastfair.sim.seeding import Stream, keys, torch_seed, uniform


class GroupedSyntheticDataset(FederatedDataset):
    """Clients in ``num_groups`` latent groups of power-law sizes (see the module docstring).

    Parameters
    ----------
    num_clients
        K.
    num_groups
        G >= 1.
    group_power
        a >= 0: group g holds a share proportional to ``(g + 1) ** -a`` (0: equal groups).
    shift
        s >= 0: how far each group's model and features move from the common ones.
    num_features, num_classes
        F and C.
    max_samples
        Cap on a client's samples (train + test), >= 12.
    seed
        Everything derives from (seed, client id).
    """

    def __init__(self, num_clients: int, *, num_groups: int = 10, group_power: float = 1.5,
                 shift: float = 1.0, num_features: int = 32, num_classes: int = 10,
                 max_samples: int = 500, seed: int = 0) -> None:
        if num_clients < 1 or num_groups < 1 or num_features < 1 or num_classes < 2:
            raise ValueError("num_clients, num_groups, num_features must be >= 1 and "
                             "num_classes >= 2")
        if not (group_power >= 0 and shift >= 0 and max_samples >= 12):
            raise ValueError(f"need group_power >= 0, shift >= 0 and max_samples >= 12; got "
                             f"{group_power}, {shift}, {max_samples}")
        self.num_clients = int(num_clients)
        self.num_groups: int = int(num_groups)  # always groups here (Optional in the base)
        self.num_features, self.num_classes = int(num_features), int(num_classes)
        self.sample_shape = (self.num_features,)
        self.seed, self.max_samples = int(seed), int(max_samples)
        share = np.arange(1, num_groups + 1, dtype=np.float64) ** -float(group_power)
        self.group_cdf = np.cumsum(share / share.sum())
        g = torch.Generator().manual_seed(torch_seed(self.seed, Stream.GROUPED_MODELS))
        F, C, G = self.num_features, self.num_classes, self.num_groups
        common = torch.randn(F, C, generator=g) / math.sqrt(F)
        shifts = torch.randn(G, F, C, generator=g) / math.sqrt(F)
        means = torch.randn(G, F, generator=g) * (0.5 * shift)
        # [F, G * C]: every group's model side by side, one matmul labels a cohort.
        self._models = (common + shift * shifts).permute(1, 0, 2).reshape(F, G * C)
        self._means = means

    def groups(self, ids: np.ndarray) -> np.ndarray:
        """``[m]`` int64 latent group of each client."""
        ids = self._check_ids(ids)
        u = uniform(keys(self.seed, Stream.GROUPED_GROUP, ids))
        return np.minimum(np.searchsorted(self.group_cdf, u, side="right"), self.num_groups - 1)

    def total_samples(self, ids: np.ndarray) -> np.ndarray:
        """``[m]`` train + test samples of each client."""
        ids = self._check_ids(ids)
        u1 = uniform(keys(self.seed, Stream.GROUPED_SIZE_A, ids))
        u2 = uniform(keys(self.seed, Stream.GROUPED_SIZE_B, ids))
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)  # Box-Muller
        return np.minimum(np.floor(np.exp(3.0 + 0.6 * z)).astype(np.int64) + 10, self.max_samples)

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
        return split_sizes(self.total_samples(ids))[0]

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        ids = self._check_ids(ids)
        F, C = self.num_features, self.num_classes
        rows = PrefixSplit(self.total_samples(ids), split)
        dev = torch.device("cpu") if device is None else torch.device(device)
        x = normals(keys(self.seed, Stream.GROUPED_CLIENT, ids), rows.starts * F,
                    dev).reshape(-1, F)
        group_of_row = torch.from_numpy(np.repeat(self.groups(ids), rows.drawn)).to(dev)
        x.add_(self._means.to(dev)[group_of_row])
        logits = (x @ self._models.to(dev)).reshape(-1, self.num_groups, C)
        return rows.batch(x, logits[torch.arange(x.shape[0], device=dev), group_of_row].argmax(1))
