"""Rounds on a virtual clock: who is invited, who is kept, how long a round lasts.

A round starts at the clock's time ``t``. The server invites ``n = ceil(m (1 + f))`` clients
(``f`` the over-selection; 0 but for ``overselect``) among those online at ``t``: the first ``n``
distinct online ids of a keyed candidate list (``floor(u_j K)`` for keyed uniforms ``u_j`` of
the round), so it looks at about ``n / online share`` clients, never at all K. With an
availability model other than ``uniform`` that model invites instead (it draws ``n``), and the
population's process then takes out those offline at ``t``.

An invited client ``i`` needs ``T_i = bytes / down_i + work_i / speed_i + bytes / up_i``
seconds: the model down, ``work_i = samples_i x epochs`` (or local steps x batch size) sample
passes, the update up. It drops out with its tier's probability, at a keyed fraction of
``T_i``. The policy keeps, in order of finishing (ties by id), the first ``m`` survivors done by
the deadline ``D`` (infinite but for ``deadline``); the round lasts

- until the ``m``-th kept client finishes, when ``m`` are kept;
- else ``D`` when there is a deadline (the server cannot tell a dropped client from a slow one);
- else until the last invitee has finished or dropped out (wait for all).

The clock advances by that, or by ``idle`` seconds when nobody is online. Work of a dropped
client up to its drop, and of a client not kept up to the round's end, is wasted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from fastfair.sim.names import POLICIES as POLICIES  # re-exported
from fastfair.sim.population.devices import MAX_MODEL_BYTES, MAX_SECONDS, Population
from fastfair.sim.population.keys import TierKey
from fastfair.sim.seeding import Stream, round_keys, uniform


@dataclass(frozen=True)
class Policy:
    """A selection policy: ``name`` (one of :data:`POLICIES`), the over-selection ``f``
    (``overselect``; a deadline policy may over-select too) and the ``deadline`` D in seconds
    (``deadline`` only)."""

    name: str = "all"
    over_select: float = 0.0
    deadline: Optional[float] = None

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {self.name!r}")
        if isinstance(self.over_select, (bool, np.bool_)) or not isinstance(
                self.over_select, (int, float, np.integer, np.floating)) \
                or not (math.isfinite(self.over_select) and self.over_select >= 0):
            raise ValueError(f"over_select (--over-select) must be a number >= 0; got "
                             f"{self.over_select!r}")
        if self.name == "all" and self.over_select:
            raise ValueError("policy 'all' invites exactly per_round clients: over_select "
                             "needs policy 'overselect' or 'deadline'")
        if (self.name == "deadline") != (self.deadline is not None):
            raise ValueError("deadline (seconds) goes with policy 'deadline', and policy "
                             f"'deadline' needs one; got policy {self.name!r}, deadline "
                             f"{self.deadline}")
        if self.deadline is not None and (
                isinstance(self.deadline, (bool, np.bool_))
                or not isinstance(self.deadline, (int, float, np.integer, np.floating))
                or not (math.isfinite(self.deadline) and 0 < self.deadline <= MAX_SECONDS)):
            raise ValueError(f"deadline (--deadline) must be a number of seconds in (0, "
                             f"{MAX_SECONDS:g}]; got {self.deadline!r}")

    def invited(self, m: int) -> int:
        """``ceil(m (1 + f))`` (rounded against float noise)."""
        return int(math.ceil(round(m * (1.0 + self.over_select), 9)))


def keep(finish: np.ndarray, dropped: np.ndarray, drop_time: np.ndarray, m: int,
         deadline: Optional[float]) -> Tuple[np.ndarray, float]:
    """Who a policy keeps and how long the round lasts (module docstring).

    Parameters
    ----------
    finish, dropped, drop_time
        ``[n]`` each invitee's finishing time, whether it drops out, and when.
    m
        The clients a round keeps at most.
    deadline
        D seconds, or None.

    Returns
    -------
    (kept [n] bool, duration)
    """
    limit = np.inf if deadline is None else deadline
    ok = np.flatnonzero(~dropped & (finish <= limit))
    order = ok[np.argsort(finish[ok], kind="stable")][:m]
    kept = np.zeros(finish.shape, dtype=bool)
    kept[order] = True
    if order.size == m:
        duration = float(finish[order].max()) if m else 0.0
    elif deadline is not None:
        duration = float(deadline)
    else:
        duration = float(np.max(np.where(dropped, drop_time, finish), initial=0.0))
    return kept, duration


class PopulationAvailability:
    """``sample(round)`` under a device population and a selection policy, on a virtual clock:
    an availability model (:mod:`fastfair.sim.rounds.availability`'s interface: ``sample``,
    ``round_record``, ``state_dict``, ``load_state_dict``) that imports nothing of the rounds.

    Parameters
    ----------
    population
        The devices (:class:`~fastfair.sim.population.devices.Population`).
    policy
        The selection policy.
    per_round
        m, the clients a round keeps at most.
    samples
        ``ids [n] -> [n]`` training samples of each client (the data set's ``num_samples``).
    work_per_sample
        Sample passes per training sample (epochs); with ``work_fixed`` > 0 a client's work is
        that many passes instead (local steps x batch size).
    model_bytes
        The bytes sent each way (the model's parameters as float32).
    invite
        Another availability model that invites ``policy.invited(m)`` clients (None: the
        population's online clients, uniformly).
    idle
        Seconds the clock advances in a round with nobody online.
    track_participation
        Count every client's kept rounds (memory grows with the distinct clients kept).

    Attributes
    ----------
    clock
        Virtual seconds since the run began.
    draws
        Client ids the population has looked at so far (candidates and invitees): grows with
        the invited, never with K.
    """

    def __init__(self, population: Population, policy: Policy, per_round: int,
                 samples: Any, work_per_sample: float = 1.0, work_fixed: float = 0.0,
                 model_bytes: float = 4e4, invite: Optional[Any] = None,
                 idle: float = 60.0, track_participation: bool = False) -> None:
        if not 1 <= per_round <= population.num_clients:
            raise ValueError(f"per_round must be in [1, {population.num_clients}]; got "
                             f"{per_round}")
        for name, value, hi in (("model_bytes", model_bytes, MAX_MODEL_BYTES),
                                ("idle", idle, MAX_SECONDS)):
            if not (math.isfinite(value) and 0 < value <= hi):
                raise ValueError(f"{name} must be in (0, {hi:g}]; got {value}")
        quickest = population.quickest(model_bytes, work_fixed)
        if policy.deadline is not None and policy.deadline < quickest:
            raise ValueError(f"deadline (--deadline) {policy.deadline:g} s is shorter than any "
                             f"client can finish a round in ({quickest:.4g} s to move the "
                             f"model's {model_bytes:g} bytes down and up"
                             f"{' and do its local steps' if work_fixed else ''} at the fastest "
                             f"rates): no client would ever be kept; give a deadline above "
                             f"{quickest:.4g} s")
        self.num_clients, self.per_round, self.seed = population.num_clients, int(per_round), \
            population.seed
        self.population, self.policy = population, policy
        self.samples, self.work_per_sample, self.work_fixed = samples, work_per_sample, work_fixed
        self.model_bytes, self.invite, self.idle = float(model_bytes), invite, float(idle)
        self.track_participation = track_participation
        self.draws = 0
        T = population.num_tiers
        self.clock, self.played = 0.0, 0
        self.totals = {k: np.zeros(T) for k in ("invited", "kept", "wasted", "useful")}
        self._seen = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._last: Tuple[int, np.ndarray, Dict[str, Any]] = (0, np.zeros(0, np.int64), {})

    # ------------------------------------------------------------------ invitations
    def invitees(self, round: int, time: float) -> np.ndarray:
        """``[<= n]`` int64 sorted ids invited in ``round`` at virtual ``time``: the first
        ``n = policy.invited(m)`` distinct online ids of the round's keyed candidate list (at
        most ``64 n + 4096`` candidates are looked at), or the ``invite`` model's online ones."""
        n = min(self.policy.invited(self.per_round), self.num_clients)
        pop = self.population
        if self.invite is not None:
            ids = self.invite.sample(round)
            self.draws += ids.size
            return ids[pop.online(ids, time, round)]
        share = pop.online_fraction()
        cap = 64 * n + 4096
        found = np.zeros(0, dtype=np.int64)
        start = 0
        while found.size < n and start < cap:
            size = min(cap - start, int((n - found.size) / share * 1.25) + 32)
            u = uniform(round_keys(self.seed, Stream.POPULATION_INVITE,
                                   np.arange(start, start + size, dtype=np.uint64), round))
            ids = np.minimum((u * self.num_clients).astype(np.int64), self.num_clients - 1)
            self.draws += size
            ids = ids[pop.online(ids, time, round)]
            ids = np.concatenate([found, ids])
            _, first = np.unique(ids, return_index=True)
            found = ids[np.sort(first)]
            start += size
        return np.sort(found[:n])

    def round_times(self, ids: np.ndarray, tier: np.ndarray) -> Tuple[np.ndarray, np.ndarray,
                                                                      np.ndarray]:
        """``(download [n], compute [n], work [n])``: seconds to fetch the model, seconds of
        local training, and its sample passes; the upload is ``model_bytes / up``."""
        pop = self.population
        if self.work_fixed:
            work = np.full(ids.shape, float(self.work_fixed))
        else:
            work = np.asarray(self.samples(ids), dtype=np.float64) * self.work_per_sample
        return self.model_bytes / pop.down(ids, tier), work / pop.speed(ids, tier), work

    # ------------------------------------------------------------------ a round
    def sample(self, round: int) -> np.ndarray:
        """The clients kept in ``round`` (int64, sorted); advances the clock. Asking again for
        the round just played returns the same clients; rounds come in order from 1."""
        if round == self._last[0] and round == self.played:
            return self._last[1]
        if round != self.played + 1:
            raise ValueError(f"the population's rounds are played in order: round {round} "
                             f"asked after round {self.played}")
        pop = self.population
        start = self.clock
        ids = self.invitees(round, start)
        if ids.size == 0:
            self.clock += self.idle
            record = self._record(round, self.idle, {})
            self._last, self.played = (round, ids, record), round
            return ids
        tier = pop.tier(ids)
        self.draws += ids.size
        down, compute, work = self.round_times(ids, tier)
        finish = down + compute + self.model_bytes / pop.up(ids, tier)
        dropped, at = pop.dropouts(ids, tier, round)
        drop_time = at * finish
        kept, duration = keep(finish, dropped, drop_time, self.per_round, self.policy.deadline)
        # Work done before leaving (dropped) or before the round ended (not kept).
        ended = np.where(dropped, drop_time, np.minimum(finish, duration))
        reached = np.divide(ended - down, compute, out=(ended >= down).astype(np.float64),
                            where=compute > 0)
        done = np.clip(reached, 0.0, 1.0) * work
        wasted = np.where(kept, 0.0, done)
        T = pop.num_tiers
        counts = {"invited": np.bincount(tier, minlength=T).astype(np.float64),
                  "kept": np.bincount(tier[kept], minlength=T).astype(np.float64),
                  "wasted": np.bincount(tier, weights=wasted, minlength=T),
                  "useful": np.bincount(tier[kept], weights=work[kept], minlength=T)}
        kept_ids = ids[kept]
        self.clock += duration
        if self.track_participation:
            self._count(kept_ids)
        record = self._record(round, duration, counts, invited=int(ids.size),
                              dropped=int(dropped.sum()),
                              late=int((~dropped & ~kept).sum()))
        self._last, self.played = (round, kept_ids, record), round
        return kept_ids

    def _count(self, ids: np.ndarray) -> None:
        seen = np.concatenate([self._seen, ids])
        counts = np.concatenate([self._counts, np.ones(ids.size, dtype=np.int64)])
        self._seen, inverse = np.unique(seen, return_inverse=True)
        self._counts = np.bincount(inverse, weights=counts).astype(np.int64)

    def _record(self, round: int, duration: float, counts: Dict[str, np.ndarray],
                **extra: int) -> Dict[str, Any]:
        for k, v in counts.items():
            self.totals[k] += v
        shares = self.population.shares()
        expected = round * self.num_clients * shares
        rate = np.divide(self.totals["kept"], expected, out=np.zeros_like(expected),
                         where=expected > 0)
        total = self.totals["wasted"].sum() + self.totals["useful"].sum()
        record: Dict[str, Any] = {
            "round_time": duration, "virtual_time": self.clock,
            "kept": int(counts["kept"].sum()) if counts else 0, **extra,
            "wasted_work": float(counts["wasted"].sum()) if counts else 0.0,
            "wasted_share": float(self.totals["wasted"].sum() / total) if total else 0.0}
        for g in range(self.population.num_tiers):
            record[str(TierKey("participation", g))] = float(rate[g])
            tier_total = self.totals["wasted"][g] + self.totals["useful"][g]
            record[str(TierKey("wasted_share", g))] = float(
                self.totals["wasted"][g] / tier_total) if tier_total else 0.0
        return record

    def round_record(self) -> Dict[str, Any]:
        """The last round's record: ``round_time`` and ``virtual_time`` (seconds), invited,
        kept, dropped and late clients, ``wasted_work`` (sample passes), and over the run so
        far ``wasted_share`` (wasted over all work), and per tier g
        ``participation_tier{g}`` (the mean share of rounds a client of tier g was kept:
        kept / (rounds x K x share_g)) and ``wasted_share_tier{g}``."""
        return dict(self._last[2])

    def participation(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(ids [c], rounds [c])``: every client kept at least once and its kept rounds
        (empty unless ``track_participation``)."""
        return self._seen.copy(), self._counts.copy()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """The clock, the rounds played, the running totals and the participation counts."""
        return {"clock": self.clock, "played": self.played,
                "totals": {k: v.copy() for k, v in self.totals.items()},
                "seen": self._seen.copy(), "counts": self._counts.copy(),
                "last": self._last[2], "last_ids": self._last[1].copy()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from :meth:`state_dict`; raises, changing nothing, when it does not fit."""
        T = self.population.num_tiers
        try:
            clock, played = float(state["clock"]), int(state["played"])
            totals = {k: np.asarray(state["totals"][k], dtype=np.float64)
                      for k in self.totals}
            seen = np.asarray(state["seen"], dtype=np.int64)
            counts = np.asarray(state["counts"], dtype=np.int64)
            last, last_ids = dict(state["last"]), np.asarray(state["last_ids"], dtype=np.int64)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"checkpoint's population state is incomplete: {e}") from None
        if any(v.shape != (T,) for v in totals.values()) or seen.shape != counts.shape:
            raise ValueError(f"checkpoint's population state does not fit this population of "
                             f"{T} tiers")
        self.clock, self.played, self.totals = clock, played, totals
        self._seen, self._counts = seen, counts
        self._last = (played, last_ids, last)
