"""Aggregation rules as drop-in aggregators: one module per rule, each a small stateful object over
pure functions; server optimisers apart from the rules; what clients minimise; the opt-in bound on
one client's influence (:mod:`fastfair.aggregators.bounds`); any rule over groups of clients
(:class:`~fastfair.aggregators.over_groups.OverGroups`); and the registry that names them all.
The common contract (construction, ``weights``, ``aggregate``, validation before mutation, versioned
``state_dict``, what a rule declares) is documented in :mod:`fastfair.aggregators.base`.
"""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    import fastfair.aggregators.registry as registry  # noqa: F401
    from fastfair.aggregators.aaggff import AAggFFD, AAggFFS  # noqa: F401
    from fastfair.aggregators.afl import AFL  # noqa: F401
    from fastfair.aggregators.base import FORMAT_VERSION, Aggregator  # noqa: F401
    from fastfair.aggregators.bounds import UpdateBound  # noqa: F401
    from fastfair.aggregators.fedavg import FairAvg, FedAvg, FedProx  # noqa: F401
    from fastfair.aggregators.fedcvar import FedCVaRAvg  # noqa: F401
    from fastfair.aggregators.fedmaba import FedMABA  # noqa: F401
    from fastfair.aggregators.fedmgda import FedMGDA  # noqa: F401
    from fastfair.aggregators.objectives import ClientObjective  # noqa: F401
    from fastfair.aggregators.over_groups import OverGroups, ReportedGroups  # noqa: F401
    from fastfair.aggregators.propfair import PropFair  # noqa: F401
    from fastfair.aggregators.qfedavg import QFedAvg  # noqa: F401
    from fastfair.aggregators.registry import RULES, build, build_server_optimizer  # noqa: F401
    from fastfair.aggregators.server_opt import (  # noqa: F401
        SERVER_OPTIMIZERS,
        SGD,
        FedAdagrad,
        FedAdam,
        FedAvgM,
        FedYogi,
        ServerOptimizer,
    )
    from fastfair.aggregators.term import TERM  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562), so that
#: the rule names (:mod:`fastfair.aggregators.names`) cost no rule's import.
_EXPORTS = {
    "fastfair.aggregators.aaggff": ("AAggFFD", "AAggFFS"),
    "fastfair.aggregators.afl": ("AFL",),
    "fastfair.aggregators.base": ("FORMAT_VERSION", "Aggregator"),
    "fastfair.aggregators.bounds": ("UpdateBound",),
    "fastfair.aggregators.fedavg": ("FairAvg", "FedAvg", "FedProx"),
    "fastfair.aggregators.fedcvar": ("FedCVaRAvg",),
    "fastfair.aggregators.fedmaba": ("FedMABA",),
    "fastfair.aggregators.fedmgda": ("FedMGDA",),
    "fastfair.aggregators.objectives": ("ClientObjective",),
    "fastfair.aggregators.over_groups": ("OverGroups", "ReportedGroups"),
    "fastfair.aggregators.propfair": ("PropFair",),
    "fastfair.aggregators.qfedavg": ("QFedAvg",),
    "fastfair.aggregators.registry": ("RULES", "build", "build_server_optimizer"),
    "fastfair.aggregators.server_opt": ("SERVER_OPTIMIZERS", "SGD", "FedAdagrad", "FedAdam",
                                        "FedAvgM", "FedYogi", "ServerOptimizer"),
    "fastfair.aggregators.term": ("TERM",),
}
__all__ = sorted([*(name for names in _EXPORTS.values() for name in names), "registry"])
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, ("registry",))
