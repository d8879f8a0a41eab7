r"""The contract every fastfair aggregator follows (one place; ``docs/aggregators.md`` repeats it).

Construction
    ``Rule(num_clients, ..., num_samples=None)``. ``num_clients`` (K) is the client population,
    at most :data:`MAX_CLIENTS` = 2**63 - 1 (ids are int64); clients are the integers
    ``0 .. K-1``. Rules that weight by data size take static per-client
    sample counts ``num_samples`` of shape ``[K]`` (kept as float64, 8 bytes per client), which a
    round may override with its own ``num_samples=``. Hyperparameters are checked here and errors
    name the argument.

One round
    ``coef = agg.weights(client_ids, losses, num_samples=None, **round_inputs)`` returns the mixing
    coefficients ``[m]`` aligned with ``client_ids`` (the m participating clients) and advances the
    rule's state. They sum to 1 unless the rule defines otherwise (q-FedAvg's step scaling,
    Fed-CVaR-Avg's one-step form, FedMGDA's coefficients on unnormalised updates). The result is a
    NumPy array, or a tensor of the framework and device of ``losses`` (else of ``client_ids``).

    ``coef, commit = agg.propose(client_ids, losses, ...)`` is the same round in two phases:
    the coefficients, with nothing changed, and ``commit()`` (which cannot fail) to advance the
    state; a caller with other steps that can fail checks them in between, so that its round
    commits entirely or not at all (the Flower strategy). ``invalid_loss(loss)`` says why the
    rule cannot take one client's loss (the per-client part of its checks), or None.

    ``agg.aggregate(updates, coef, base=params, lr=1.0)`` applies them:
    ``params <- params - lr * sum_i coef_i X_i`` with pseudo-gradients ``X_i = global - local_i``
    (``[m, *S]`` or m lists of arrays), through :func:`fastfair.ops.weighted_average`; without
    ``base`` it returns ``sum_i coef_i X_i``. A streaming :class:`fastfair.ops.Accumulator` that
    already holds ``sum_i coef_i X_i`` may be passed as ``updates`` (with ``coef=None``).

Validation before mutation
    Every round input is checked before any state changes: ``client_ids`` must be a non-empty 1-D
    integer array of distinct ids in ``[0, K)``; ``losses`` and other per-client inputs must have
    length m and be finite; ``num_samples`` must be finite and non-negative. A failing call raises
    ``ValueError``/``TypeError`` naming the argument, and the state is exactly as before it.

Threads
    An aggregator takes one round at a time. Its rounds are not serialised for concurrent
    callers, but concurrent use is detected: a round commits only if no other round (nor
    ``load_state_dict``) changed the state since it was proposed, else its commit raises
    ``RuntimeError`` and changes nothing. Share one aggregator between threads behind your own
    lock; :class:`fastfair.ops.Accumulator` is safe to feed from many threads.

State
    Per-client state lives in flat float64 NumPy arrays on the host (never Python objects per
    client), and a round touches O(m) of it where the rule's math allows. A vector over the K
    clients is a :class:`~fastfair.aggregators._client_vector.ClientVector`: memory for the
    clients a run has touched, not for K.
    ``state_dict()`` returns ``{"format_version", "rule", "num_clients", "config", "state"}`` with
    copies of every array; ``load_state_dict(sd)`` restores it exactly (a run continued from a
    loaded state is bit-identical to one never interrupted) and rejects another rule, population,
    configuration or format version. Every state value is checked before any is installed, by
    the checks the constructor and the rounds apply: each key's :class:`StateSpec` (type, shape,
    finite, sign) and the rule's invariants across keys (AAggFF-S's positive definite H); a
    state that fails leaves the aggregator exactly as it was.

What a rule declares
    ``name``: its one public name (``"aaggff-d"``), used by :mod:`fastfair.aggregators.registry`,
    the command line, the simulator, Flower and ``state_dict``. ``round_inputs``: the names of the
    extra per-round inputs ``weights`` takes as configured; ``"updates"`` (the cohort's
    pseudo-gradients ``[m, *S]``) and ``"sq_norms"`` (their squared norms ``[m]``) are computed
    by the caller from the updates, every other name is reported by the clients' objective.
    ``client_objective()``: what the clients minimise (a
    :class:`~fastfair.aggregators.objectives.ClientObjective`, whose ``to_config()`` carries it to
    a client), or None for the plain loss. ``needs_losses``, ``allow_duplicates``,
    ``full_participation`` (every client every round) and ``expects_gradients`` (the
    coefficients apply to gradients at the received model, not to local training's deltas)
    complete the declaration. No code outside :mod:`fastfair.aggregators` needs to know a
    rule's class.

Client side
    Rules that change what clients optimise (PropFair's loss transform, Fed-CVaR-Avg's (θ, t) step,
    FedProx's proximal term) also expose it as methods of the same class, usable in any training
    loop.

Writing a rule
    Subclass :class:`Aggregator`; implement ``_round(ids, losses, num_samples, **inputs)``, which
    must not mutate anything and returns ``(coefficients, commit)`` where ``commit()`` applies the
    new state and cannot fail; list constructor hyperparameters in ``_config()``, state arrays
    and scalars in ``_state()``, one :class:`StateSpec` per state key in ``_state_specs()``,
    invariants across keys in ``_check_state()`` and the installation of a checked state (which
    cannot fail) in ``_set_state()``.
"""

