"""What a configuration builds for a round runner: its rule, its server optimiser and its model."""

from __future__ import annotations

from fastfair.aggregators import registry
from fastfair.aggregators.base import Aggregator
from fastfair.aggregators.server_opt import ServerOptimizer
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.data.registry import DATASETS
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.models.zoo import build_model


def build_rule(config: SimulationConfig) -> Aggregator:
    """The rule of ``config`` (registry name and options) for ``config.clients`` clients; a rule
    that needs every client every round (AAggFF-S) is refused unless ``per_round == clients``."""
    rule = registry.build(config.rule, config.clients, **config.rule_options)
    if rule.full_participation and config.per_round != config.clients:
        raise ValueError(f"rule {config.rule!r} needs every client every round (cross-silo): set "
                         f"per_round (--per-round) to the number of clients, {config.clients}; "
                         f"got {config.per_round}")
    return rule


def build_server_optimizer(config: SimulationConfig) -> ServerOptimizer:
    """The server optimiser of ``config``; its learning rate is ``config.server_lr``."""
    if "lr" in config.server_options:
        raise ValueError("server_options must not set lr: the server learning rate is "
                         "server_lr (--server-lr)")
    return registry.build_server_optimizer(config.server_optimizer, lr=config.server_lr,
                                           **config.server_options)


def model_for(config: SimulationConfig, dataset: FederatedDataset) -> FlatModel:
    """The model of a :class:`~fastfair.sim.config.SimulationConfig` (``config.model``, or the
    data set's default when None) for ``dataset``."""
    name = config.model or DATASETS[config.dataset].default_model
    return build_model(name, dataset, hidden=config.hidden, seed=config.seed)
