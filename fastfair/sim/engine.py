"""The simulation engine: one object that runs federated rounds of any fastfair rule.

A round samples a cohort (an availability model), lets every sampled client report the loss of
the received model on its training data, trains the cohort in one batched pass, asks the rule
for mixing coefficients and applies them to the updates through the averaging kernel. Under
``torch.distributed`` each process trains a contiguous slice of the cohort, and one all-reduce
sums the weighted updates.

All randomness derives from (seed, round, client id), so a run resumed from a checkpoint, or run
on any number of processes, makes the same choices as an uninterrupted single-process run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from fastfair import ops
from fastfair.sim import rules
from fastfair.sim.availability import build_availability
from fastfair.sim.data import FederatedDataset, SyntheticDataset, client_hash, digits_dataset
from fastfair.sim.models import FlatModel, make_model
from fastfair.sim.runner import Runner
from fastfair.sim.training import LocalTrainingConfig, evaluate_clients, train_clients

@dataclass
class SimulationConfig:
    """Every knob of a simulation. The defaults (100 Synthetic(1, 1) clients, 10 per round,
    200 rounds) compare rules in seconds per rule on 2 cores."""

    rule: str = "fedavg"
    rule_options: Dict[str, Any] = field(default_factory=dict)
    dataset: str = "synthetic"
    clients: int = 100
    per_round: int = 10
    rounds: int = 200
    seed: int = 0
    # Synthetic(alpha, beta)
    synthetic_alpha: float = 1.0
    synthetic_beta: float = 1.0
    max_samples: int = 500
    # digits
    partition: str = "dirichlet"
    dirichlet_alpha: float = 0.3
    classes_per_client: int = 2
    # model and local training
    model: str = "logreg"
    hidden: int = 64
    epochs: int = 1
    local_steps: Optional[int] = None
    batch_size: int = 32
    lr: float = 0.1
    lr_decay: float = 1.0
    # server
    server_lr: float = 1.0
    server_optimizer: str = "none"
    server_options: Dict[str, Any] = field(default_factory=dict)
    # availability and evaluation
    availability: str = "uniform"
    availability_options: Dict[str, Any] = field(default_factory=dict)
    eval_every: int = 5
    eval_clients: int = 1000

    def __post_init__(self) -> None:
        for name in ("clients", "per_round", "rounds", "eval_every", "eval_clients", "batch_size",
                     "epochs", "max_samples", "hidden"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.per_round > self.clients:
            raise ValueError(f"per_round ({self.per_round}) cannot exceed clients ({self.clients})")
        if self.dataset not in ("synthetic", "digits"):
            raise ValueError(f"dataset must be 'synthetic' or 'digits'; got {self.dataset!r}")
        if not (self.lr > 0 and self.server_lr > 0 and 0 < self.lr_decay <= 1):
            raise ValueError("lr and server_lr must be > 0, lr_decay in (0, 1]")

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SimulationConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown configuration keys: {', '.join(unknown)}")
        return cls(**d)


def build_dataset(config: SimulationConfig) -> FederatedDataset:
    if config.dataset == "synthetic":
        return SyntheticDataset(config.clients, config.synthetic_alpha, config.synthetic_beta,
                                seed=config.seed, max_samples=config.max_samples)
    return digits_dataset(config.clients, config.partition, seed=config.seed,
                          alpha=config.dirichlet_alpha, classes_per_client=config.classes_per_client)


@dataclass
class Distributed:
    """This process's place in a ``torch.distributed`` group (rank 0 of 1 when alone)."""

    rank: int = 0
    world_size: int = 1
    joined: bool = False  # this object initialised the default group, so close() ends it

    @classmethod
    def from_environment(cls) -> "Distributed":
        """Joins the default process group when launched by torchrun (gloo on CPU)."""
        import os

        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        import torch.distributed as dist

        joined = not dist.is_initialized()
        if joined:
            dist.init_process_group("gloo")
        return cls(dist.get_rank(), dist.get_world_size(), joined)

    def close(self) -> None:
        """Ends the process group that :meth:`from_environment` joined (a no-op otherwise).
        A group left to interpreter shutdown can abort the process from gloo's threads."""
        if self.joined:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.joined = False

    def my_slice(self, m: int) -> slice:
        bounds = np.linspace(0, m, self.world_size + 1).round().astype(int)
        return slice(int(bounds[self.rank]), int(bounds[self.rank + 1]))

    def gather(self, values: np.ndarray, m: int) -> np.ndarray:
        """Concatenates each rank's slice of a length-m float64 vector, in rank order."""
        if self.world_size == 1:
            return values
        import torch.distributed as dist

        full = torch.zeros(m, dtype=torch.float64)
        full[self.my_slice(m)] = torch.from_numpy(values)
        dist.all_reduce(full)  # slices are disjoint, so the sum is the concatenation
        return full.numpy()

    def gather_rows(self, rows: torch.Tensor, m: int) -> torch.Tensor:
        """Concatenates each rank's rows ``[slice, P]`` of an ``[m, P]`` tensor, in rank order."""
        if self.world_size == 1:
            return rows
        full = torch.zeros(m, rows.shape[1], dtype=rows.dtype)
        full[self.my_slice(m)] = rows
        return self.sum(full)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor


