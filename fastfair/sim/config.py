"""Every knob of a simulation, checked (types and ranges) when the configuration is made."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from fastfair._options import check_options, dataclass_options
from fastfair.sim.data import registry

DATASETS = tuple(registry.DATASETS)
MODELS = tuple(registry.MODELS)
DEVICE = re.compile(r"cpu|cuda(:\d+)?")
PARTITIONS = ("iid", "dirichlet", "pathological")


@dataclass
class SimulationConfig:
    """Every knob of one run. The defaults (100 Synthetic(1, 1) clients, 10 per round, 200
    rounds) compare rules in seconds per rule on 2 cores.

    ``rule`` is a rule of :mod:`fastfair.aggregators.registry` or a method (``fedevg``,
    ``superfed-mm``, ``superfed-lm``) with its ``rule_options``; ``server_optimizer`` (``sgd``
    with ``lr = server_lr`` by default) takes the server step of the rules, with
    ``server_options`` (its ``lr`` defaults to ``server_lr``). Data sets read from files take
    ``data_dir`` (vision ones may ``download`` missing files); ``model`` None is the data set's
    default (:data:`fastfair.sim.data.registry.DATASETS`). Every value is checked here:
    a wrong type is a ``TypeError`` and a value out of range a ``ValueError``, both naming the
    field.
    """

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
    # grouped: latent groups of power-law sizes, each a shift of a common model
    groups: int = 10
    group_power: float = 1.5
    group_shift: float = 1.0
    # data read from files (every data set but the generated ones)
    data_dir: Optional[str] = None
    download: bool = False
    # digits and the vision data sets
    partition: str = "dirichlet"
    dirichlet_alpha: float = 0.3
    classes_per_client: int = 2
    # model and local training
    model: Optional[str] = None
    hidden: int = 64
    epochs: int = 1
    local_steps: Optional[int] = None
    batch_size: int = 32
    lr: float = 0.1
    lr_decay: float = 1.0
    # server
    server_lr: float = 1.0
    server_optimizer: str = "sgd"
    server_options: Dict[str, Any] = field(default_factory=dict)
    # availability and evaluation
    availability: str = "uniform"
    availability_options: Dict[str, Any] = field(default_factory=dict)
    eval_every: int = 5
    eval_clients: int = 1000
    # fraction of each client's training samples held out to choose hyperparameters on (0: none)
    validation: float = 0.0
    # where the model, the cohort's data and training live: "cpu", "cuda" or "cuda:N"
    device: str = "cpu"

    def __post_init__(self) -> None:
        values = dataclasses.asdict(self)
        spec = dataclass_options(type(self))
        check_options("SimulationConfig", values, spec)
        for name in ("clients", "per_round", "rounds", "eval_every", "eval_clients", "batch_size",
                     "epochs", "max_samples", "hidden", "classes_per_client", "groups"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.local_steps is not None and self.local_steps < 1:
            raise ValueError(f"local_steps must be >= 1 or None; got {self.local_steps}")
        if not DEVICE.fullmatch(self.device):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {self.device!r}")
        if not 0 <= self.validation <= 0.5:
            raise ValueError(f"validation must be in [0, 0.5]; got {self.validation}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0; got {self.seed}")
        if self.per_round > self.clients:
            raise ValueError(f"per_round ({self.per_round}) cannot exceed clients ({self.clients})")
        for name, choices in (("dataset", DATASETS), ("model", MODELS + (None,)),
                              ("partition", PARTITIONS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}; got "
                                 f"{getattr(self, name)!r}")
        if not (self.lr > 0 and self.server_lr > 0 and 0 < self.lr_decay <= 1):
            raise ValueError(f"lr and server_lr must be > 0 and lr_decay in (0, 1]; got lr="
                             f"{self.lr}, server_lr={self.server_lr}, lr_decay={self.lr_decay}")
        if not (self.synthetic_alpha >= 0 and self.synthetic_beta >= 0
                and self.dirichlet_alpha > 0 and self.group_power >= 0 and self.group_shift >= 0):
            raise ValueError("synthetic_alpha, synthetic_beta, group_power and group_shift must "
                             "be >= 0 and dirichlet_alpha > 0")
        for name in ("rule_options", "server_options", "availability_options"):
            options = getattr(self, name)
            if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
                raise TypeError(f"{name} must be a dict of option names to values; got "
                                f"{options!r}")

        self._check_used()
        registry.check_pair(self.dataset, self.model)
        family = registry.DATASETS[self.dataset].family
        if family != "generated" and not (self.data_dir and os.path.isdir(self.data_dir)):
            raise ValueError(f"dataset {self.dataset!r} is read from files: data_dir "
                             f"(--data-dir) must be an existing folder; got {self.data_dir!r} "
                             "(the README says where to get each data set)")

    def _check_used(self) -> None:
        """Refuses a non-default value of a field the other fields make unused."""
        changed = self.non_default_fields()
        family = registry.DATASETS[self.dataset].family
        split = self.dataset == "digits" or family == "vision"
        unused = {
            "synthetic_alpha": self.dataset != "synthetic", "synthetic_beta":
            self.dataset != "synthetic",
            "max_samples": self.dataset not in ("synthetic", "grouped"),
            "groups": self.dataset != "grouped", "group_power": self.dataset != "grouped",
            "group_shift": self.dataset != "grouped",
            "data_dir": family == "generated", "download": family != "vision",
            "partition": not split,
            "dirichlet_alpha": not split or self.partition != "dirichlet",
            "classes_per_client": not split or self.partition != "pathological",
            "hidden": (self.model or registry.DATASETS[self.dataset].default_model) != "mlp",
            "epochs": self.local_steps is not None}
        for name, is_unused in unused.items():
            if is_unused and name in changed:
                raise ValueError(f"{name} = {changed[name]!r} has no effect in this configuration "
                                 f"(dataset={self.dataset!r}, partition={self.partition!r}, "
                                 f"model={self.model!r}, local_steps={self.local_steps!r}); "
                                 "leave it at its default")

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SimulationConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown configuration keys: {', '.join(unknown)}")
        return cls(**d)

    def non_default_fields(self) -> Dict[str, Any]:
        """The fields whose values differ from the defaults."""
        out = {}
        for f in dataclasses.fields(self):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            if getattr(self, f.name) != default:
                out[f.name] = getattr(self, f.name)
        return out
