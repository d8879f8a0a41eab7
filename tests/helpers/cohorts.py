"""Small cohorts of random 1x6x6 images for the training tests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

import numpy as np
import torch


def image_cohort(counts: Sequence[int], seed: int = 0) -> SimpleNamespace:
    """A batch-like cohort: ``x [N, 1, 6, 6]`` uniform, ``y [N]`` in 0..2, client k owning
    ``counts[k]`` rows (``offsets``, ``counts``), drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    n = int(sum(counts))
    return SimpleNamespace(x=torch.rand(n, 1, 6, 6, generator=g),
                           y=torch.randint(0, 3, (n,), generator=g),
                           offsets=np.concatenate([[0], np.cumsum(counts)]),
                           counts=np.asarray(counts))
