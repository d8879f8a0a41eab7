r"""SuPerFed-MM and SuPerFed-LM (thesis Ch. II; docs/algorithms.md §4): every client keeps a local
model :math:`\theta^l` beside the federated one :math:`\theta^f` and trains the mixture
:math:`\theta(\lambda) = (1-\lambda)\theta^f + \lambda\theta^l` with :math:`\lambda \sim U(0, 1)`
per minibatch (MM) or per layer and minibatch (LM), after round :math:`\lfloor L T\rfloor`, with a
proximity term to the global model and an orthogonality term between the two. The server averages
the federated models. Personalised accuracy is the best mixture on a lambda grid.

This module holds the method's options and draws; the fused client passes are
:func:`fastfair.ops.superfed_reduce` / :func:`fastfair.ops.superfed_step`, and the simulator runs
the method as :class:`fastfair.sim.rounds.superfed.SuperFedSimulation`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

import numpy as np

from fastfair import ops
from fastfair._arrays import import_torch

if TYPE_CHECKING:
    import torch


@dataclass
class SuperFedOptions:
    """SuPerFed hyperparameters (``--rule-option KEY=VALUE``); docs/algorithms.md §4.4.

    ``start`` is L (mixing starts after round floor(L T)); ``nu`` and ``mu`` weigh the
    orthogonality and proximity terms; ``prox='reference_code'`` uses the reference code's
    :math:`\\mu \\sum_s \\|f_s - g_s\\|` instead of the paper's
    :math:`\\frac{\\mu}{2}\\|f - g\\|^2`.
    ``mode`` comes from the rule name (superfed-mm / superfed-lm).
    """

    mode: str = "mm"
    start: float = 0.4
    nu: Optional[float] = None   # code: 1 (MM), 2 (LM)
    mu: float = 0.01
    prox: str = "paper"
    momentum: float = 0.9
    weight_decay: float = 1e-4
    grid: int = 11               # lambda in {0, 0.1, ..., 1}

    def __post_init__(self) -> None:
        if self.mode not in ("mm", "lm"):
            raise ValueError(f"mode must be 'mm' or 'lm'; got {self.mode!r}")
        if self.nu is None:
            self.nu = 1.0 if self.mode == "mm" else 2.0
        if not 0.0 <= self.start <= 1.0:
            raise ValueError(f"start (L) must be in [0, 1]; got {self.start}")
        if self.nu < 0 or self.mu < 0 or self.momentum < 0 or self.weight_decay < 0:
            raise ValueError("nu, mu, momentum and weight_decay must be >= 0")
        if self.prox not in ("paper", "reference_code"):
            raise ValueError(f"prox must be 'paper' or 'reference_code'; got {self.prox!r}")
        if self.grid < 2:
            raise ValueError(f"grid must be >= 2; got {self.grid}")


def draw_lambdas(rng: np.random.Generator, m: int, num_segments: int, mode: str,
                 mixing: bool) -> np.ndarray:
    """Mixing weights ``[m, S]`` of one minibatch: zero before mixing starts, then one
    :math:`U(0, 1)` per client repeated over the S layers (``mode="mm"``) or one per client and
    layer (``"lm"``)."""
    if not mixing:
        return np.zeros((m, num_segments))
    if mode == "mm":
        return np.repeat(rng.uniform(size=(m, 1)), num_segments, axis=1)
    return rng.uniform(size=(m, num_segments))


def initial_local_model(shapes: Sequence[Tuple[int, ...]], layout: ops.SegmentLayout,
                        generator: torch.Generator) -> torch.Tensor:
    r"""A client's local model at first use, as the reference code initialises it:
    Xavier-normal weights on the twinned (personalised) layers, zero elsewhere.

    Parameters
    ----------
    shapes
        The S parameter shapes of the model, in the order of ``layout``'s segments.
    layout
        The segment layout (``offsets [S + 1]``, ``twinned [S]``).
    generator
        The torch generator the normal draws come from.

    Returns
    -------
    torch.Tensor
        ``[P]`` in torch's default float dtype; on a twinned segment of shape
        ``(fan_out, *rest)`` the entries are
        :math:`N(0, 2 / (\mathrm{fan\_out} + \prod \mathrm{rest}))`, zero elsewhere.

    Raises
    ------
    ModuleNotFoundError
        When PyTorch is not installed (``pip install "fastfair[torch]"``).
    """
    torch = import_torch("fastfair.methods.superfed.initial_local_model")
    row = torch.zeros(int(layout.offsets[-1]))
    for s, shape in enumerate(shapes):
        a, b = int(layout.offsets[s]), int(layout.offsets[s + 1])
        if layout.twinned[s]:
            std = math.sqrt(2.0 / (shape[0] + math.prod(shape[1:])))
            row[a:b] = torch.randn(b - a, generator=generator) * std
    return row
