"""The SGD step of a large dense layer taken inside its weight gradient's matrix product, for
clients trained alone (:mod:`fastfair.sim.training.alone`)."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch
from torch import nn

from fastfair.sim.models.zoo import Dense

FUSED_MIN = 1 << 20  # weights of at least this many elements step inside their product


class FusedDenseSGD:
    r"""The SGD steps of a client module's large :class:`~fastfair.sim.models.zoo.Dense`
    weights (``W [in, out]``, at least ``FUSED_MIN`` = 2^20 elements), each one matrix product:

    .. math:: W \leftarrow W - \eta\, X^\top \frac{\partial L}{\partial Y}

    (``W.addmm_(X.T, dY, alpha=-lr)``, ``X [B, in]`` the layer's input and ``Y = X W + b`` its
    output, both flattened to rows). The backward pass then computes no ``dW``, and the step
    neither writes the gradient nor reads it back, which pays where one dense layer holds most
    parameters (LEAF's FEMNIST CNN; docs/benchmarks.md, design measurements). The product
    rounds once where the two steps round the gradient first, so the bits differ from them;
    they depend on the client's own data alone.

    ``enabled=False`` fuses nothing (every leaf through autograd). Per step, after the forward
    pass, :meth:`split` gives the leaves autograd differentiates and the outputs whose gradients
    the fused layers need; :meth:`step` then updates those layers' weights. A layer called more
    than once in a step (its input is not one matrix) trains through autograd in that step. Use
    as a context manager: its forward hooks go at the exit.
    """

    def __init__(self, module: nn.Module, param_names: Sequence[str],
                 leaves: Sequence[torch.Tensor], enabled: bool = True) -> None:
        self._layers: List[Tuple[int, nn.Module]] = []  # (leaf index, layer)
        for i, name in enumerate(param_names if enabled else ()):
            owner, _, attr = name.rpartition(".")
            layer = module.get_submodule(owner)
            if isinstance(layer, Dense) and attr == "weight" and leaves[i].numel() >= FUSED_MIN:
                self._layers.append((i, layer))
        self._calls: Dict[nn.Module, List[Tuple[torch.Tensor, torch.Tensor]]] = {}
        self._pending: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self._hooks = [layer.register_forward_hook(self._record) for _, layer in self._layers]

    def _record(self, layer: nn.Module, inputs: Tuple[torch.Tensor, ...],
                output: torch.Tensor) -> None:
        self._calls.setdefault(layer, []).append((inputs[0], output))

    def split(self, leaves: Sequence[torch.Tensor]
              ) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """``(leaves autograd differentiates, outputs of the layers fused this step)``, from the
        forward pass just run; forgets the pass."""
        fused = [(i, self._calls[layer][0]) for i, layer in self._layers
                 if len(self._calls.get(layer, ())) == 1]
        self._calls = {}
        self._pending = [(leaves[i], x) for i, (x, _) in fused]
        skip = {i for i, _ in fused}
        return [leaf for j, leaf in enumerate(leaves) if j not in skip], [y for _, (_, y) in fused]

    def step(self, output_grads: Sequence[torch.Tensor], lr: float) -> None:
        """Updates the weights of the layers :meth:`split` fused, from the gradients of their
        outputs (in its order); call under ``torch.no_grad()``."""
        for (weight, x), dy in zip(self._pending, output_grads):
            weight.addmm_(x.reshape(-1, x.shape[-1]).t(), dy.reshape(-1, dy.shape[-1]), alpha=-lr)
        self._pending = []

    def __enter__(self) -> "FusedDenseSGD":
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
