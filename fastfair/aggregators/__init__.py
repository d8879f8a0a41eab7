"""Aggregation rules as drop-in aggregators: one module per rule, each a small stateful object over
pure functions; server optimisers apart from the rules; what clients minimise; the opt-in bound on
one client's influence (:mod:`fastfair.aggregators.bounds`); any rule over groups of clients
(:class:`~fastfair.aggregators.over_groups.OverGroups`); and the registry that names them all.
The common contract (construction, ``weights``, ``aggregate``, validation before mutation, versioned
``state_dict``, what a rule declares) is documented in :mod:`fastfair.aggregators.base`.
"""

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
