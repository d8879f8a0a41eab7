"""Models whose parameters live in one flat vector per client, so that a cohort of m clients is a
single [m, P] tensor: local training runs batched (bmm, or ``torch.func.vmap`` over any
``nn.Module``), and updates go to the averaging kernel as rows without any per-layer copying."""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Sequence, Tuple

import torch

from fastfair.sim.products import affine

if TYPE_CHECKING:
    from fastfair.sim.data.base import FederatedDataset

#: Bytes of parameters that one training pass steps together on the CPU. Every step reads and
#: writes the pass's parameters and gradients: while they stay in the caches a step costs its
#: arithmetic, beyond them its memory traffic (many copies of a large CNN train slower together
#: than client by client; docs/benchmarks.md, design measurements).
CPU_PASS_BYTES = 16 << 20
#: On a GPU, the copies a training pass steps together keep their parameters within this
#: fraction of the device's memory: their gradients, the received copies and the activations
#: take a few times as much again, and the round's updates stay beside them (1000 copies of
#: LEAF's FEMNIST CNN in one pass peaked at 116 GB of an H200 at batch 32).
CUDA_PASS_FRACTION = 1 / 16


class TrainingStep(NamedTuple):
    """What one training forward pass needs besides parameters and inputs; models without
    randomness or running statistics ignore it.

    valid: ``[m, B]`` bool, the real rows of each client's minibatch; keys: ``[m]`` int64, each
    client's random key of this step (:func:`fastfair.sim.seeding.step_keys`); buffers:
    ``[m, Q]`` float32, the clients' running statistics, updated in place.
    """

    valid: torch.Tensor
    keys: torch.Tensor
    buffers: torch.Tensor