from __future__ import annotations

import threading
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    Literal,
    Optional,
    Tuple,
    overload,
)

import numpy as np

from fastfair._arrays import from_host, read_only
from fastfair.aggregators._aggregate import Aggregating
from fastfair.aggregators._checks import StateSpec, check_ids, check_vector
from fastfair.aggregators._state import FORMAT_VERSION, StateChecks
from fastfair.aggregators._types import AnyIds, Counts, HostIds, HostVector, Tensor
from fastfair.aggregators.objectives import ClientObjective
from fastfair.state import StateDict

#: Round inputs a caller computes from the cohort's pseudo-gradients; every other input a rule
#: declares is reported by the clients' objective.
UPDATE_INPUTS = ("updates", "sq_norms")

Commit = Callable[[], None]

#: Held while a round's state change is checked and applied: a commit is atomic, so concurrent
#: rounds on one aggregator are detected (the later commit raises), never silently lost.
_COMMITS = threading.Lock()

#: The largest population a rule accepts: client ids are int64 (``check_ids``), so ids stop at
#: 2**63 - 1 and a larger ``num_clients`` would name clients no call can address.
MAX_CLIENTS = int(np.iinfo(np.int64).max)


# --------------------------------------------------------------------------- the base class

class Aggregator(StateChecks, Aggregating):
    """Base of every rule: validation, the round protocol, aggregation and the state_dict (a
    loaded one is checked by :class:`~fastfair.aggregators._state.StateChecks`).

    See the module docstring of :mod:`fastfair.aggregators.base` for the contract.
    """

    #: The rule's one public name (registry, command line, Flower, ``state_dict``).
    name: ClassVar[str] = ""
    #: Whether ``weights`` requires ``losses`` (FedAvg and FairAvg do not).
    needs_losses = True
    #: Whether a round may list a client twice (Fed-CVaR-Avg relays with replacement).
    allow_duplicates = False
    #: Whether every client must take part in every round (cross-silo rules such as AAggFF-S).
    full_participation: ClassVar[bool] = False
    #: Whether the coefficients apply to gradients the clients report at the received model
    #: (Fed-CVaR-Avg's one-step form) rather than to the deltas ``w - w_i`` of local training;
    #: a caller that aggregates trained models (Flower) refuses such a rule.
    expects_gradients = False
    #: Options added with a default that changes the behaviour, each with the value a
    #: ``state_dict`` written before it (without it) ran with; others are at their default.
    options_before: ClassVar[Dict[str, Any]] = {}
    #: The last round's mixing weights ``[m]`` (float64; None before the first round): the
    #: share of each client in the round's combined direction, on the simplex. Unlike the
    #: coefficients, whose sum is a step size in q-FedAvg and Fed-CVaR-Avg's one-step form and
    #: whose scale is 1/norm in FedMGDA, they mean the same for every rule (a per-round
    #: record such as the largest weight compares across rules).
    last_mixture: Optional[np.ndarray] = None
    #: How many times the state changed (rounds committed, states loaded): a proposed round
    #: commits only if it is unchanged since (see the module docstring, Threads).
    _changes = 0

    def __init__(self, num_clients: int, num_samples: Any = None) -> None:
        if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)):
            raise TypeError(f"num_clients must be an integer; got {num_clients!r}")
        if num_clients < 1:
            raise ValueError(f"num_clients must be at least 1; got {num_clients}")
        if num_clients > MAX_CLIENTS:
            raise ValueError(f"num_clients must be at most 2**63 - 1 = {MAX_CLIENTS}: client ids "
                             f"are int64, so no id of 2**63 or more can be passed; got "
                             f"{num_clients}")
        self.num_clients = int(num_clients)
        self._num_samples: Optional[np.ndarray] = None
        if num_samples is not None:
            self._num_samples = self._counts_spec().check(num_samples, "num_samples")
        self.round = 0

    # ------------------------------------------------------------------ declarations
    @property
    def round_inputs(self) -> Tuple[str, ...]:
        """Names of the extra keyword inputs ``weights`` takes in this configuration (see the
        module docstring); empty for most rules."""
        return ()

    def invalid_loss(self, loss: float) -> Optional[str]:
        """Why this rule cannot take ``loss`` as one client's loss (a finite float), or None.

        The per-client part of the checks ``weights`` applies to ``losses`` (e.g. q-FedAvg and
        AAggFF need ``loss >= 0``, PropFair's EG weighting ``loss < M``), so that a caller
        with untrusted clients (the Flower strategy) can drop the one reply a round would
        otherwise be refused for. Checks over the whole round stay in ``weights``.

        Parameters
        ----------
        loss
            One client's finite loss.

        Returns
        -------
        str or None
            What the loss must be (e.g. ``"must be non-negative (q-FedAvg takes F^q)"``), or
            None when the rule takes it.
        """
        return None

    def client_objective(self) -> Optional[ClientObjective]:
        """What this round's clients minimise, or None for their plain mean loss. Call it every
        round: an objective may carry server state (Fed-CVaR-Avg's current threshold)."""
        return None

    # ------------------------------------------------------------------ round protocol
    @overload
    def weights(self, client_ids: Tensor, losses: None = None,
                num_samples: Counts = None, **round_inputs: Any) -> Tensor: ...

    @overload
    def weights(self, client_ids: AnyIds, losses: Tensor,
                num_samples: Counts = None, **round_inputs: Any) -> Tensor: ...

    @overload
    def weights(self, client_ids: HostIds, losses: None = None,
                num_samples: Counts = None, **round_inputs: Any) -> np.ndarray: ...

    @overload
    def weights(self, client_ids: AnyIds, losses: HostVector,
                num_samples: Counts = None, **round_inputs: Any) -> np.ndarray: ...

    def weights(self, client_ids: Any, losses: Any = None, num_samples: Any = None,
                **round_inputs: Any) -> Any:
        r"""Mixing coefficients ``[m]`` over the participating clients; advances the state.

        Parameters
        ----------
        client_ids
            ``[m]`` distinct integer ids in ``[0, K)``.
        losses
            ``[m]`` finite per-client losses (required by every rule except FedAvg/FairAvg).
        num_samples
            ``[m]`` non-negative sample counts of this round; default the static counts given
            to the constructor (rules that need none ignore both).
        **round_inputs
            Rule-specific per-round inputs (documented by each rule).

        Returns
        -------
        ``[m]`` coefficients aligned with ``client_ids``, NumPy or the framework of ``losses``;
        :attr:`last_mixture` then holds the round's mixing weights (not part of the state).
        """
        coef, commit = self.propose(client_ids, losses, num_samples, **round_inputs)
        commit()
        return coef

    @overload
    def propose(self, client_ids: Tensor, losses: None = None,
                num_samples: Counts = None, **round_inputs: Any) -> Tuple[Tensor, Commit]: ...

    @overload
    def propose(self, client_ids: AnyIds, losses: Tensor,
                num_samples: Counts = None, **round_inputs: Any) -> Tuple[Tensor, Commit]: ...

    @overload
    def propose(self, client_ids: HostIds, losses: None = None,
                num_samples: Counts = None, **round_inputs: Any) -> Tuple[np.ndarray, Commit]: ...

    @overload
    def propose(self, client_ids: AnyIds, losses: HostVector,
                num_samples: Counts = None, **round_inputs: Any) -> Tuple[np.ndarray, Commit]: ...

    def propose(self, client_ids: Any, losses: Any = None, num_samples: Any = None,
                **round_inputs: Any) -> Tuple[Any, Commit]:
        r"""A round in two phases: the coefficients now, the state change when asked.

        ``coef, commit = agg.propose(ids, losses, ...)`` validates and computes exactly what
        :meth:`weights` would, and changes nothing; ``commit()`` (which cannot fail) then
        advances the rule as :meth:`weights` does (state, round counter, :attr:`last_mixture`).
        A caller with more steps that can fail in the same round (a server optimiser, a Flower
        strategy) checks them all between the two calls, so that the round commits entirely or
        not at all. ``weights(...)`` is ``propose(...)`` followed by ``commit()``. Commit at
        most once, and before any other round of this rule.

        Parameters
        ----------
        client_ids, losses, num_samples, **round_inputs
            As :meth:`weights`.

        Returns
        -------
        ``(coef, commit)``: the ``[m]`` coefficients of :meth:`weights` and the commit.
        """
        seen = self._changes  # first: a state change from here on makes this round stale
        coef, advance = self._proposed(client_ids, losses, num_samples, **round_inputs)
        result = from_host(coef, losses if losses is not None else client_ids)

        def commit() -> None:
            with _COMMITS:
                if self._changes != seen:
                    raise RuntimeError(
                        f"{type(self).__name__}: another round (or load_state_dict) changed the "
                        "rule's state after this round was proposed; an aggregator takes one "
                        "round at a time: call it from one thread, or hold your own lock "
                        "around its rounds")
                advance()

        return result, commit

    def _proposed(self, client_ids: Any, losses: Any = None, num_samples: Any = None,
                  **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        """A round validated and computed, nothing changed: ``(coef, advance)`` with the
        coefficients on the host and ``advance()``, which applies the round (state, counter,
        :attr:`last_mixture`) and cannot fail. :meth:`propose` calls it under the commit lock;
        a combinator (:class:`~fastfair.aggregators.over_groups.OverGroups`) advances its inner
        rule from its own commit."""
        ids = check_ids(client_ids, self.num_clients, allow_duplicates=self.allow_duplicates)
        m = ids.shape[0]
        if losses is None:
            if self.needs_losses:
                raise ValueError(f"losses is required by {type(self).__name__}: pass one "
                                 "finite loss per client in client_ids")
            loss_v = None
        else:
            loss_v = check_vector(losses, m, "losses")
        counts = None
        if num_samples is not None:
            counts = check_vector(num_samples, m, "num_samples", nonnegative=True)
        coef, apply = self._round(ids, loss_v, counts, **round_inputs)

        def advance() -> None:
            apply()
            self._changes += 1
            self.round += 1
            self.last_mixture = read_only(self._mixture(coef))

        return coef, advance

    def _mixture(self, coef: np.ndarray) -> np.ndarray:
        """Mixing weights of coefficients ``coef`` ``[m]``: ``coef / sum(coef)`` (all zero when
        every coefficient is 0: the round takes no step). FedMGDA overrides it with λ*."""
        coef = np.asarray(coef, dtype=np.float64)
        total = float(coef.sum())
        return coef / total if total > 0 else np.zeros_like(coef)

    def _round(self, ids: np.ndarray, losses: Optional[np.ndarray],
               num_samples: Optional[np.ndarray], **round_inputs: Any) -> Tuple[np.ndarray, Commit]:
        raise NotImplementedError

    @overload
    def _counts(self, ids: np.ndarray, num_samples: Optional[np.ndarray],
                required: Literal[True]) -> np.ndarray: ...

    @overload
    def _counts(self, ids: np.ndarray, num_samples: Optional[np.ndarray],
                required: bool) -> Optional[np.ndarray]: ...

    def _counts(self, ids: np.ndarray, num_samples: Optional[np.ndarray],
                required: bool) -> Optional[np.ndarray]:
        """This round's sample counts: the given ones, else the static ones gathered at ``ids``."""
        if num_samples is not None:
            return num_samples
        if self._num_samples is not None:
            return self._num_samples[ids]
        if required:
            raise ValueError(f"num_samples is required by {type(self).__name__}: pass static "
                             "counts [K] to the constructor or this round's counts [m]")
        return None

    @staticmethod
    def _no_round_inputs(round_inputs: Dict[str, Any]) -> None:
        if round_inputs:
            raise TypeError(f"unexpected round input(s): {', '.join(sorted(round_inputs))}")

    # ------------------------------------------------------------------ state
    def _config(self) -> Dict[str, Any]:
        """Constructor hyperparameters (plain Python values)."""
        return {}

    def _state(self) -> Dict[str, Any]:
        """Mutable state: arrays (copied by state_dict) and scalars."""
        return {}

    def _state_specs(self) -> Dict[str, StateSpec]:
        """One :class:`StateSpec` per key of :meth:`_state`: the checks the constructor and the
        rounds guarantee of that value (shape, finite, lower bound)."""
        return {}

    def _check_state(self, state: Dict[str, Any]) -> None:
        """Raises unless the invariants across keys hold for a loaded ``state`` (every key of
        ``state_dict()["state"]``) whose values passed their specs; changes nothing."""

    def _set_state(self, state: Dict[str, Any]) -> None:
        """Installs a checked state from :meth:`_state`'s keys; must not fail."""

    def _counts_spec(self) -> StateSpec:
        """Static sample counts ``[K]``: finite and non-negative (constructor and state)."""
        return StateSpec((self.num_clients,), lo=0.0)

    def state_dict(self) -> Dict[str, Any]:
        """Versioned snapshot: ``{"format_version", "rule", "num_clients", "config", "state"}``;
        every array is a copy. A :class:`~fastfair.state.StateDict`: ``torch.save`` it and
        ``torch.load`` (weights-only, torch's default) reads it, or :func:`fastfair.save_state`
        with NumPy alone."""
        state: Dict[str, Any] = {"round": self.round}
        if self._num_samples is not None:
            state["num_samples"] = self._num_samples
        state.update(self._state())
        return StateDict(
            format_version=FORMAT_VERSION, rule=self.name, num_clients=self.num_clients,
            config=dict(self._config()),
            state={k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v)
                   for k, v in state.items()})

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores a :meth:`state_dict` exactly. Every value is checked first (the round
        counter, the static counts, each key's :class:`StateSpec`, then :meth:`_check_state`),
        and only then is anything installed: on any mismatch it raises and changes nothing."""
        new = self._checked_state(state_dict)
        # Everything is checked: nothing below can fail.
        with _COMMITS:
            self._changes += 1
        self.round = new.pop("round")
        if "num_samples" in new:
            self._num_samples = new.pop("num_samples")
        self._set_state(new)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}(num_clients={self.num_clients}{', ' if args else ''}{args})"
