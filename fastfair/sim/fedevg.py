r"""FedEvg (thesis Ch. IV, spec section 3): clients train an energy-based classifier on their own
data and report, for every sample of a shared synthetic set, the sign-energy weight
:math:`e_{ij} = \exp(\mathrm{sgn} f(\hat x_j; \theta_i)[\hat y_j])` and the energy gradient
:math:`G_{ij} = -\nabla_x f(\hat x_j; \theta_i)[\hat y_j]`; the server moves the synthetic set by
one Langevin step on the client mixture (:func:`fastfair.ops.fedevg_server_step`). No model
parameters are exchanged. Quality is measured by training a fresh classifier on the synthetic
set and testing it on the clients' held-out data.

Paper values are the defaults; ``variant='code'`` switches every setting the spec marks [D] to
the reference code's value (server noise 1e-4 with a [0, 1] clamp, beta_end = 1, client
gradient clip 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from fastfair import ops
from fastfair.sim.availability import build_availability
from fastfair.sim.data import FederatedDataset, client_hash
from fastfair.sim.methods import MethodRunner, options_of, single_process


@dataclass
class FedEvgOptions:
    """FedEvg hyperparameters (``--rule-option KEY=VALUE``); thesis Table/section 3.4.

    ``variant='code'`` replaces the [D] settings that are left at None here by the reference
    code's values: ``beta_end`` 0.01 -> 1.0, ``server_noise`` 0.01 -> 1e-4, ``server_clamp``
    off -> on ([0, 1]), ``grad_clip`` none -> 3.
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
        if self.variant not in ("paper", "code"):
            raise ValueError(f"variant must be 'paper' or 'code'; got {self.variant!r}")
        code = self.variant == "code"
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


def _seed(*parts: int) -> int:
    h = client_hash(parts[0], np.array([parts[1]]), parts[2] if len(parts) > 2 else 0)[0]
    return int(h >> 1)


