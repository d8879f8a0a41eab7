"""What a configuration builds for a round runner: its rule plan (the rule, the server
optimiser, the update bound and the client objective, resolved once) and its model."""

from __future__ import annotations

from typing import Optional

from fastfair.aggregators import OverGroups, registry
from fastfair.aggregators.base import Aggregator
from fastfair.aggregators.bounds import UpdateBound
from fastfair.aggregators.compose import choose_objective
from fastfair.aggregators.objectives import ClientObjective
from fastfair.aggregators.over_groups import check_group_form
from fastfair.aggregators.server_opt import ServerOptimizer
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.models.catalog import build_model
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.names import DATASETS


class RulePlan:
    """The rule settings of ``config`` resolved once, before any data are read, for the
    validation of a run and its runner alike: the server optimiser, the update bound and, with
    ``rule`` (a runner of the rules' engine), the rule and the client objective.

    Making the plan refuses what cannot run: the server optimiser's options, the rule's options
    and participation (AAggFF-S needs ``per_round == clients``), over groups its group form (the
    groups themselves are known once the data set is), and the rule's combination with the
    client objective (:func:`~fastfair.aggregators.compose.choose_objective`), whose own term
    must let SGD with ``config.lr`` be stable
    (:meth:`~fastfair.aggregators.objectives.ClientObjective.check_step`). What it builds
    is the run's: :meth:`rule` and :meth:`optimizer` hand it over on their first call and build
    afresh on later ones (a checkpoint loaded into new state), so a run builds each once and a
    resume once more.

    Attributes
    ----------
    bound : UpdateBound
        ``max_update_norm``, ``update_norm_reference``, ``max_samples_per_client``.
    objective : ClientObjective or None
        The chosen client objective; None where the rule's own stands.
    """

    def __init__(self, config: SimulationConfig, rule: bool = True) -> None:
        self.config = config
        self.bound = UpdateBound(config.max_update_norm, config.update_norm_reference,
                                 config.max_samples_per_client)
        self._optimizer: Optional[ServerOptimizer] = build_server_optimizer(config)
        self._rule: Optional[Aggregator] = None
        self.objective: Optional[ClientObjective] = None
        if not rule:
            return
        if config.fair_over == "groups":  # built over the groups once the data set is read
            check_group_form(config.rule, config.rule_options, config.group_prior)
            probe = registry.build(config.rule, config.clients, **config.rule_options)
        else:
            probe = self._rule = build_rule(config)
        self.objective = choose_objective(probe, config.objective, config.objective_options)
        objective = self.objective or probe.client_objective()
        if objective is not None:  # its own term must let SGD with the client lr be stable
            objective.check_step(config.lr)

    def rule(self, dataset: Optional[FederatedDataset] = None) -> Aggregator:
        """The run's rule: the one built with the plan on the first call (over ``dataset``'s
        groups with ``fair_over == "groups"``, built now), a new one after."""
        rule, self._rule = self._rule, None
        return rule if rule is not None else build_rule(self.config, dataset)

    def optimizer(self) -> ServerOptimizer:
        """The run's server optimiser: the one built with the plan on the first call, a new one
        after."""
        optimizer, self._optimizer = self._optimizer, None
        return optimizer if optimizer is not None else build_server_optimizer(self.config)


def build_rule(config: SimulationConfig,
               dataset: Optional[FederatedDataset] = None) -> Aggregator:
    """The rule of ``config`` (registry name and options) for ``config.clients`` clients; a rule
    that needs every client every round (AAggFF-S) is refused unless ``per_round == clients``.

    With ``config.fair_over == "groups"`` the rule runs over ``dataset``'s groups
    (:class:`~fastfair.aggregators.OverGroups` with ``config.group_prior`` and
    ``config.group_share``), so ``dataset`` is required."""
    if config.fair_over == "groups":
        check_group_form(config.rule, config.rule_options, config.group_prior)
        groups = None if dataset is None else dataset.group_map()
        if dataset is None or groups is None:
            raise ValueError("fair_over = 'groups' (--fair-over groups) needs the clients' groups; "
                             "the data set of this run has none: give --groups-file (a CSV of "
                             "client,group), --group-by-class (digits, vision sets), group "
                             "entries in npz-clients files, or ArrayDataset(groups=)")
        return OverGroups(config.rule, groups, num_clients=config.clients,
                          num_groups=dataset.num_groups, prior=config.group_prior,
                          share=config.group_share, rule_options=config.rule_options)
    rule = registry.build(config.rule, config.clients, **config.rule_options)
    if rule.full_participation and config.per_round != config.clients:
        raise ValueError(f"rule {config.rule!r} needs every client every round (cross-silo): set "
                         f"per_round (--per-round) to the number of clients, {config.clients}; "
                         f"got {config.per_round}")
    return rule


def build_server_optimizer(config: SimulationConfig) -> ServerOptimizer:
    """The server optimiser of ``config`` with ``config.server_options``; its learning rate is
    :func:`server_lr` (``config.server_lr``, or the optimiser's own default when None)."""
    if "lr" in config.server_options:
        lr = config.server_options["lr"]
        raise ValueError(f"server_options must not set lr (--server-option lr={lr}): the server "
                         f"learning rate is server_lr; give --server-lr {lr} (server_lr = {lr!r})")
    lr = {} if config.server_lr is None else {"lr": config.server_lr}
    return registry.build_server_optimizer(config.server_optimizer, **lr,
                                           **config.server_options)


def server_lr(config: SimulationConfig) -> float:
    """The server learning rate of ``config``: ``config.server_lr``, or the default ``lr`` of
    ``config.server_optimizer`` (``docs/defaults.md``) when None."""
    if config.server_lr is not None:
        return config.server_lr
    return float(registry.server_optimizer_options(config.server_optimizer)["lr"].default)


def model_for(config: SimulationConfig, dataset: FederatedDataset) -> FlatModel:
    """The model of a :class:`~fastfair.sim.config.SimulationConfig` (``config.model``, or the
    data set's default when None) for ``dataset``."""
    name = config.model or DATASETS[config.dataset].default_model
    return build_model(name, dataset, hidden=config.hidden, seed=config.seed)
