"""The papers' networks, each registered by name in :mod:`fastfair.sim.models.catalog` as the
default model of its data set and trained batched across the cohort as
:class:`~fastfair.sim.models.module.ModuleModel`."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from fastfair.sim.data.base import FederatedDataset


class Dense(nn.Module):
    """``x W + b`` with ``W`` stored ``[in, out]`` and nn.Linear's initialisation, U(-bound,
    bound) with ``bound`` = in_features^-1/2 unless given, drawn again by
    :meth:`reset_parameters` (as ``ModuleModel(init="seed")`` does per seed). Under ``vmap``
    with per-client weights the gradient of ``W`` comes out of the batched matrix product in
    this layout, where nn.Linear's ``[out, in]`` needs a transposing copy of every client's
    gradient (a third of a step of LEAF's FEMNIST CNN on a CPU)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 bound: Optional[float] = None) -> None:
        super().__init__()
        self.bound = in_features ** -0.5 if bound is None else float(bound)
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights and bias drawn from U(-bound, bound), in that order, from torch's generator."""
        with torch.no_grad():
            self.weight.uniform_(-self.bound, self.bound)
            if self.bias is not None:
                self.bias.uniform_(-self.bound, self.bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight
        return out if self.bias is None else out + self.bias


class LSTM(nn.Module):
    """A stacked LSTM over ``[B, T, D]`` (batch first) returning every position's output
    ``[B, T, H]``, with nn.LSTM's gates (i, f, g, o) and initialisation, written with plain
    tensor operations so that ``vmap`` batches it across clients (``aten::lstm`` has no
    batching rule)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        sizes = [input_size] + [hidden_size] * (num_layers - 1)
        bound = hidden_size ** -0.5  # nn.LSTM's, for every weight and bias
        self.ih = nn.ModuleList(Dense(d, 4 * hidden_size, bound=bound) for d in sizes)
        self.hh = nn.ModuleList(Dense(hidden_size, 4 * hidden_size, bias=False, bound=bound)
                                for _ in sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for ih, hh in zip(self.ih, self.hh):
            gates_in = ih(x)                        # every position's input term at once
            h = x.new_zeros(x.shape[0], self.hidden_size)
            c = h
            outputs = []
            for t in range(x.shape[1]):
                i, f, g, o = (gates_in[:, t] + hh(h)).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            x = torch.stack(outputs, dim=1)
        return x


def _image(shape: Tuple[int, ...], model: str) -> Tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(f"model {model!r} takes images [C, H, W]; the data set's samples are "
                         f"{list(shape)}")
    return shape


def two_conv_cnn(shape: Tuple[int, ...], num_classes: int, hidden: int, model: str) -> nn.Module:
    """Two 5x5 convolutions (32, 64 channels, same padding), each with ReLU and 2x2 max
    pooling, a ``hidden``-unit ReLU layer and a linear layer, for images ``shape = [C, H, W]``
    (``model`` names the model in errors)."""
    c, h, w = _image(shape, model)
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        Dense(64 * (h // 4) * (w // 4), hidden), nn.ReLU(), Dense(hidden, num_classes))


#: CIFAR-10's per-channel pixel mean and standard deviation (of pixels in [0, 1]) as easyFL's
#: and FLGo's CIFAR-10 benchmark normalise its images: ``transforms.Normalize((0.4914, 0.4822,
#: 0.4465), (0.2023, 0.1994, 0.2010))`` (easyFL 4.0, benchmark/cifar10_classification/core.py).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)


class Standardize(nn.Module):
    """Fixed per-channel standardisation of images ``x [..., C, H, W]`` with pixels in [0, 1]:
    ``(x[..., c, :, :] - mean[c]) / std[c]``, torchvision's ``transforms.Normalize``. It holds
    no parameter and no buffer (the constants are Python floats), so the model's trained row
    and saved keys are those of the layers after it."""

    def __init__(self, mean: Tuple[float, ...], std: Tuple[float, ...]) -> None:
        super().__init__()
        if len(mean) != len(std) or not all(s > 0 for s in std):
            raise ValueError(f"mean and std must give one value per channel, std > 0; got mean "
                             f"{list(mean)} and std {list(std)}")
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-3] != len(self.mean):
            raise ValueError(f"images with {x.shape[-3]} channels; the standardisation has "
                             f"{len(self.mean)}")
        return torch.cat([(x[..., c:c + 1, :, :] - m) / s
                          for c, (m, s) in enumerate(zip(self.mean, self.std))], dim=-3)


def flgo_cifar_cnn(shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    """easyFL's and FLGo's CIFAR-10 CNN (benchmark/cifar10_classification/model/cnn.py) behind
    their input standardisation (:data:`CIFAR10_MEAN`, :data:`CIFAR10_STD`), for images
    ``shape = [3, H, W]`` with pixels in [0, 1]: two 5x5 convolutions of 64 channels without
    padding, each with ReLU and 2x2 max pooling, then ReLU layers of 384 and 192 units and a
    linear layer; torch's default initialisation (every weight and bias U(-b, b),
    b = fan_in^-1/2). On 32x32 images the first ReLU layer reads 64 * 5 * 5 = 1600 features."""
    c, h, w = _image(shape, "flgo-cifar-cnn")
    if c != len(CIFAR10_MEAN):
        raise ValueError(f"model 'flgo-cifar-cnn' takes colour images [3, H, W]; the data "
                         f"set's samples are {list(shape)}")
    h, w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    if h < 1 or w < 1:
        raise ValueError(f"model 'flgo-cifar-cnn' needs images of at least 16x16; the data "
                         f"set's samples are {list(shape)}")
    return nn.Sequential(
        Standardize(CIFAR10_MEAN, CIFAR10_STD),
        nn.Conv2d(c, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        Dense(64 * h * w, 384), nn.ReLU(), Dense(384, 192), nn.ReLU(), Dense(192, num_classes))


class _Block(nn.Module):
    """A basic residual block: two 3x3 convolutions with batch norm, a 1x1 projection when the
    shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.skip(x))


