r"""FedEvg (thesis Ch. IV; docs/algorithms.md §3): clients train an energy-based classifier on their
own data and report, for every sample of a shared synthetic set, the sign-energy weight
:math:`e_{ij} = \exp(\mathrm{sgn} f(\hat x_j; \theta_i)[\hat y_j])` and the energy gradient
:math:`G_{ij} = -\nabla_x f(\hat x_j; \theta_i)[\hat y_j]`; the server moves the synthetic set by
one Langevin step on the client mixture (:func:`fastfair.ops.fedevg_server_step`). No model
parameters are exchanged. Quality is measured by training a fresh classifier on the synthetic set
(:func:`server_classifier`) and testing it on the clients' held-out data.

Thesis values are the defaults; ``variant='reference_code'`` switches every setting where the
thesis and its reference code disagree to the code's value (server noise 1e-4 with a [0, 1]
clamp, beta_end = 1, client gradient clip 3). The simulator runs it as
:class:`fastfair.sim.rounds.fedevg.FedEvgSimulation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

from fastfair import ops
from fastfair._arrays import import_torch

if TYPE_CHECKING:
    import torch
else:
    # FedEvg trains torch models (autograd, torch.nn) throughout: without torch, importing this
    # module says what to install.
    torch = import_torch("fastfair.methods.fedevg (FedEvg)")


@dataclass
class FedEvgOptions:
    """FedEvg hyperparameters (``--rule-option KEY=VALUE``); docs/algorithms.md §3.4.

    ``variant='reference_code'`` replaces the settings where the thesis and its reference code
    disagree (left at None here) by the code's values: ``beta_end`` 0.01 -> 1.0,
    ``server_noise`` 0.01 -> 1e-4, ``server_clamp`` off -> on ([0, 1]), ``grad_clip`` none -> 3.
    """

    variant: str = "paper"
    spc: int = 10                        # synthetic samples per class (M = spc * classes)
    beta_start: float = 10.0
    beta_end: Optional[float] = None     # paper 0.01, code 1.0
    server_noise: Optional[float] = None  # delta: paper 0.01, code 1e-4
    server_clamp: Optional[bool] = None  # paper no, code [0, 1]
    grad_clip: Optional[float] = None    # client energy-gradient clip: paper none, code 3
    sgld_steps: int = 1                  # R
    sgld_step: float = 1.0               # gamma
    sgld_noise: float = 0.01             # sigma
    ce_weight: float = 0.1               # lambda on the synthetic cross-entropy
    local_epochs: int = 5                # the code's E = 1 epoch of B = 64 assumes ~600+ samples
    batch_size: int = 64
    lr: float = 1e-3                     # Adam
    weight_decay: float = 1e-4
    lr_decay: float = 0.9                # x lr_decay every lr_decay_every rounds
    lr_decay_every: int = 50
    hidden: int = 128
    eval_epochs: int = 100               # server classifier on the synthetic set

    def __post_init__(self) -> None:
        if self.variant not in ("paper", "reference_code"):
            raise ValueError(f"variant must be 'paper' or 'reference_code'; got {self.variant!r}")
        code = self.variant == "reference_code"
        if self.beta_end is None:
            self.beta_end = 1.0 if code else 0.01
        if self.server_noise is None:
            self.server_noise = 1e-4 if code else 0.01
        if self.server_clamp is None:
            self.server_clamp = code
        if self.grad_clip is None and code:
            self.grad_clip = 3.0
        for name in ("spc", "sgld_steps", "local_epochs", "batch_size", "hidden", "eval_epochs",
                     "lr_decay_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 or None; got {self.grad_clip}")


def energy_classifier(num_features: int, num_classes: int, hidden: int,
                      generator: torch.Generator) -> torch.nn.Module:
    """The JEM-style classifier f: two Swish (SiLU) hidden layers and a spectrally normalised
    output layer (as in the reference code's backbone), initialised from ``generator``."""
    net = torch.nn.Sequential(torch.nn.Linear(num_features, hidden), torch.nn.SiLU(),
                              torch.nn.Linear(hidden, hidden), torch.nn.SiLU(),
                              torch.nn.Linear(hidden, num_classes))
    with torch.no_grad():
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                bound = 1.0 / layer.in_features ** 0.5
                for p in (layer.weight, layer.bias):  # PyTorch's default U(-1/sqrt(fan_in), ...)
                    p.copy_((torch.rand(p.shape, generator=generator) * 2 - 1) * bound)
    # spectral_norm draws its power-iteration vectors from the global generator: seed it locally
    # so that a client's model is a function of its key alone (exact resumption).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2 ** 62, (1,), generator=generator)))
        net[4] = torch.nn.utils.parametrizations.spectral_norm(net[4])
    return net


def class_energy_gradient(net: torch.nn.Module, x: torch.Tensor,
                          y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``(f(x)[y] [N], -grad_x f(x)[y] [N, D])``: the class-conditional logit and the gradient of
    the joint energy :math:`E(x, y) = -f(x)[y]` for each sample."""
    x = x.detach().requires_grad_(True)
    score = net(x).gather(1, y[:, None])[:, 0]
    (grad,) = torch.autograd.grad(score.sum(), x)
    return score.detach(), -grad


def client_update(x: torch.Tensor, y: torch.Tensor, synthetic: torch.Tensor,
                  labels: torch.Tensor, num_classes: int, o: FedEvgOptions, key: int, t: int
                  ) -> Tuple[torch.Tensor, torch.Tensor, float]:
    """Alg. 4.2 for one client on its data ``x [n, D]``, ``y [n]`` at round ``t`` (1-based),
    with the downloaded synthetic set ``synthetic [M, D]`` of labels ``labels [M]``; ``key``
    seeds the client's model, minibatches and Langevin noise. Returns ``(e [M], G [M, D], mean
    loss)``: the sign-energy weights and energy gradients at the downloaded set."""
    gen = torch.Generator().manual_seed(key)
    net = energy_classifier(x.shape[1], num_classes, o.hidden, gen)
    lr = o.lr * o.lr_decay ** ((t - 1) // o.lr_decay_every)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=o.weight_decay)
    init = synthetic.clone()               # D_init: the download
    buffer = init.clone()                  # the persistent PCD chain
    M, n = buffer.shape[0], x.shape[0]
    clamp = (0.0, 1.0)
    noise_offset, losses = 0, []
    net.train()
    for _ in range(o.local_epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, o.batch_size):
            rows = order[start:start + o.batch_size]
            idx = torch.randperm(M, generator=gen)[:len(rows)]
            xs, ys = buffer[idx].clone(), labels[idx]
            for _ in range(o.sgld_steps):
                _, energy_grad = class_energy_gradient(net, xs, ys)
                ops.sgld_step(xs, energy_grad, step=o.sgld_step, noise_std=o.sgld_noise,
                              seed=key, offset=noise_offset, grad_clip=o.grad_clip,
                              clamp=clamp)
                noise_offset += xs.numel()
            logits_real = net(x[rows])
            pcd = (-logits_real.gather(1, y[rows, None]).mean()
                   + net(xs).gather(1, ys[:, None]).mean())
            ce = (torch.nn.functional.cross_entropy(logits_real, y[rows])
                  + o.ce_weight * torch.nn.functional.cross_entropy(net(init[idx]), ys))
            loss = pcd + ce
            opt.zero_grad()
            loss.backward()
            opt.step()
            buffer[idx] = xs
            losses.append(float(loss.detach()))
    net.eval()
    score, G = class_energy_gradient(net, init, labels)
    if o.grad_clip is not None:
        G = G.clamp(-o.grad_clip, o.grad_clip)
    e = torch.exp(torch.sign(score)).double()
    return e, G.float(), float(np.mean(losses))


def server_classifier(synthetic: torch.Tensor, labels: torch.Tensor, num_classes: int,
                      o: FedEvgOptions, key: int) -> torch.nn.Module:
    """A fresh classifier (seeded by ``key``) trained on the synthetic set ``synthetic [M, D]``
    with labels ``labels [M]`` (Adam 1e-3, ``eval_epochs`` passes): FedEvg's global model."""
    gen = torch.Generator().manual_seed(key)
    net = energy_classifier(synthetic.shape[1], num_classes, o.hidden, gen)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    M = synthetic.shape[0]
    for _ in range(o.eval_epochs):
        order = torch.randperm(M, generator=gen)
        for start in range(0, M, o.batch_size):
            rows = order[start:start + o.batch_size]
            loss = torch.nn.functional.cross_entropy(net(synthetic[rows]),
                                                     labels[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval()
