"""Federated algorithms that are not coefficient rules: FedEvg (a federated energy-based model
that synthesises a server-side data set), SuPerFed-MM / -LM (personalisation along a low-loss
line between a federated and a local model) and Ditto (a personal model per client, pulled
toward the global one). No simulator code: :mod:`fastfair.sim` runs them.
"""

from typing import Any, Dict

from fastfair._options import OptionSpec, dataclass_options
from fastfair._table import Table

#: The methods by the public name the simulator and the command line use, each with the
#: dataclass of its options (``rule_options``), imported on first lookup (torch for FedEvg).
METHODS: Table[Any] = Table("method", targets={
    "fedevg": "fastfair.methods.fedevg:FedEvgOptions",
    "superfed-mm": "fastfair.methods.superfed:SuperFedOptions",
    "superfed-lm": "fastfair.methods.superfed:SuperFedOptions",
    "ditto": "fastfair.methods.ditto:DittoOptions"})
#: Fields of a method's options that its name sets (SuPerFed's ``mode``: ``superfed-mm``,
#: ``superfed-lm``), so that are not options of their own.
SET_BY_NAME = ("mode",)


def method_options(name: str) -> Dict[str, OptionSpec]:
    """The options of method ``name`` (its ``rule_options``, ``--rule-option``) with their
    defaults: the fields of its options class in :data:`METHODS`
    (:class:`~fastfair.methods.fedevg.FedEvgOptions`,
    :class:`~fastfair.methods.superfed.SuperFedOptions`,
    :class:`~fastfair.methods.ditto.DittoOptions`) but those its name sets
    (:data:`SET_BY_NAME`). Imports the method (and torch for FedEvg) only when asked."""
    METHODS.check(name)
    return {k: v for k, v in dataclass_options(METHODS[name]).items() if k not in SET_BY_NAME}
