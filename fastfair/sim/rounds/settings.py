"""The settings of the round and of the run: what the rule is and how it is composed
(:class:`RuleSettings`: the rule or method, the client objective, the fairness axis, the server
optimiser, the bound on a client's influence) and how the run executes
(:class:`ExecutionSettings`: seed, precision, device). Torch-free: the command line reads them
to make its options."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from fastfair.aggregators.names import (
    NORM_REFERENCES,
    OBJECTIVE_NAMES,
    PRIORS,
    RULE_NAMES,
    SERVER_OPTIMIZER_NAMES,
    SHARES,
)
from fastfair.sim.settings import (
    EXECUTION,
    RULES,
    TRAINING,
    Settings,
    check_option_tables,
    check_ranges,
    doc,
    named,
    refuse_unused,
)
from fastfair.sim.training.settings import PRECISIONS

#: The values of ``device``.
DEVICE = re.compile(r"cpu|cuda(:\d+)?")
#: What a rule weighs: the clients, or the groups the data set knows.
FAIR_OVER = ("clients", "groups")


@dataclass
class RuleSettings(Settings):
    """The rule and how it is composed: ``rule`` is a rule of
    :mod:`fastfair.aggregators.registry` or a method (``fedevg``, ``superfed-mm``,
    ``superfed-lm``) with its ``rule_options``; ``objective`` (None: the rule's own) is what the
    clients minimise, with ``objective_options`` (:mod:`fastfair.aggregators.compose`);
    ``server_optimizer`` (``sgd`` by default) takes the server step, with ``server_options`` and
    learning rate ``server_lr`` (None: the optimiser's own default); ``max_update_norm`` and
    ``max_samples_per_client`` bound one client's influence
    (:mod:`fastfair.aggregators.bounds`)."""

    rule: str = field(default="fedavg", metadata=doc(RULES, "the rule or method"))
    rule_options: Dict[str, Any] = field(default_factory=dict,
                                         metadata=doc(RULES, "the rule's options"))
    # the client objective, an axis apart from the rule (fastfair.aggregators.compose)
    objective: Optional[str] = field(default=None, metadata=doc(
        RULES, "what the clients minimise under any rule: plain, proximal (FedProx's term, "
        "option mu) or propfair (options M, epsilon, extension); none: the rule's own "
        "(docs/algorithms.md lists the combinations)",
        choices=OBJECTIVE_NAMES))
    objective_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        RULES, "an objective option, e.g. mu=0.01 (repeatable)"))
    # fairness over the groups the data set knows (fastfair.aggregators.OverGroups)
    fair_over: str = field(default="clients", metadata=doc(
        RULES, "what the rule weighs: the clients, or the groups the data set knows (the "
        "grouped workload's, npz-clients' group entries, --groups-file, --group-by-class); "
        "over groups a client gets its group's coefficient times its share of the group",
        choices=FAIR_OVER))
    group_prior: str = field(default="uniform", metadata=doc(
        RULES, "--fair-over groups: the groups' weights a rule that does not adapt reproduces: "
        "uniform (group-balanced) or size (each group's share of the samples: FedAvg)",
        choices=PRIORS))
    group_share: str = field(default="samples", metadata=doc(
        RULES, "--fair-over groups: a client's share of its group's coefficient, by its samples "
        "or uniform", choices=SHARES))
    # server
    server_lr: Optional[float] = field(default=None, metadata=doc(
        TRAINING, "the server optimizer's learning rate; none: its documented default (1 for "
        "sgd and fedavgm, 0.01 for fedadam, fedyogi and fedadagrad; docs/defaults.md)"))
    server_optimizer: str = field(default="sgd", metadata=doc(
        TRAINING, "the server step of the rules",
        choices=SERVER_OPTIMIZER_NAMES))
    server_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        TRAINING, "a server optimizer option, e.g. momentum=0.5 (repeatable)"))
    # the opt-in bound on one client's influence (fastfair.aggregators.bounds, shared with the
    # Flower strategy)
    max_update_norm: Optional[float] = field(default=None, metadata=doc(
        RULES, "clip each client's update to this norm before the rule sees it: a multiple of "
        "the round's median update norm, or with --update-norm-reference absolute a norm in "
        "the parameters' units (default: no clip)"))
    update_norm_reference: str = field(default="median", metadata=doc(
        RULES, "what --max-update-norm multiplies: the round's median update norm, or "
        "nothing (absolute)", choices=NORM_REFERENCES))
    max_samples_per_client: Optional[float] = field(default=None, metadata=doc(
        RULES, "count a client's samples as at most this many when rules weigh by counts "
        "(default: no cap)"))

    def _check(self) -> None:
        # The checks that build part of a rule load here, not with the module: the command
        # line's parser reads the fields above and starts without the rules.
        from fastfair._options import check_name
        from fastfair.aggregators.bounds import check_bound
        from fastfair.aggregators.compose import check_objective_options
        from fastfair.methods import METHODS

        check_name("rule (--rule)", self.rule, [*RULE_NAMES, *METHODS])
        check_ranges(self, ("server_lr", self.server_lr is None or self.server_lr > 0, "> 0"))
        check_option_tables(self, "rule_options", "objective_options", "server_options")
        check_bound(self.max_update_norm, self.update_norm_reference,
                    self.max_samples_per_client, names={name: named(name) for name in (
                        "max_update_norm", "update_norm_reference", "max_samples_per_client")})
        if self.max_update_norm is None and self.update_norm_reference != "median":
            raise ValueError(f"update_norm_reference = {self.update_norm_reference!r} has no "
                             "effect without max_update_norm (--max-update-norm): set that, or "
                             "leave update_norm_reference at its default")
        check_objective_options(self.objective, self.objective_options)
        refuse_unused(self, {"group_prior": self.fair_over != "groups",
                             "group_share": self.fair_over != "groups"},
                      f"fair_over={self.fair_over!r}")


@dataclass
class ExecutionSettings(Settings):
    """How the run executes: its ``seed`` (of the data, the models and every draw), the
    arithmetic of local training (``precision``) and where it lives (``device``)."""

    seed: int = field(default=0, metadata=doc(
        RULES, "the seed of the data, the models and every draw of the run"))
    precision: str = field(default="fp32", metadata=doc(
        EXECUTION, "the arithmetic of the cohort's forward and backward passes: fp32, or bf16 / "
        "fp16 autocast (parameters, updates, aggregation and rule state stay fp32/fp64); "
        "refused where the device cannot run it", choices=tuple(PRECISIONS)))
    device: str = field(default="cpu", metadata=doc(
        EXECUTION, "cpu, cuda or cuda:N: where the model, the cohort's data and training live "
        "(under torchrun with cuda, each process uses GPU LOCAL_RANK)"))

    def _check(self) -> None:
        if not DEVICE.fullmatch(self.device):
            raise ValueError(f"device (--device) must be 'cpu', 'cuda' or 'cuda:N'; got "
                             f"{self.device!r}")
        if not 0 <= self.seed < 2 ** 63:  # seeds feed int64 generators (torch, the kernels)
            raise ValueError(f"seed (--seed) must be in [0, 2**63); got {self.seed}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"{named('precision')} must be one of {', '.join(PRECISIONS)}; "
                             f"got {self.precision!r}")
