"""The rules the simulator runs, by command-line name, and what each asks of the clients: the
objective they train on (FedProx, PropFair, Fed-CVaR-Avg change it) and the extra per-round
inputs the server needs (update norms, the Gram matrix, reported thresholds)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch

from fastfair import aggregators as agg
from fastfair.sim.training import ClientObjective

RULES: Dict[str, Callable[..., agg.Aggregator]] = {
    "fedavg": agg.FedAvg,
    "fairavg": agg.FairAvg,
    "fedprox": agg.FedProx,
    "fedmaba": agg.FedMABA,
    "fedcvar": agg.FedCVaRAvg,
    "qfedavg": agg.QFedAvg,
    "term": agg.TERM,
    "propfair": agg.PropFair,
    "fedmgda": agg.FedMGDA,
    "aaggff-d": agg.AAggFFD,
    "aaggff-s": agg.AAggFFS,
    "afl": agg.AFL,
}

SERVER_OPTIMIZERS: Dict[str, Optional[Callable[..., agg.Aggregator]]] = {
    "none": None, "fedavgm": agg.FedAvgM, "fedadam": agg.FedAdam, "fedyogi": agg.FedYogi,
    "fedadagrad": agg.FedAdagrad,
}


def build_rule(name: str, num_clients: int, options: Dict[str, Any],
               server_optimizer: str = "none",
               server_options: Optional[Dict[str, Any]] = None,
               per_round: Optional[int] = None) -> agg.Aggregator:
    """The aggregator for rule ``name`` with hyperparameters ``options``, wrapped by a server
    optimiser when one is named (its options include ``lr``). With ``per_round``, a rule that
    needs every client every round (AAggFF-S) is refused unless ``per_round == num_clients``."""
    if name not in RULES:
        raise ValueError(f"unknown rule {name!r}; choose from {', '.join(sorted(RULES))}")
    full = getattr(RULES[name], "full_participation", False)
    if full and per_round is not None and per_round != num_clients:
        raise ValueError(f"rule {name!r} needs every client every round (cross-silo): set "
                         f"per_round (--per-round) to the number of clients, {num_clients}; got "
                         f"{per_round}")
    if server_optimizer not in SERVER_OPTIMIZERS:
        raise ValueError(f"unknown server optimizer {server_optimizer!r}; choose from "
                         f"{', '.join(sorted(SERVER_OPTIMIZERS))}")
    try:
        rule = RULES[name](num_clients, **options)
        wrapper = SERVER_OPTIMIZERS[server_optimizer]
        return rule if wrapper is None else wrapper(num_clients, rule, **(server_options or {}))
    except TypeError as exc:
        raise ValueError(f"rule {name!r}: {exc}") from exc


def takes_server_lr(rule: agg.Aggregator) -> bool:
    """Plain rules take the server learning rate per step; server optimisers own theirs."""
    return not isinstance(rule, agg.server_opt._ServerOptimizer)


def inner_rule(rule: agg.Aggregator) -> agg.Aggregator:
    return getattr(rule, "aggregator", rule)


class ProximalObjective(ClientObjective):
    """FedProx: mean loss + (mu / 2) ||theta_k - theta||^2."""

    def __init__(self, mu: float) -> None:
        self.mu = mu

    def __call__(self, per_sample_loss, mask, params, global_params, extra):
        prox = 0.5 * self.mu * (params - global_params.reshape(1, -1)).pow(2).sum(1)
        return self.mean_loss(per_sample_loss, mask) + prox


class PropFairObjective(ClientObjective):
    """PropFair: the rule's :meth:`~fastfair.aggregators.PropFair.client_loss` of each client's
    mean minibatch loss."""

    def __init__(self, rule: agg.PropFair) -> None:
        self.rule = rule

    def __call__(self, per_sample_loss, mask, params, global_params, extra):
        return self.rule.client_loss(self.mean_loss(per_sample_loss, mask))


class CVaRObjective(ClientObjective):
    r"""Fed-CVaR-Avg (relay form): each client trains (theta, t) on
    :math:`(1-\gamma)t + \frac{1-\gamma}{\alpha}[\ell - t]_+ + \gamma\ell` from the server's t
    and reports its final t as ``thresholds``."""

    def __init__(self, rule: agg.FedCVaRAvg, threshold_lr: float) -> None:
        self.rule = rule
        self.extra_lr = threshold_lr

    def init_extra(self, m: int) -> torch.Tensor:
        return torch.full((m,), float(self.rule.threshold), dtype=torch.float64)

    def report(self, extra):
        return {"thresholds": extra.numpy()}

    def __call__(self, per_sample_loss, mask, params, global_params, extra):
        return self.rule.client_objective(self.mean_loss(per_sample_loss, mask), extra)


def client_objective(rule: agg.Aggregator, lr: float) -> ClientObjective:
    """The objective clients of ``rule`` train on (``lr``: the client learning rate, also used
    for Fed-CVaR-Avg's threshold unless the rule sets ``lr_threshold``)."""
    base = inner_rule(rule)
    if isinstance(base, agg.FedProx):
        return ProximalObjective(base.mu)
    if isinstance(base, agg.PropFair):
        return PropFairObjective(base)
    if isinstance(base, agg.FedCVaRAvg) and base.form == "relay":
        return CVaRObjective(base, base.lr_threshold or lr)
    return ClientObjective()


def round_inputs(rule: agg.Aggregator, updates: Callable[[], torch.Tensor]) -> Dict[str, Any]:
    """Server-side inputs a rule needs beyond ids, losses and counts; ``updates()`` returns the
    whole cohort's updates [m, P] (gathered across processes when distributed)."""
    base = inner_rule(rule)
    if isinstance(base, agg.QFedAvg):
        return {"sq_norms": updates().double().pow(2).sum(1).numpy()}
    if isinstance(base, agg.FedMGDA):
        return {"updates": updates()}
    return {}
