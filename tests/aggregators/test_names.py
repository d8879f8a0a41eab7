"""The plain name tables (:mod:`fastfair.aggregators.names`, the choices in
:mod:`fastfair.sim.config`) list exactly what the registries that build the objects hold, in
their order, so the command line's choices and the objects never drift apart."""

from fastfair.aggregators import names
from fastfair.aggregators.registry import RULES
from fastfair.aggregators.server_opt import SERVER_OPTIMIZERS


def test_rule_and_server_optimizer_names_are_the_registries_keys():
    assert names.RULE_NAMES == tuple(RULES)
    assert all(cls.name == name for name, cls in RULES.items())
    assert names.SERVER_OPTIMIZER_NAMES == tuple(SERVER_OPTIMIZERS)


def test_objective_names_are_the_objectives_kinds():
    from fastfair.aggregators.objectives import OBJECTIVES

    assert names.OBJECTIVE_NAMES == tuple(OBJECTIVES)
