"""Models whose parameters live in one flat vector per client, so that a cohort of m clients is a
single [m, P] tensor: local training runs batched (bmm), and updates go to the averaging kernel
as rows without any per-layer copying."""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import torch


class FlatModel:
    """A model over flat parameters.

    ``shapes`` lists the parameter shapes; ``forward(params [m, P], x [m, B, F]) -> [m, B, C]``
    evaluates m models on their own inputs; ``init(generator) -> [P]`` draws initial parameters.
    """

    shapes: List[Tuple[int, ...]]

    @property
    def num_params(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def unflatten(self, params: torch.Tensor) -> List[torch.Tensor]:
        """Views ``[m, *shape]`` of each parameter in ``params [m, P]``."""
        views, start = [], 0
        for s in self.shapes:
            size = math.prod(s)
            views.append(params[:, start:start + size].reshape(params.shape[0], *s))
            start += size
        return views

    def forward(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def init(self, generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError


class LogisticRegression(FlatModel):
    """Multinomial logistic regression: ``logits = x W + b`` with W [F, C], b [C]."""

    def __init__(self, num_features: int, num_classes: int) -> None:
        self.shapes = [(num_features, num_classes), (num_classes,)]

    def forward(self, params, x):
        W, b = self.unflatten(params)
        return torch.baddbmm(b.unsqueeze(1), x, W)

    def init(self, generator):
        return torch.zeros(self.num_params)


class MLP(FlatModel):
    """One hidden ReLU layer: ``logits = relu(x W1 + b1) W2 + b2``."""

    def __init__(self, num_features: int, num_classes: int, hidden: int = 64) -> None:
        self.shapes = [(num_features, hidden), (hidden,), (hidden, num_classes), (num_classes,)]

    def forward(self, params, x):
        W1, b1, W2, b2 = self.unflatten(params)
        h = torch.relu(torch.baddbmm(b1.unsqueeze(1), x, W1))
        return torch.baddbmm(b2.unsqueeze(1), h, W2)

    def init(self, generator):
        parts = []
        for s in self.shapes:
            fan_in = s[0] if len(s) == 2 else 1
            bound = 1.0 / math.sqrt(fan_in) if len(s) == 2 else 0.0
            parts.append((torch.rand(s, generator=generator) * 2 - 1).reshape(-1) * bound)
        return torch.cat(parts)


class ModuleModel(FlatModel):
    """Any ``torch.nn.Module`` mapping [B, F] to [B, C] logits, evaluated for m clients at once with
    ``torch.func.vmap`` over ``functional_call`` (modules with running statistics, such as batch
    norm in training mode, are not supported). Initial parameters are the module's own."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.names = [n for n, _ in module.named_parameters()]
        self.shapes = [tuple(p.shape) for _, p in module.named_parameters()]
        self._initial = torch.cat([p.detach().reshape(-1).float() for p in module.parameters()])

    def forward(self, params, x):
        from torch.func import functional_call, vmap

        def one(flat, xb):
            tensors = self.unflatten(flat.unsqueeze(0))
            named: Dict[str, torch.Tensor] = {n: t[0] for n, t in zip(self.names, tensors)}
            return functional_call(self.module, named, (xb,))

        return vmap(one)(params, x)

    def init(self, generator):
        return self._initial.clone()


def make_model(name: str, num_features: int, num_classes: int, *, hidden: int = 64) -> FlatModel:
    """A built-in model by name: 'logreg' or 'mlp'."""
    if name == "logreg":
        return LogisticRegression(num_features, num_classes)
    if name == "mlp":
        return MLP(num_features, num_classes, hidden)
    raise ValueError(f"model must be 'logreg' or 'mlp'; got {name!r}")
