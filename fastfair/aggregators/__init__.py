"""Aggregation rules as drop-in aggregators: one module per rule, each a small stateful object over
pure functions. The common contract (construction, ``weights``, ``aggregate``, validation before
mutation, versioned ``state_dict``) is documented in :mod:`fastfair.aggregators.base`.
"""

from fastfair.aggregators.base import FORMAT_VERSION, Aggregator
from fastfair.aggregators.fedavg import FairAvg, FedAvg, FedProx
from fastfair.aggregators.fedmaba import FedMABA

__all__ = ["FORMAT_VERSION", "Aggregator", "FairAvg", "FedAvg", "FedMABA", "FedProx"]