class Simulation(Runner):
    """A federated run of one rule: ``step()`` plays one round, ``evaluate()`` scores the global
    model on the evaluation clients, ``state_dict()`` captures everything needed to continue."""

    def __init__(self, config: SimulationConfig, dist: Optional[Distributed] = None, *,
                 dataset: Optional[FederatedDataset] = None,
                 model: Optional[FlatModel] = None) -> None:
        """``dataset`` (e.g. an :class:`~fastfair.sim.data.ArrayDataset` of your own per-client
        arrays) replaces ``config.dataset``, and ``model`` (e.g. a
        :class:`~fastfair.sim.models.ModuleModel` around your module) replaces ``config.model``."""
        self.config = config
        self.dist = dist or Distributed()
        self.dataset = build_dataset(config) if dataset is None else dataset
        if self.dataset.num_clients != config.clients:
            raise ValueError(f"config.clients is {config.clients} but the dataset has "
                             f"{self.dataset.num_clients} clients")
        self.model: FlatModel = model or make_model(config.model, self.dataset.num_features,
                                                    self.dataset.num_classes, hidden=config.hidden)
        self.params = self.model.init(torch.Generator().manual_seed(config.seed)).float()
        # A server optimiser steps with --server-lr unless its options say otherwise.
        self.rule = rules.build_rule(config.rule, config.clients, config.rule_options,
                                     config.server_optimizer,
                                     {"lr": config.server_lr, **config.server_options},
                                     per_round=config.per_round)
        self.objective = rules.client_objective(self.rule, config.lr)
        self.availability = build_availability(config.availability, config.clients,
                                               config.per_round, config.seed,
                                               config.availability_options)
        self.round = 0
        self.history: List[Dict[str, Any]] = []
        self._eval_batch = self._pick_eval_clients(self.dataset)

    # ------------------------------------------------------------------ one round
    def _play(self, t: int, ids: np.ndarray) -> Dict[str, Any]:
        cfg = self.config
        m = ids.shape[0]
        mine = self.dist.my_slice(m)
        batch = self.dataset.client_data(ids[mine], "train")
        losses_mine, _ = evaluate_clients(self.model, self.params, batch)
        losses = self.dist.gather(losses_mine, m)
        counts = self.dist.gather(batch.counts.astype(np.float64), m)

        round_seed = int(client_hash(cfg.seed, np.array([t]), 0xA0D)[0] >> 1)
        local = LocalTrainingConfig(epochs=cfg.epochs, steps=cfg.local_steps,
                                    batch_size=cfg.batch_size, lr=cfg.lr * cfg.lr_decay ** (t - 1))
        updates, extra = train_clients(self.model, self.params, batch, local, ids[mine],
                                       round_seed, self.objective)
        inputs = {k: self.dist.gather(np.asarray(v, dtype=np.float64), m)
                  for k, v in self.objective.report(extra).items()}
        inputs.update(rules.round_inputs(self.rule, lambda: self.dist.gather_rows(updates, m)))

        coef = np.asarray(self.rule.weights(ids, losses, num_samples=counts, **inputs),
                          dtype=np.float64)
        direction = torch.zeros_like(self.params)
        if updates.shape[0]:
            ops.weighted_average(updates, coef[mine], out=direction)
        self.dist.sum(direction)
        step = {"lr": cfg.server_lr} if rules.takes_server_lr(self.rule) else {}
        self.rule.aggregate(direction[None], [1.0], base=self.params, **step)
        return {"participants": int(m), "train_loss": float(np.mean(losses)),
                "max_coefficient": float(np.max(coef))}

    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        loss, acc = evaluate_clients(self.model, self.params, self._eval_batch)
        return acc, loss, self._eval_batch.counts

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> Dict[str, Any]:
        return {"params": self.params.clone(), "rule": self.rule.state_dict()}

    def _load(self, state: Dict[str, Any]) -> None:
        params = torch.as_tensor(state["params"]).float()
        if params.shape != self.params.shape:
            raise ValueError(f"checkpoint parameters have shape {tuple(params.shape)}; the "
                             f"model has {tuple(self.params.shape)}")
        self.rule.load_state_dict(state["rule"])
        self.params = params.clone()