def class_energy_gradient(net: torch.nn.Module, x: torch.Tensor,
                          y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``(f(x)[y] [N], -grad_x f(x)[y] [N, D])``: the class-conditional logit and the gradient of
    the joint energy :math:`E(x, y) = -f(x)[y]` for each sample."""
    x = x.detach().requires_grad_(True)
    score = net(x).gather(1, y[:, None])[:, 0]
    (grad,) = torch.autograd.grad(score.sum(), x)
    return score.detach(), -grad


class FedEvgSimulation(MethodRunner):
    """FedEvg rounds over a federated data set whose features lie in [0, 1] (``digits``)."""

    def __init__(self, config: Any, dist: Optional[Any] = None, *,
                 dataset: Optional[FederatedDataset] = None) -> None:
        from fastfair.sim.engine import build_dataset

        single_process(dist, "fedevg")
        self.config = config
        self.opts = options_of(FedEvgOptions, dict(config.rule_options), "fedevg")
        if dataset is None and config.dataset != "digits":
            raise ValueError("fedevg synthesises inputs in [0, 1]; run it with --dataset digits")
        self.dataset = build_dataset(config) if dataset is None else dataset
        if self.dataset.num_clients != config.clients:
            raise ValueError(f"config.clients is {config.clients} but the dataset has "
                             f"{self.dataset.num_clients} clients")
        o = self.opts
        L, D = self.dataset.num_classes, self.dataset.num_features
        self.labels = torch.arange(L).repeat_interleave(o.spc)   # the code's balanced labels
        g = torch.Generator().manual_seed(_seed(config.seed, 0, 0xE5))
        self.synthetic = torch.randn(L * o.spc, D, generator=g)  # eq. 4.12: x ~ N(0, I)
        self.betas = ops.cosine_beta_schedule(config.rounds, o.beta_start, o.beta_end)
        self.availability = build_availability(config.availability, config.clients,
                                               config.per_round, config.seed,
                                               config.availability_options)
        self.round = 0
        self.history = []
        self._eval_batch = self._pick_eval_clients(self.dataset)

    # ------------------------------------------------------------------ clients
    def client_update(self, client: int, x: torch.Tensor, y: torch.Tensor, t: int
                      ) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """Alg. 4.2 for one client on its data ``(x, y)`` at round ``t``: returns
        ``(e [M], G [M, D], mean loss)`` evaluated at the downloaded synthetic set."""
        o, cfg = self.opts, self.config
        key = _seed(cfg.seed, client, 0xC0 + t)
        gen = torch.Generator().manual_seed(key)
        net = energy_classifier(x.shape[1], self.dataset.num_classes, o.hidden, gen)
        lr = o.lr * o.lr_decay ** ((t - 1) // o.lr_decay_every)
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=o.weight_decay)
        init = self.synthetic.clone()          # D_init: the download
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
                xs, ys = buffer[idx].clone(), self.labels[idx]
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
        score, G = class_energy_gradient(net, init, self.labels)
        if o.grad_clip is not None:
            G = G.clamp(-o.grad_clip, o.grad_clip)
        e = torch.exp(torch.sign(score)).double()
        return e, G.float(), float(np.mean(losses))

    # ------------------------------------------------------------------ one round
    def _play(self, t: int, ids: np.ndarray) -> Dict[str, Any]:
        """Round t (Alg. 4.1)."""
        o, cfg = self.opts, self.config
        batch = self.dataset.client_data(ids, "train")
        es, Gs, losses = [], [], []
        for k, client in enumerate(ids.tolist()):
            rows = slice(int(batch.offsets[k]), int(batch.offsets[k + 1]))
            e, G, loss = self.client_update(client, batch.x[rows], batch.y[rows], t)
            es.append(e)
            Gs.append(G)
            losses.append(loss)
        beta = float(self.betas[t - 1])
        ops.fedevg_server_step(self.synthetic, torch.stack(Gs), torch.stack(es),
                               batch.counts.astype(np.float64), step=beta,
                               noise_std=o.server_noise, seed=_seed(cfg.seed, t, 0x5E),
                               offset=0, clamp=(0.0, 1.0) if o.server_clamp else None)
        return {"participants": int(ids.shape[0]), "train_loss": float(np.mean(losses)),
                "beta": beta}

    # ------------------------------------------------------------------ evaluation
    def server_classifier(self) -> torch.nn.Module:
        """A fresh classifier trained on the synthetic set (Adam 1e-3, ``eval_epochs`` passes)."""
        o, cfg = self.opts, self.config
        gen = torch.Generator().manual_seed(_seed(cfg.seed, 0, 0xEA))
        net = energy_classifier(self.synthetic.shape[1], self.dataset.num_classes, o.hidden, gen)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        M = self.synthetic.shape[0]
        for _ in range(o.eval_epochs):
            order = torch.randperm(M, generator=gen)
            for start in range(0, M, o.batch_size):
                rows = order[start:start + o.batch_size]
                loss = torch.nn.functional.cross_entropy(net(self.synthetic[rows]),
                                                         self.labels[rows])
                opt.zero_grad()
                loss.backward()
                opt.step()
        return net.eval()

    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(accuracy, loss, test counts)`` per evaluation client of the server classifier."""
        net = self.server_classifier()
        b = self._eval_batch
        with torch.no_grad():
            logits = net(b.x)
            loss = torch.nn.functional.cross_entropy(logits, b.y, reduction="none").double()
            hit = (logits.argmax(1) == b.y).double()
        seg = torch.repeat_interleave(torch.arange(len(b.counts)), torch.as_tensor(b.counts))
        counts = b.counts
        keep = counts > 0
        n = np.maximum(counts, 1).astype(np.float64)
        loss_c = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, seg, loss).numpy() / n
        acc_c = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, seg, hit).numpy() / n
        return acc_c[keep], loss_c[keep], counts[keep]

    def extra_metrics(self) -> Dict[str, float]:
        return {"synthetic_mean": float(self.synthetic.mean()),
                "synthetic_std": float(self.synthetic.std())}

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> Dict[str, Any]:
        return {"synthetic": self.synthetic.clone()}

    def _load(self, state: Dict[str, Any]) -> None:
        x = torch.as_tensor(state["synthetic"]).float()
        if x.shape != self.synthetic.shape:
            raise ValueError(f"checkpoint synthetic set has shape {tuple(x.shape)}; expected "
                             f"{tuple(self.synthetic.shape)}")
        self.synthetic = x.clone()
