"""The per-tier metrics of a run on a device population, as typed keys that the writer
(:meth:`~fastfair.sim.population.selection.PopulationAvailability.round_record`) and the readers
(:mod:`fastfair.sim.population.report`) share: :class:`TierKey` makes and parses the names of
the round records (``participation_tier2``, ``wasted_share_tier0``). Plain data."""

from __future__ import annotations

from typing import Iterable, List, NamedTuple, Optional

#: The metrics recorded per tier: the share of rounds a client of the tier was kept, and the
#: share of the tier's work lost to dropouts and lateness.
TIER_METRICS = ("participation", "wasted_share")


class TierKey(NamedTuple):
    """The record key of ``metric`` (one of :data:`TIER_METRICS`) for tier ``tier``:
    ``str(TierKey("participation", 2)) == "participation_tier2"``."""

    metric: str
    tier: int

    def __str__(self) -> str:
        return f"{self.metric}_tier{self.tier}"

    @classmethod
    def parse(cls, key: str) -> Optional["TierKey"]:
        """The key ``key`` names, or None when it names no tier metric."""
        metric, sep, tier = key.rpartition("_tier")
        if not sep or metric not in TIER_METRICS or not tier.isdigit():
            return None
        return cls(metric, int(tier))


def tiers_recorded(record: Iterable[str]) -> List[int]:
    """The tiers whose participation the round record (its keys) holds, in order."""
    return sorted(k.tier for k in map(TierKey.parse, record)
                  if k is not None and k.metric == "participation")
