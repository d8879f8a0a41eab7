"""Every rule and server optimiser under the one public name the command line, the simulator,
Flower and ``state_dict`` use, with their options and defaults.

.. code-block:: python

    from fastfair.aggregators import registry

    rule = registry.build("aaggff-d", 1000, cdf="frechet")       # == AAggFFD(1000, cdf="frechet")
    opt = registry.build_server_optimizer("fedadam", lr=0.01)
    print(registry.describe())                                     # every rule and its options

An unknown name or option is a ``ValueError`` that lists the valid ones and suggests the closest;
a value of the wrong type is a ``TypeError`` naming the option; both come before anything is
built.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from fastfair._options import OptionSpec, check_name, check_options, signature_options
from fastfair.aggregators.base import Aggregator
from fastfair.aggregators.names import RULES as RULES  # re-exported
from fastfair.aggregators.names import SERVER_OPTIMIZERS
from fastfair.aggregators.objectives import OBJECTIVE_NAMES, OBJECTIVE_RULES
from fastfair.aggregators.server_opt import ServerOptimizer


def _lookup(kind: str, name: Any, table: Mapping[str, Any]) -> Any:
    check_name(kind, name, list(table))
    return table[name]


def rule_options(name: str) -> Dict[str, OptionSpec]:
    """The options of rule ``name`` (constructor keywords after ``num_clients``) with defaults."""
    return signature_options(_lookup("rule", name, RULES).__init__, skip=("num_clients",))


def server_optimizer_options(name: str) -> Dict[str, OptionSpec]:
    """The options of server optimiser ``name`` with their defaults."""
    return signature_options(_lookup("server optimizer", name, SERVER_OPTIMIZERS).__init__)


def objective_options(name: str) -> Dict[str, Any]:
    """The options of client objective ``name`` with their defaults: those of the rule that
    names it (:data:`~fastfair.aggregators.objectives.OBJECTIVE_RULES`); empty for ``plain``
    and ``cvar``.

    Parameters
    ----------
    name
        One of ``OBJECTIVE_NAMES`` (:mod:`fastfair.aggregators.objectives`).

    Returns
    -------
    dict
        ``{option: default}``, e.g. ``{"mu": 0.1}`` for ``proximal``.
    """
    check_name("objective", name, list(OBJECTIVE_NAMES))
    if name not in OBJECTIVE_RULES:
        return {}
    rule, names = OBJECTIVE_RULES[name]
    spec = rule_options(rule)
    return {n: spec[n].default for n in names}


def check_rule_options(name: str, options: Dict[str, Any]) -> None:
    """Raises (ValueError / TypeError naming the rule and option) unless ``options`` are options
    of rule ``name`` with values of their types; builds nothing."""
    check_options(f"rule {name!r}", options, rule_options(name))


def build(name: str, num_clients: int, **options: Any) -> Aggregator:
    """Rule ``name`` for a population of ``num_clients``, e.g. ``build("fedmaba", 100,
    alpha=0.5)``. Names, option names and types are checked first; the rule's constructor then
    checks values (ranges, choices). Every error names the rule."""
    check_rule_options(name, options)
    try:
        return RULES[name](num_clients, **options)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"rule {name!r}: {exc}") from None


def build_server_optimizer(name: str, **options: Any) -> ServerOptimizer:
    """Server optimiser ``name`` (``sgd``, ``fedavgm``, ``fedadam``, ``fedyogi``,
    ``fedadagrad``) with ``options`` (e.g. ``lr=0.01``), checked like :func:`build`."""
    check_options(f"server optimizer {name!r}", options, server_optimizer_options(name))
    try:
        return SERVER_OPTIMIZERS[name](**options)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"server optimizer {name!r}: {exc}") from None


def describe() -> str:
    """A listing of every rule, client objective (:mod:`fastfair.aggregators.compose`) and
    server optimiser with its options and defaults."""

    lines: List[str] = ["rules:"]
    for name, cls in RULES.items():
        opts = ", ".join(s.describe() for s in rule_options(name).values())
        lines.append(f"  {name:<10} {cls.__name__:<11} {opts}")
    lines.append("client objectives (--objective; none: the rule's own):")
    for name in OBJECTIVE_NAMES:
        opts = ", ".join(f"{k}={v!r}" for k, v in objective_options(name).items())
        lines.append(f"  {name:<10} {'(fedcvar only)' if name == 'cvar' else opts}".rstrip())
    lines.append("server optimizers:")
    for name, opt_cls in SERVER_OPTIMIZERS.items():
        opts = ", ".join(s.describe() for s in server_optimizer_options(name).values())
        lines.append(f"  {name:<10} {opt_cls.__name__:<11} {opts}")
    return "\n".join(lines)