class FlatModel:
    """A model over flat parameters.

    ``shapes`` lists the shapes of the flat vector's pieces (``names`` names them): the
    parameters, then ``num_buffers`` entries of buffers (running statistics) that training
    updates without gradients and the server averages like parameters.
    ``forward(params [m, P], x [m, B, *sample_shape]) -> [m, B, C]`` (or ``[m, B, T, C]`` with a
    label per position) evaluates m models on their own inputs; ``init(generator) -> [P]`` draws
    initial parameters; evaluation feeds at most ``eval_rows`` samples per forward pass.
    """

    shapes: List[Tuple[int, ...]]
    names: List[str]
    num_buffers: int = 0
    eval_rows: int = 1 << 16
    #: Whether training forward passes draw random numbers (dropout) from the step's keys.
    random: bool = False

    def is_softmax_regression(self) -> bool:
        """Whether the model is exactly multinomial logistic regression of flattened features,
        ``logits = x W + b`` with ``W [F, C]`` first and ``b [C]`` second, trained on the plain
        cross-entropy, so that :func:`fastfair.ops.softmax_regression_sgd` may train it."""
        return False

    def rows_per_pass(self, device: torch.device) -> Optional[int]:
        """Copies of the model (rows of ``[m, P]`` parameters) that a training pass steps
        together: on the CPU as many as keep their parameters within :data:`CPU_PASS_BYTES`, on
        a CUDA device within :data:`CUDA_PASS_FRACTION` of its memory, at least one; on other
        devices all of them (None)."""
        if device.type == "cuda":
            total = torch.cuda.get_device_properties(device).total_memory
            return max(1, int(total * CUDA_PASS_FRACTION) // (4 * self.num_params))
        if device.type != "cpu":
            return None
        return max(1, CPU_PASS_BYTES // (4 * self.num_params))

    def trains_alone(self, device: torch.device) -> bool:
        """Whether local training on ``device`` runs each copy alone as a plain module
        (:mod:`fastfair.sim.training.alone`) rather than the copies together over their
        ``[m, P]`` rows; :class:`~fastfair.sim.models.module.ModuleModel` chooses per model
        and device."""
        return False

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

    def forward(self, params: torch.Tensor, x: torch.Tensor,
                step: Optional[TrainingStep] = None) -> torch.Tensor:
        """Outputs of the m models (training mode when ``step`` is given)."""
        return self.forward_pieces(self.trained_pieces(params), x, step)

    def trained_pieces(self, params: torch.Tensor) -> List[torch.Tensor]:
        """Views ``[m, *shape]`` of the trained pieces of ``params [m, P]``, in order: every
        piece before the ``num_buffers`` buffer entries."""
        pieces, size = [], 0
        for view, shape in zip(self.unflatten(params), self.shapes):
            if size == self.num_params - self.num_buffers:
                break
            pieces.append(view)
            size += math.prod(shape)
        return pieces

    def forward_pieces(self, pieces: Sequence[torch.Tensor], x: torch.Tensor,
                       step: Optional[TrainingStep] = None) -> torch.Tensor:
        """:meth:`forward` from :meth:`trained_pieces` (the buffers, in training, from
        ``step``). Training steps through it where a model defines it, so that gradients
        arrive per parameter tensor rather than as one flat row per client; a model that
        defines :meth:`forward` alone trains through that."""
        raise NotImplementedError

    @property
    def trains_by_pieces(self) -> bool:
        """Whether the model defines :meth:`forward_pieces`."""
        return type(self).forward_pieces is not FlatModel.forward_pieces

    def init(self, generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def position_loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        r"""``[N]`` loss of ``logits [N, C]`` against classes ``target [N]``: cross-entropy
        :math:`\log\sum_c e^{z_c} - z_y`. Written out, as torch's fused ``cross_entropy`` with
        few classes is four times slower forward and backward (its log-softmax materialises
        every class)."""
        return torch.logsumexp(logits, -1) - logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)

    def sample_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[m, B]`` loss of each sample: :meth:`position_loss` of ``out [m, B, C]`` against
        ``y [m, B]``, or its mean over positions for ``out [m, B, T, C]``, ``y [m, B, T]``."""
        per = self.position_loss(out.reshape(-1, out.shape[-1]), y.reshape(-1)).reshape(y.shape)
        return per if per.dim() == 2 else per.flatten(2).mean(2)

    def sample_hits(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[m, B]`` float64 accuracy of each sample: ``argmax == y`` (the fraction of
        positions for a label per position)."""
        hits = (out.argmax(-1) == y).double()
        return hits if hits.dim() == 2 else hits.flatten(2).mean(2)

    def split_buffers(self, params: torch.Tensor) -> torch.Tensor:
        """A copy of the buffer columns ``[m, Q]`` of ``params [m, P]``."""
        return params[:, params.shape[1] - self.num_buffers:].detach().clone()

    def state_dict(self, params: torch.Tensor) -> "OrderedDict[str, torch.Tensor]":
        """The flat vector ``params [P]`` as named tensors (``names``, ``shapes``)."""
        views = self.unflatten(params.detach().reshape(1, -1))
        return OrderedDict((n, v[0].clone()) for n, v in zip(self.names, views))


class LogisticRegression(FlatModel):
    """Multinomial logistic regression: ``logits = x W + b`` with W [F, C], b [C] (inputs of any
    sample shape are flattened to F features)."""

    def __init__(self, num_features: int, num_classes: int) -> None:
        self.shapes = [(num_features, num_classes), (num_classes,)]
        self.names = ["W", "b"]

    def forward_pieces(self, pieces: Sequence[torch.Tensor], x: torch.Tensor,
                       step: Optional[TrainingStep] = None) -> torch.Tensor:
        W, b = pieces
        return affine(x.flatten(2), W, b)

    def init(self, generator: torch.Generator) -> torch.Tensor:
        return torch.zeros(self.num_params)

    def is_softmax_regression(self) -> bool:
        # A subclass may change forward or add parameters: only the class itself is the
        # kernel's model.
        return type(self) is LogisticRegression


class MLP(FlatModel):
    """One hidden ReLU layer: ``logits = relu(x W1 + b1) W2 + b2`` (inputs of any sample shape
    are flattened to F features)."""

    def __init__(self, num_features: int, num_classes: int, hidden: int = 64) -> None:
        self.shapes = [(num_features, hidden), (hidden,), (hidden, num_classes), (num_classes,)]
        self.names = ["W1", "b1", "W2", "b2"]

    def forward_pieces(self, pieces: Sequence[torch.Tensor], x: torch.Tensor,
                       step: Optional[TrainingStep] = None) -> torch.Tensor:
        W1, b1, W2, b2 = pieces
        return affine(torch.relu(affine(x.flatten(2), W1, b1)), W2, b2)

    def init(self, generator: torch.Generator) -> torch.Tensor:
        parts = []
        for s in self.shapes:
            fan_in = s[0] if len(s) == 2 else 1
            bound = 1.0 / math.sqrt(fan_in) if len(s) == 2 else 0.0
            parts.append((torch.rand(s, generator=generator) * 2 - 1).reshape(-1) * bound)
        return torch.cat(parts)


def check_model(model: FlatModel, dataset: FederatedDataset, params: Optional[torch.Tensor] = None,
                x: Optional[torch.Tensor] = None) -> None:
    """Raises ValueError unless ``model`` maps one sample of ``dataset`` (``[1, 1,
    *sample_shape]``: float features, or token ids below ``vocab_size``) to logits ``[1, 1,
    *label_shape, num_classes]``; a mismatch found once, instead of deep inside the first round's
    batched training. ``params`` (``[P]``) and ``x`` (samples of the data set, the first one is
    used) default to zeros on the CPU; the message names both shapes and the fix."""
    shape = tuple(dataset.sample_shape)
    labels = tuple(getattr(dataset, "label_shape", ()))
    tokens = getattr(dataset, "vocab_size", None) is not None
    features, C = dataset.num_features, dataset.num_classes
    if shape == (features,) and labels == () and not tokens:
        expected = (f"the model must map inputs [m, B, F] to logits [m, B, C] with F = {features} "
                    f"features and C = {C} classes (the data set's num_features and "
                    "num_classes)")
    else:
        kind = f"token ids below {dataset.vocab_size}" if tokens else "float features"
        expected = (f"the model must map inputs [m, B, *{list(shape)}] to logits [m, B, "
                    f"*{list(labels)}, C] with samples {list(shape)} ({kind}), labels "
                    f"{list(labels)} and C = {C} classes (the data set's sample_shape, "
                    "label_shape and num_classes)")
    if x is None or x.shape[0] == 0:
        x = torch.zeros((1,) + shape, dtype=torch.int64 if tokens else torch.float32)
    if params is None:
        params = torch.zeros(model.num_params)
    one = ", ".join(str(d) for d in (1, 1) + shape)
    try:
        with torch.no_grad():
            out = model.forward(params.reshape(1, -1), x[:1].unsqueeze(0))
    except Exception as exc:  # any failure of the dry run means the shapes do not fit
        first = (str(exc).splitlines() or [""])[0]
        raise ValueError(f"{expected}; on one sample [{one}] it fails: "
                         f"{type(exc).__name__}: {first}") from exc
    if tuple(out.shape) != (1, 1) + labels + (C,):
        hint = (" (if some classes are absent from the data, pass num_classes to the data set)"
                if out.ndim == 3 + len(labels) and out.shape[-1] > C else "")
        raise ValueError(f"{expected}; on one sample [{one}] it returns shape "
                         f"{list(out.shape)}{hint}")


def make_model(name: str, num_features: int, num_classes: int, *, hidden: int = 64) -> FlatModel:
    """A built-in model by name: 'logreg' or 'mlp'."""
    if name == "logreg":
        return LogisticRegression(num_features, num_classes)
    if name == "mlp":
        return MLP(num_features, num_classes, hidden)
    raise ValueError(f"model must be 'logreg' or 'mlp'; got {name!r}")
