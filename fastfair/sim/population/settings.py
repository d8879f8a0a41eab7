"""The population's settings (:class:`PopulationSettings`): how many clients there are, how
many a round takes, which of them can take part, and the device population on a virtual clock
with its selection policy. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from fastfair.sim.names import AVAILABILITY, POLICIES
from fastfair.sim.settings import (
    DATA,
    Settings,
    at_least_one,
    check_option_tables,
    doc,
    refuse_unused,
)


@dataclass
class PopulationSettings(Settings):
    """K = ``clients``, m = ``per_round`` of them a round, drawn among those ``availability``
    makes available; with a ``population`` (``devices`` or a CSV), rounds run on a virtual clock
    and ``policy`` chooses whom a round keeps (:mod:`fastfair.sim.population`)."""

    clients: int = field(default=100, metadata=doc(DATA, "K, the client population"))
    per_round: int = field(default=10, metadata=doc(DATA, "m, clients per round"))
    availability: str = field(default="uniform", metadata=doc(
        DATA, "which clients can take part in a round",
        choices=AVAILABILITY))
    availability_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        DATA, "an availability option, e.g. prob=0.5 (repeatable)"))
    # a device population on a virtual clock (fastfair.sim.population; docs/populations.md)
    population: Optional[str] = field(default=None, metadata=doc(
        DATA, "devices (low/mid/high tiers of speeds, bandwidths, dropouts) or a CSV of tiers or "
        "clients: rounds then run on a virtual clock; the tiers are the groups of a data set "
        "without groups", metavar="devices|CSV"))
    population_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        DATA, "a population option, e.g. process=diurnal, shares=[0.3,0.5,0.2] (repeatable)"))
    policy: str = field(default="all", metadata=doc(
        DATA, "with a population: wait for all invited, overselect (invite ceil(m(1+f)), keep "
        "the first m) or deadline (keep those done by --deadline)",
        choices=POLICIES))
    over_select: float = field(default=0.0, metadata=doc(
        DATA, "f: the share of per_round invited on top (overselect, deadline)"))
    deadline: Optional[float] = field(default=None, metadata=doc(
        DATA, "the deadline policy's seconds of virtual time per round", metavar="SECONDS"))

    def _check(self) -> None:
        at_least_one(self, "clients", "per_round")
        if self.per_round > self.clients:
            raise ValueError(f"per_round ({self.per_round}, --per-round) cannot exceed clients "
                             f"({self.clients}, --clients)")
        check_option_tables(self, "availability_options", "population_options")
        if self.population is not None:
            from fastfair.sim.population.selection import Policy

            Policy(self.policy, self.over_select, self.deadline)
        refuse_unused(self, {name: self.population is None
                             for name in ("policy", "over_select", "deadline")},
                      "population=None")
