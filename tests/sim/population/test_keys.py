"""The per-tier metric keys the round records are written with are the ones read back."""

from __future__ import annotations

from fastfair.sim.population.keys import TierKey, tiers_recorded


def test_a_tier_key_round_trips_and_other_keys_are_not_tier_keys():
    for key in (TierKey("participation", 0), TierKey("wasted_share", 12)):
        assert TierKey.parse(str(key)) == key
    assert str(TierKey("participation", 2)) == "participation_tier2"
    for other in ("acc_group2", "wasted_share", "participation_tierx", "kept_tier1"):
        assert TierKey.parse(other) is None


def test_the_tiers_recorded_are_those_with_a_participation_rate():
    record = {"virtual_time": 1.0, "participation_tier1": 0.5, "participation_tier0": 0.2,
              "wasted_share_tier3": 0.1}
    assert tiers_recorded(record) == [0, 1]