def resnet8(shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    """A 3x3 stem, three stages of one basic block (16, 32, 64 channels), global average
    pooling and a linear layer, for images ``shape = [C, H, W]``."""
    c, _, _ = _image(shape, "resnet8")
    return nn.Sequential(nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         _Block(16, 16, 1), _Block(16, 32, 2), _Block(32, 64, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), Dense(64, num_classes))


def celeba_cnn(shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    """Four blocks of 3x3 convolution (32 channels), batch norm, 2x2 max pooling and ReLU, then
    a linear layer, for images ``shape = [C, H, W]``."""
    c, h, w = _image(shape, "celeba-cnn")
    layers = []
    for k in range(4):
        layers += [nn.Conv2d(c if k == 0 else 32, 32, 3, padding=1), nn.BatchNorm2d(32),
                   nn.MaxPool2d(2, ceil_mode=True), nn.ReLU()]
        h, w = -(-h // 2), -(-w // 2)
    return nn.Sequential(*layers, nn.Flatten(), Dense(32 * h * w, num_classes))


class CharLSTM(nn.Module):
    """Next-character model: ids ``[B, T]`` -> logits ``[B, T, num_classes]``."""

    def __init__(self, vocab_size: int, num_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 8)
        self.lstm = LSTM(8, 256, 2)
        self.out = Dense(256, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.embed(ids)))


class SentimentLSTM(nn.Module):
    """Sequence classifier: ids ``[B, T]`` (left-padded) -> logits ``[B, num_classes]`` from
    the last position."""

    def __init__(self, vocab_size: int, num_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 100)
        self.lstm = LSTM(100, 100, 2)
        self.head = nn.Sequential(Dense(100, 128), nn.ReLU(), Dense(128, num_classes))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(ids))[:, -1])


def vocabulary(dataset: FederatedDataset, model: str) -> int:
    """The data set's ``vocab_size`` (ValueError naming ``model`` for float samples)."""
    if dataset.vocab_size is None:
        raise ValueError(f"model {model!r} takes token ids; the data set's samples are float "
                         "features")
    return dataset.vocab_size
