"""Aggregation rules as drop-in aggregators: one module per rule, each a small stateful object over
pure functions. The common contract (construction, ``weights``, ``aggregate``, validation before
mutation, versioned ``state_dict``) is documented in :mod:`fastfair.aggregators.base`.
"""

from fastfair.aggregators.aaggff import AAggFFD, AAggFFS
from fastfair.aggregators.afl import AFL
from fastfair.aggregators.base import FORMAT_VERSION, Aggregator
from fastfair.aggregators.fedavg import FairAvg, FedAvg, FedProx
from fastfair.aggregators.fedcvar import FedCVaRAvg
from fastfair.aggregators.fedmaba import FedMABA
from fastfair.aggregators.fedmgda import FedMGDA
from fastfair.aggregators.propfair import PropFair
from fastfair.aggregators.qfedavg import QFedAvg
from fastfair.aggregators.server_opt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from fastfair.aggregators.term import TERM

__all__ = ["AAggFFD", "AAggFFS", "AFL", "FORMAT_VERSION", "Aggregator", "FairAvg", "FedAdagrad",
           "FedAdam", "FedAvg", "FedAvgM", "FedCVaRAvg", "FedMABA", "FedMGDA", "FedProx", "FedYogi",
           "PropFair", "QFedAvg", "TERM"]
