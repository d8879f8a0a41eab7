"""Synthetic(alpha, beta) federated data with no downloads: generated on demand from (seed, client
id), so a population of 10^7 clients costs no memory until a client is sampled."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import torch

from fastfair import ops
from fastfair.sim.data.base import (
    ClientBatch,
    FederatedDataset,
    HostBuffer,
    PrefixSplit,
    split_sizes,
)
from fastfair.sim.seeding import Stream, keys, torch_seed, uniform


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
            raise ValueError("max_samples must be >= 51 (every client has >= 51); "
                             f"got {max_samples}")
        self.num_clients = int(num_clients)
        self.alpha, self.beta, self.seed, self.iid = float(alpha), float(beta), int(seed), iid
        self.num_features, self.num_classes = int(num_features), int(num_classes)
        self.sample_shape = (self.num_features,)
        self.max_samples = int(max_samples)
        self._samples = HostBuffer()
        self._feature_std = torch.arange(1, num_features + 1, dtype=torch.float64).pow(-0.6).float()
        if iid:
            g = torch.Generator().manual_seed(torch_seed(self.seed, Stream.SYNTHETIC_SHARED_MODEL))
            self._shared_model = (torch.randn(num_features, num_classes, generator=g),
                                  torch.randn(num_classes, generator=g))

    def total_samples(self, ids: np.ndarray) -> np.ndarray:
        """Train + test samples of each client ([m] int64)."""
        ids = self._check_ids(ids)
        u1 = uniform(keys(self.seed, Stream.SYNTHETIC_SIZE_A, ids))
        u2 = uniform(keys(self.seed, Stream.SYNTHETIC_SIZE_B, ids))
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)  # Box-Muller
        n = np.floor(np.exp(np.minimum(4.0 + 2.0 * z, 30.0))).astype(np.int64) + 50
        return np.minimum(n, self.max_samples)

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
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

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        """The clients' ``split`` samples, generated for the whole cohort in two kernel calls
        on ``device`` (default CPU): :func:`fastfair.ops.normal_segments` keyed by the clients'
        keys (their models, then their samples), then :func:`fastfair.ops.label_segments`,
        which moves each client's rows to its feature mean and labels them through its model in
        one pass (no row gathers); its float64 logits make a label the same bits on any
        device."""
        ids = self._check_ids(ids)
        device = torch.device("cpu") if device is None else torch.device(device)
        F = self.num_features
        rows = PrefixSplit(self.total_samples(ids), split)
        W, b, v = self._model(ids, device)
        n = int(rows.starts[-1]) * F
        x = normals(keys(self.seed, Stream.SYNTHETIC_SAMPLES, ids), rows.starts * F, device,
                    out=self._samples.take(n) if device.type == "cpu" else None).reshape(-1, F)
        y = ops.label_segments(x, torch.from_numpy(rows.starts).to(device), W.contiguous(),
                               b.contiguous(), scale=self._feature_std.to(device),
                               shift=v.contiguous())
        return rows.batch(x, y)


def normals(client_keys: np.ndarray, offsets: np.ndarray, device: torch.device,
            out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Keyed standard normals ``[offsets[-1]]`` float32 on ``device`` (into ``out`` if given):
    segment i (``offsets[i]:offsets[i+1]``) from uint64 key ``client_keys[i]``
    (:func:`fastfair.ops.normal_segments`), so a client's draws do not depend on its cohort."""
    return ops.normal_segments(torch.from_numpy(client_keys.view(np.int64)).to(device),
                               torch.from_numpy(offsets).to(device), out)
