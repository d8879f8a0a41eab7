"""Federated algorithms that are not coefficient rules: FedEvg (a federated energy-based model
that synthesises a server-side data set), SuPerFed-MM / -LM (personalisation along a low-loss
line between a federated and a local model) and Ditto (a personal model per client, pulled
toward the global one). No simulator code: :mod:`fastfair.sim` runs them.
"""

from typing import Dict

from fastfair._options import OptionSpec, check_name, dataclass_options

#: The methods by the public name the simulator and the command line use.
METHODS = ("fedevg", "superfed-mm", "superfed-lm", "ditto")


def method_options(name: str) -> Dict[str, OptionSpec]:
    """The options of method ``name`` (its ``rule_options``, ``--rule-option``) with their
    defaults: :class:`~fastfair.methods.fedevg.FedEvgOptions`' fields for FedEvg,
    :class:`~fastfair.methods.superfed.SuperFedOptions`' but ``mode`` (which the name sets) for
    SuPerFed, :class:`~fastfair.methods.ditto.DittoOptions`' for Ditto. Imports the method (and
    torch for FedEvg) only when asked."""
    check_name("method", name, list(METHODS))
    if name == "fedevg":
        from fastfair.methods.fedevg import FedEvgOptions

        return dataclass_options(FedEvgOptions)
    if name == "ditto":
        from fastfair.methods.ditto import DittoOptions

        return dataclass_options(DittoOptions)
    from fastfair.methods.superfed import SuperFedOptions

    return {k: v for k, v in dataclass_options(SuperFedOptions).items() if k != "mode"}
