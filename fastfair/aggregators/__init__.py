"""Aggregation rules as drop-in aggregators: one module per rule, each a small stateful object over
pure functions; server optimisers apart from the rules; what clients minimise; the opt-in bound on
one client's influence (:mod:`fastfair.aggregators.bounds`); any rule over groups of clients
(:class:`~fastfair.aggregators.over_groups.OverGroups`); and the registry that names them all.
The common contract (construction, ``weights``, ``aggregate``, validation before mutation, versioned
``state_dict``, what a rule declares) is documented in :mod:`fastfair.aggregators.base`.
"""

from fastfair.aggregators import registry
from fastfair.aggregators.aaggff import AAggFFD, AAggFFS
from fastfair.aggregators.afl import AFL
from fastfair.aggregators.base import FORMAT_VERSION, Aggregator
from fastfair.aggregators.bounds import UpdateBound
from fastfair.aggregators.fedavg import FairAvg, FedAvg, FedProx
from fastfair.aggregators.fedcvar import FedCVaRAvg
from fastfair.aggregators.fedmaba import FedMABA
from fastfair.aggregators.fedmgda import FedMGDA
from fastfair.aggregators.objectives import ClientObjective
from fastfair.aggregators.over_groups import OverGroups, ReportedGroups
from fastfair.aggregators.propfair import PropFair
from fastfair.aggregators.qfedavg import QFedAvg
from fastfair.aggregators.registry import RULES, build, build_server_optimizer
from fastfair.aggregators.server_opt import (
    SERVER_OPTIMIZERS,
    SGD,
    FedAdagrad,
    FedAdam,
    FedAvgM,
    FedYogi,
    ServerOptimizer,
)
from fastfair.aggregators.term import TERM

__all__ = [
    "AAggFFD", "AAggFFS", "AFL", "FORMAT_VERSION", "Aggregator", "ClientObjective", "FairAvg",
    "FedAdagrad", "FedAdam", "FedAvg", "FedAvgM", "FedCVaRAvg", "FedMABA", "FedMGDA", "FedProx",
    "FedYogi", "OverGroups", "PropFair", "QFedAvg", "RULES", "ReportedGroups", "SERVER_OPTIMIZERS",
    "SGD",
    "ServerOptimizer", "TERM", "UpdateBound", "build", "build_server_optimizer", "registry",
]
