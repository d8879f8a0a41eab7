"""Every name the aggregation layer answers to: the tables of the rules, the server optimisers
and the client objectives (:class:`~fastfair._table.Table`, each class named by its module and
imported on its first lookup), and the choices of the bound and the group weighting.

Importing this module imports no rule. The command line reads its choices here, so that
``fastfair --help`` starts without the rules and the kernels' wrappers behind them; a name is
written once, in its table.
"""

from typing import Any, Tuple

from fastfair._table import Table

_A = "fastfair.aggregators."
#: Every rule by its public name (its class's ``name``) and where its class lives, imported on
#: its first lookup.
RULES: Table[Any] = Table("rule", targets={
    "fedavg": _A + "fedavg:FedAvg", "fairavg": _A + "fedavg:FairAvg",
    "fedprox": _A + "fedavg:FedProx", "aaggff-d": _A + "aaggff:AAggFFD",
    "aaggff-s": _A + "aaggff:AAggFFS", "fedmaba": _A + "fedmaba:FedMABA",
    "fedcvar": _A + "fedcvar:FedCVaRAvg", "qfedavg": _A + "qfedavg:QFedAvg",
    "term": _A + "term:TERM", "afl": _A + "afl:AFL", "propfair": _A + "propfair:PropFair",
    "fedmgda": _A + "fedmgda:FedMGDA"})
#: Every server optimiser by its public name (its class's ``name``).
SERVER_OPTIMIZERS: Table[Any] = Table("server optimizer", targets={
    "sgd": _A + "server_opt:SGD", "fedavgm": _A + "server_opt:FedAvgM",
    "fedadam": _A + "server_opt:FedAdam", "fedyogi": _A + "server_opt:FedYogi",
    "fedadagrad": _A + "server_opt:FedAdagrad"})
#: Every client objective kind, by the name a client config carries (its class's ``kind``).
OBJECTIVES: Table[Any] = Table("objective", targets={
    "plain": _A + "objectives:ClientObjective", "proximal": _A + "objectives:ProximalObjective",
    "propfair": _A + "objectives:PropFairObjective", "cvar": _A + "objectives:CVaRObjective"})
#: The names alone, in the tables' order, for the command line's choices.
RULE_NAMES: Tuple[str, ...] = tuple(RULES)
SERVER_OPTIMIZER_NAMES: Tuple[str, ...] = tuple(SERVER_OPTIMIZERS)
OBJECTIVE_NAMES: Tuple[str, ...] = tuple(OBJECTIVES)
#: What an update's norm bound is relative to (:mod:`fastfair.aggregators.bounds`).
NORM_REFERENCES: Tuple[str, ...] = ("median", "absolute")
#: The prior and the within-group share of a rule over groups
#: (:class:`~fastfair.aggregators.over_groups.OverGroups`).
PRIORS: Tuple[str, ...] = ("uniform", "size")
SHARES: Tuple[str, ...] = ("samples", "uniform")
