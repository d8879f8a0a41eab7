r"""The client objective as an axis of its own: a run is (client objective) x (mixing rule) x
(server optimiser), each chosen independently.

.. code-block:: python

    from fastfair.aggregators import compose, registry

    rule = registry.build("aaggff-d", 100)
    chosen = compose.choose_objective(rule, "proximal", {"mu": 0.01})
    objective = compose.round_objective(rule, chosen)   # every round: ProximalObjective(0.01)

The objectives (``OBJECTIVE_NAMES``) are those of :mod:`fastfair.aggregators.objectives`,
under their config kinds: ``plain`` (the mean loss :math:`\ell`), ``proximal`` (FedProx:
:math:`\ell + \frac{\mu}{2}\lVert w - w^t\rVert^2`), ``propfair`` (PropFair's
:math:`-\log(1 - \ell/M)`, continued near the pole) and ``cvar`` (Fed-CVaR-Avg's relay
objective). An objective takes the options, defaults and checks of the rule that names it
(:data:`OBJECTIVE_RULES`): ``proximal`` takes FedProx's ``mu``, ``propfair`` PropFair's ``M``,
``epsilon`` and ``extension``, so ``--rule fedavg --objective proximal`` is ``--rule fedprox``
and ``--rule fedavg --objective propfair`` is ``--rule propfair``, bit for bit.

A combination is refused, with its reason, where it has no meaning (:func:`choose_objective`):

- a rule whose theory fixes its clients' objective (:data:`FIXED_BY_RULE`: FedProx and PropFair
  are an objective with FedAvg's mixing; Fed-CVaR-Avg's server averages the thresholds its
  objective trains) takes no other;
- ``cvar`` needs Fed-CVaR-Avg's server (which sends the threshold t and averages the reported
  t'), so it is only that rule's own;
- a rule that reads gradients at the received model (Fed-CVaR-Avg's one-step form) trains no
  local steps, so no objective changes it;
- ``propfair`` under PropFair's ``weighting="eg"``, whose weights already apply the transform.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from fastfair._options import check_name
from fastfair.aggregators.base import Aggregator
from fastfair.aggregators.objectives import OBJECTIVE_NAMES, OBJECTIVE_RULES, ClientObjective
from fastfair.aggregators.registry import build, objective_options

__all__ = ["FIXED_BY_RULE", "OBJECTIVE_NAMES", "OBJECTIVE_RULES", "build_objective",
           "check_objective_options", "choose_objective", "objective_options",
           "own_objective_kind", "round_objective"]

#: Why a rule with an objective of its own takes no other, by rule name.
FIXED_BY_RULE: Dict[str, str] = {
    "fedprox": "fedprox is the proximal objective with FedAvg's sample-weighted mixing (a "
               "preset of the two); name the mixing rule instead: fedavg with objective "
               "{objective!r} (--rule fedavg --objective {objective})",
    "propfair": "propfair (weighting='fedavg') is PropFair's loss transform with FedAvg's "
                "mixing (a preset of the two); name the mixing rule instead: fedavg with "
                "objective {objective!r} (--rule fedavg --objective {objective})",
    "fedcvar": "fedcvar's relay form averages the thresholds t' that its CVaR objective trains "
               "beside the model; clients of another objective train none",
}


def check_objective_options(name: Optional[str], options: Mapping[str, Any]) -> None:
    """Raises unless ``options`` are options of objective ``name`` (None: the rule's own, which
    takes none here) with values the objective takes; builds nothing that lasts and needs no
    rule (:func:`choose_objective` checks the combination with one).

    Raises
    ------
    ValueError
        Options without an objective, an unknown objective or option, a value out of range.
    TypeError
        An option value of the wrong type.
    """
    if name is None:
        if options:
            raise ValueError("objective options need an objective: give --objective (e.g. "
                             "proximal) or drop the objective options")
        return
    check_name("objective", name, OBJECTIVE_NAMES)
    if name not in OBJECTIVE_RULES:
        if options:
            raise ValueError(f"objective {name!r} takes no options; got "
                             f"{', '.join(sorted(options))}")
        return
    build_objective(name, options)


def build_objective(name: str, options: Mapping[str, Any]) -> Optional[ClientObjective]:
    """Objective ``name`` with ``options`` over its defaults; None for ``plain`` (the mean loss
    needs no objective object, and training takes its fastest path).

    Names, option names, types and values are checked by the rule the objective takes its
    options from (:data:`OBJECTIVE_RULES`), so every error names the objective and the option.

    Raises
    ------
    ValueError
        An unknown objective or option, a value out of range, options for ``plain``, or
        ``cvar`` (which only Fed-CVaR-Avg's server feeds: :data:`FIXED_BY_RULE`).
    TypeError
        An option value of the wrong type.
    """
    if name not in OBJECTIVE_RULES:
        check_objective_options(name, options)
        if name == "cvar":
            raise ValueError("objective 'cvar' trains a threshold t beside the model that only "
                             "fedcvar's server sends and averages each round: run --rule "
                             "fedcvar (its relay form is this objective with uniform mixing)")
        return None
    rule, names = OBJECTIVE_RULES[name]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ValueError(f"objective {name!r} has no option {unknown[0]!r}; its options: "
                         f"{', '.join(f'{k}={v!r}' for k, v in objective_options(name).items())}")
    try:
        return build(rule, 1, **options).client_objective()
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc).replace(f"rule {rule!r}", f"objective {name!r}")) from None


def own_objective_kind(rule: Aggregator) -> str:
    """The kind of objective ``rule``'s clients minimise when none is chosen (``"plain"`` when
    :meth:`~fastfair.aggregators.Aggregator.client_objective` is None)."""
    own = rule.client_objective()
    return ClientObjective.kind if own is None else own.kind


def choose_objective(rule: Aggregator, name: Optional[str],
                     options: Optional[Mapping[str, Any]] = None) -> Optional[ClientObjective]:
    """The objective that replaces ``rule``'s own for every round, or None where the rule's own
    stands (no choice, or the choice is the rule's own kind, which it keeps with its state).

    Parameters
    ----------
    rule
        The mixing rule (any :class:`~fastfair.aggregators.Aggregator`, a rule over groups
        included).
    name
        One of ``OBJECTIVE_NAMES``, or None for the rule's own.
    options
        The objective's options (:func:`objective_options`); only with ``name``.

    Returns
    -------
    ClientObjective or None
        Pass it to :func:`round_objective` every round.

    Raises
    ------
    ValueError
        The combination has no meaning (see the module docstring), or the name or options are
        refused by :func:`build_objective`. Nothing is changed.
    """
    options = dict(options or {})
    check_objective_options(name, options)
    if name is None:
        return None
    own = own_objective_kind(rule)
    if name == own:
        if options:
            raise ValueError(f"rule {rule.name!r} minimises the {name!r} objective of its own: "
                             "set its options as the rule's options (--rule-option "
                             f"{next(iter(options))}=...), not as objective options")
        return None
    if own != ClientObjective.kind:
        reason = FIXED_BY_RULE.get(rule.name, f"rule {rule.name!r} fixes its clients' objective "
                                              f"({own!r}) by its theory")
        raise ValueError(f"objective {name!r} with rule {rule.name!r}: "
                         + reason.format(objective=name))
    if rule.expects_gradients:
        raise ValueError(f"objective {name!r} with rule {rule.name!r}: the rule reads each "
                         "client's gradient of its plain loss at the received model, with no "
                         "local steps for an objective to change (use fedcvar's relay form)")
    if name == "propfair" and getattr(rule, "weighting", None) == "eg":
        raise ValueError("objective 'propfair' with rule 'propfair' (weighting='eg'): the eg "
                         "weights n_k / (M - F_k) already apply the transform's gradient; use "
                         "weighting='fedavg' or the plain objective")
    return build_objective(name, options)


def round_objective(rule: Aggregator,
                    chosen: Optional[ClientObjective]) -> Optional[ClientObjective]:
    """What this round's clients minimise: ``chosen`` (from :func:`choose_objective`), else the
    rule's own :meth:`~fastfair.aggregators.Aggregator.client_objective` (asked every round: it
    may carry the rule's state). None is the plain mean loss."""
    return chosen if chosen is not None else rule.client_objective()
