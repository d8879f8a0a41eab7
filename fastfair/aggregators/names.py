"""Every name the aggregation layer answers to, as plain data: the rules, the server
optimisers, the client objectives and the choices of the bound and the group weighting.

Importing this module imports no rule. The command line reads its choices here, so that
``fastfair --help`` starts without the rules and the kernels' wrappers behind them; the
modules that define the rules and optimisers read the same tuples or are checked against them
(``tests/aggregators/test_names.py``), so a name lives in one place.
"""

from typing import Tuple

#: Every rule by its public name (:data:`fastfair.aggregators.registry.RULES` in this order).
RULE_NAMES: Tuple[str, ...] = ("fedavg", "fairavg", "fedprox", "aaggff-d", "aaggff-s", "fedmaba",
                               "fedcvar", "qfedavg", "term", "afl", "propfair", "fedmgda")
#: Every server optimiser by name (:data:`fastfair.aggregators.server_opt.SERVER_OPTIMIZERS`).
SERVER_OPTIMIZER_NAMES: Tuple[str, ...] = ("sgd", "fedavgm", "fedadam", "fedyogi", "fedadagrad")
#: Every client objective kind, by the name a client config carries
#: (:mod:`fastfair.aggregators.objectives`).
OBJECTIVE_NAMES: Tuple[str, ...] = ("plain", "proximal", "propfair", "cvar")
#: What an update's norm bound is relative to (:mod:`fastfair.aggregators.bounds`).
NORM_REFERENCES: Tuple[str, ...] = ("median", "absolute")
#: The prior and the within-group share of a rule over groups
#: (:class:`~fastfair.aggregators.over_groups.OverGroups`).
PRIORS: Tuple[str, ...] = ("uniform", "size")
SHARES: Tuple[str, ...] = ("samples", "uniform")
