r"""Fairness over groups: any rule run over G groups of clients (regions, devices, languages)
instead of over the clients themselves (docs/algorithms.md §8).

.. code-block:: python

    from fastfair.aggregators import OverGroups

    agg = OverGroups("aaggff-d", groups, prior="size")      # groups[k] in [0, G): k's group
    coef = agg.weights(ids, losses, num_samples=n)           # [m], as any rule's

One round over the cohort S (m clients, :math:`S_g` those of group g, :math:`n_k` their sample
counts, :math:`G_S` the groups present):

.. math::
   F_g = \frac{\sum_{k\in S_g} n_k F_k}{\sum_{k\in S_g} n_k},\qquad
   (c_g)_{g\in G_S} = \text{rule}(G_S, F),\qquad
   \tau_g = c_g / \max_h c_h,\qquad
   c_k = \frac{b_k\,\tau_{g(k)}}{\sum_{j\in S} b_j\,\tau_{g(j)}}

where :math:`b_k` is client k's weight under the prior alone (no adaptation): its group's
reference weight times its share of the group (``share="samples"``: :math:`n_k/\sum_{S_g} n`;
``"uniform"``: :math:`1/|S_g|`). ``prior="uniform"`` gives every group present the same
reference weight (group-balanced averaging, FairAvg over groups); ``prior="size"`` gives each
group its share of the samples, realised in the round as the cohort's own,
:math:`\sum_{S_g} n / \sum_S n`, so that :math:`b_k \propto n_k` and a rule that does not
adapt is FedAvg bit for bit. The inner rule runs over groups of equal standing (every group
counts 1 sample), and its coefficients are read as a tilt of the prior: it is the mixture the
decisions are relative to. For AAggFF-D that is exactly FTRL with the regulariser
:math:`\mathrm{KL}(p\Vert\pi)` in place of the entropy.

Rules whose round inputs are the updates (FedMGDA, q-FedAvg's ``"qffl"`` form) run over each
group's averaged update :math:`\Delta_g = \sum_{k\in S_g} s_k X_k` (s the shares above) as if
the group were one client, and :math:`c_k = c_g s_k` keeps their coefficients' scale (a step
size, 1/norm); they take ``prior="uniform"`` only. Fed-CVaR-Avg is refused (its server takes the
uniform mean of the relayed clients' (θ, t); its fairness lives in the client objective).
Client objectives (FedProx, PropFair) pass through unchanged.

No per-client state: the inner rule's state is over G groups; the group map is an array
``[K]`` (8 bytes per client) or a function of the ids (nothing per client). A round costs
O(m + G) plus the inner rule's round over the groups present.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from fastfair._arrays import read_only
from fastfair.aggregators import registry
from fastfair.aggregators._checks import StateSpec, check_choice, host_array
from fastfair.aggregators._group_map import (
    GroupMap,
    check_map,
    group_losses,
    group_updates,
    map_checksum,
    within_shares,
)
from fastfair.aggregators._group_map import (
    ReportedGroups as ReportedGroups,  # re-exported: a map the clients report
)
from fastfair.aggregators._state import FORMAT_VERSION
from fastfair.aggregators._updates import squared_norms
from fastfair.aggregators._weights import normalize
from fastfair.aggregators.base import UPDATE_INPUTS, Aggregator, Commit
from fastfair.aggregators.names import PRIORS as PRIORS  # re-exported
from fastfair.aggregators.names import SHARES as SHARES  # re-exported
from fastfair.aggregators.objectives import ClientObjective
from fastfair.state import StateDict

#: Rules with no group form, and why.
REFUSED: Dict[str, str] = {
    "fedcvar": "Fed-CVaR-Avg's server takes the uniform mean of the relayed clients' (theta, t) "
               "and its fairness lives in the client objective (a CVaR over users); there is no "
               "weighting of groups to make: run it per client",
    "over-groups": "it is already a group form: pass the inner rule's name",
}


def group_form(rule: Aggregator, prior: str = "uniform") -> str:
    """How ``rule`` (built over the groups) runs over groups: ``"tilt"`` (its coefficients tilt
    the prior) or ``"direct"`` (its round inputs are the updates: it runs on each group's
    averaged update and keeps its coefficients' scale). Raises ValueError naming the rule and
    the reason when it has no group form, or none with ``prior``."""
    name = rule.name or type(rule).__name__
    if name in REFUSED:
        raise ValueError(f"rule {name!r} has no group form: {REFUSED[name]}")
    if rule.allow_duplicates or rule.expects_gradients:
        raise ValueError(f"rule {name!r} has no group form: it weights relayed clients "
                         "(duplicates) or gradients at the received model, not groups")
    inputs = tuple(rule.round_inputs)
    other = [i for i in inputs if i not in UPDATE_INPUTS]
    if other:
        raise ValueError(f"rule {name!r} has no group form: its round input(s) "
                         f"{', '.join(other)} are per client, reported by the clients' objective")
    if not inputs:
        return "tilt"
    if prior != "uniform":
        raise ValueError(f"rule {name!r} over groups takes prior='uniform' only: its "
                         "coefficients are not a mixture over a reference (q-FedAvg's sum is its "
                         "step size, FedMGDA's scale is 1/norm), so there is no prior to tilt; "
                         "q-FedAvg's form='eg' (c ~ n F^q) takes either prior")
    return "direct"


def check_group_form(name: str, options: Optional[Mapping[str, Any]] = None,
                     prior: str = "uniform") -> str:
    """:func:`group_form` of rule ``name`` with ``options`` (a registry name), checked before
    any data are read: builds the rule over 2 groups and asks it."""
    check_choice(prior, "prior", PRIORS)
    if name in REFUSED:
        raise ValueError(f"rule {name!r} has no group form: {REFUSED[name]}")
    return group_form(registry.build(name, 2, **dict(options or {})), prior)


class OverGroups(Aggregator):
    r"""Any rule over G groups of clients (see the module docstring for the round).

    Parameters
    ----------
    rule
        The inner rule: a registry name (``"aaggff-d"``), built over G groups with
        ``rule_options``, or an :class:`Aggregator` built over ``num_groups`` clients.
    groups
        Client k's group in ``[0, G)``: an integer array ``[K]``, a function of an int64 id
        array ``[m]`` returning ``[m]`` groups (for populations too large to list; then give
        ``num_clients`` and ``num_groups``), or a :class:`ReportedGroups` whose groups the
        clients report each round (the Flower strategy's ``fastfair-group`` metric).
    num_clients
        K; default ``len(groups)`` for an array.
    num_groups
        G; default ``max(groups) + 1`` for an array.
    prior
        The groups' reference weights, which a rule that does not adapt reproduces:
        ``"uniform"`` (default; equal per group present) or ``"size"`` (each group's share of
        the samples, in the round the cohort's: FedAvg exactly).
    share
        A client's share of its group's coefficient: ``"samples"`` (default; by sample count)
        or ``"uniform"``.
    rule_options
        Options of the inner rule when ``rule`` is a name.
    num_samples
        Static counts ``[K]``; a round may pass its own (required unless
        ``prior="uniform"`` and ``share="uniform"``). Group losses are sample-weighted means
        when counts are known, plain means otherwise.

    ``weights(client_ids, losses, num_samples=None, **round_inputs)`` as every rule (``updates``
    for the direct rules). After a round :attr:`last_group_weights` ``[G]`` holds each group's
    share of the combined direction (0 for groups absent) and :attr:`last_group_losses` ``[G]``
    their losses (NaN where absent). State: the inner rule's, over G groups.
    """

    name = "over-groups"

    def __init__(self, rule: Union[str, Aggregator], groups: GroupMap, *,
                 num_clients: Optional[int] = None, num_groups: Optional[int] = None,
                 prior: str = "uniform", share: str = "samples",
                 rule_options: Optional[Mapping[str, Any]] = None,
                 num_samples: Any = None) -> None:
        self.prior = check_choice(prior, "prior", PRIORS)
        self.share = check_choice(share, "share", SHARES)
        groups, num_clients, num_groups = check_map(groups, num_clients, num_groups)
        super().__init__(num_clients, num_samples)
        self.num_groups = num_groups
        if isinstance(rule, str):
            if rule in REFUSED:
                raise ValueError(f"rule {rule!r} has no group form: {REFUSED[rule]}")
            inner = registry.build(rule, num_groups, **dict(rule_options or {}))
        elif isinstance(rule, Aggregator):
            if rule_options:
                raise ValueError("rule_options only go with a rule given by name; this rule is "
                                 "built already")
            if rule.num_clients != num_groups:
                raise ValueError(f"the inner rule is built over {rule.num_clients} clients; it "
                                 f"must be built over the {num_groups} groups")
            inner = rule
        else:
            raise TypeError(f"rule must be a rule name or an Aggregator; got {rule!r}")
        self.form = group_form(inner, self.prior)
        self.rule = inner
        self.groups = groups
        self.needs_losses = inner.needs_losses
        self.map_checksum = map_checksum(groups, self.num_clients)
        self.last_group_weights: Optional[np.ndarray] = None
        self.last_group_losses: Optional[np.ndarray] = None
        self._next_mixture: Optional[np.ndarray] = None

    # ------------------------------------------------------------------ declarations
    @property
    def round_inputs(self) -> Tuple[str, ...]:
        return ("updates",) if self.form == "direct" else ()

    def invalid_loss(self, loss: float) -> Optional[str]:
        """The inner rule's: a group's loss is a mean of its clients' losses."""
        return self.rule.invalid_loss(loss)

    def client_objective(self) -> Optional[ClientObjective]:
        """The inner rule's client objective, unchanged."""
        return self.rule.client_objective()

    # ------------------------------------------------------------------ one round
    def group_of(self, ids: np.ndarray) -> np.ndarray:
        """``[m]`` int64 groups of the clients ``ids`` (checked: in ``[0, G)``)."""
        if callable(self.groups):
            g = host_array(self.groups(ids), "groups(ids)")
            if g.shape != ids.shape or g.dtype.kind not in "iu":
                raise ValueError(f"groups(ids) must return [m] = [{ids.shape[0]}] integers; "
                                 f"got shape {g.shape}, dtype {g.dtype}")
            g = g.astype(np.int64, copy=False)
            bad = (g < 0) | (g >= self.num_groups)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise ValueError(f"groups(ids) gave client {int(ids[k])} the group {int(g[k])}, "
                                 f"outside [0, {self.num_groups})")
            return g
        return self.groups[ids]

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        updates = round_inputs.pop("updates", None)
        if "sq_norms" in round_inputs:
            raise ValueError("over groups, pass the updates, not sq_norms: a group's squared "
                             "norm is that of its averaged update, which its clients' norms do "
                             "not give")
        self._no_round_inputs(round_inputs)
        m = ids.shape[0]
        needs_counts = self.prior == "size" or self.share == "samples"
        counts = self._counts(ids, num_samples, required=needs_counts)
        present, inv = np.unique(self.group_of(ids), return_inverse=True)
        inv = inv.reshape(-1)
        n_groups = present.shape[0]
        sizes = np.bincount(inv, minlength=n_groups).astype(np.float64)
        totals = None if counts is None else np.bincount(inv, weights=counts, minlength=n_groups)
        within = within_shares(counts, totals, sizes, inv, self.share)
        losses_g = None if losses is None else group_losses(losses, counts, totals, sizes, inv)
        inputs: Dict[str, Any] = {}
        if self.form == "direct":
            if updates is None:
                raise ValueError(f"rule {self.rule.name!r} over groups needs the updates "
                                 "([m, *S] or m lists of arrays): it runs on each group's "
                                 "averaged update")
            grouped = group_updates(updates, inv, within, n_groups, m)
            if "updates" in self.rule.round_inputs:
                inputs["updates"] = grouped
            else:
                inputs["sq_norms"] = squared_norms(grouped, n_groups)
        elif updates is not None:
            raise TypeError("unexpected round input(s): updates")
        try:
            coef_g, inner_commit = self.rule._proposed(present, losses_g,
                                                     np.ones(n_groups), **inputs)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"over groups, rule {self.rule.name!r}: {exc}") from None
        coef_g = np.asarray(host_array(coef_g, "coefficients"), dtype=np.float64)
        if self.form == "direct":
            coef = coef_g[inv] * within
        else:
            coef = self._tilted(coef_g, inv, within, counts, totals, sizes, m)

        # The round's [G] records are allocated before anything commits: a G too large for
        # memory refuses the round with the inner rule untouched.
        try:
            full = np.zeros(self.num_groups)
            lost = np.full(self.num_groups, np.nan)
        except MemoryError:
            raise MemoryError(f"over groups: the round's group weights and losses need 2 x "
                              f"num_groups = 2 x {self.num_groups} float64 values, more than "
                              "memory holds; use fewer groups") from None
        if losses_g is not None:
            lost[present] = losses_g
        tilted_mix = None if self.form == "direct" else np.bincount(inv, weights=coef,
                                                                    minlength=n_groups)

        def commit() -> None:
            inner_commit()
            mix_g = self.rule.last_mixture if tilted_mix is None else tilted_mix
            assert mix_g is not None  # the inner commit sets its last mixture
            full[present] = mix_g
            self.last_group_weights, self.last_group_losses = read_only(full), read_only(lost)
            self._next_mixture = (mix_g[inv] * within) if self.form == "direct" else None

        return coef, commit

    def _tilted(self, coef_g: np.ndarray, inv: np.ndarray, within: np.ndarray,
                counts: Optional[np.ndarray], totals: Optional[np.ndarray], sizes: np.ndarray,
                m: int) -> np.ndarray:
        """``normalize(b * tau)``: the prior's client weights b tilted by the inner rule's
        coefficients relative to their largest (exactly 1 for a rule that does not adapt)."""
        top = float(coef_g.max())
        if not top > 0.0:
            raise ValueError(f"over groups, rule {self.rule.name!r} gave no group a positive "
                             "coefficient")
        tau = coef_g / top
        if self.prior == "size" and (counts is None or not counts.any()):
            base = np.ones(m)  # no samples in the round: FedAvg's fallback, 1/m
        elif self.prior == "size" and self.share == "samples":
            assert counts is not None  # required by the size prior (_round)
            base = counts  # n_k: with tau = 1 this is FedAvg's normalize(n), bit for bit
        elif self.prior == "size":
            assert totals is not None  # counts are required by the size prior (_round)
            base = totals[inv] / sizes[inv]
        else:
            base = within
        out = normalize(base * tau[inv])
        return np.full(m, 1.0 / m) if out is None else out

    def _mixture(self, coef: np.ndarray) -> np.ndarray:
        """The tilted coefficients (they sum to 1); a direct rule's group mixture (λ* for
        FedMGDA) times the clients' shares."""
        if self._next_mixture is not None:
            mix, self._next_mixture = self._next_mixture, None
            return mix
        return super()._mixture(coef)

    # ------------------------------------------------------------------ state
    def _config(self) -> Dict[str, Any]:
        config = {"rule": self.rule.name, "num_groups": self.num_groups, "prior": self.prior,
                  "share": self.share, "map_size": self.num_clients,
                  "map_checksum": self.map_checksum}
        config.update({f"rule.{k}": v for k, v in self.rule._config().items()})
        return config

    def _state(self) -> Dict[str, Any]:
        return {f"rule.{k}": v for k, v in self.rule.state_dict()["state"].items()
                if k != "round"}

    def _state_specs(self) -> Dict[str, StateSpec]:
        return {f"rule.{k}": spec for k, spec in self.rule._state_specs().items()}

    def _check_state(self, state: Dict[str, Any]) -> None:
        try:
            self.rule._check_state({k[len("rule."):]: v for k, v in state.items()
                                    if k.startswith("rule.")})
        except ValueError as exc:  # name the keys as this state_dict has them
            raise ValueError(str(exc).replace("state['", "state['rule.")) from None

    def _set_state(self, state: Dict[str, Any]) -> None:
        inner = {k[len("rule."):]: v for k, v in state.items() if k.startswith("rule.")}
        self.rule.load_state_dict(StateDict(
            format_version=FORMAT_VERSION, rule=self.rule.name, num_clients=self.num_groups,
            config=dict(self.rule._config()), state={"round": self.round, **inner}))

    def __repr__(self) -> str:
        return (f"OverGroups({self.rule!r}, num_clients={self.num_clients}, "
                f"num_groups={self.num_groups}, prior={self.prior!r}, share={self.share!r})")
