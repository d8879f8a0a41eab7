"""The tier table and the population metrics a sweep summarises, from round records."""

from __future__ import annotations

from fastfair.sim.population.report import population_metrics, tier_table


def _history(hours):
    tiers = {f"participation_tier{g}": 0.1 * (g + 1) for g in range(2)}
    tiers.update({f"wasted_share_tier{g}": 0.5 - 0.2 * g for g in range(2)})
    return [{"round": 1, "virtual_time": 1800.0, "wasted_share": 0.3, **tiers},
            {"round": 2, "virtual_time": hours * 3600.0, "wasted_share": 0.3, **tiers,
             "acc_mean": 0.5, "acc_group0": 0.25, "acc_group1": 0.75}]


def test_tier_table_lists_each_tier_of_each_rule():
    table = tier_table({"fedavg": _history(2.0), "afl": _history(1.5)})
    lines = table.splitlines()
    assert lines[0].split() == ["rule", "hours", "tier", "acc", "kept", "wasted"]
    assert lines[1].split() == ["fedavg", "2.00", "0", "0.250", "0.100", "0.500"]
    assert lines[2].split() == ["1", "0.750", "0.200", "0.300"]
    assert "fractions in [0, 1]" in lines[-1]
    assert lines[3].split()[:2] == ["afl", "1.50"]
    assert tier_table({"fedavg": [{"round": 1, "acc_mean": 0.5}]}) == ""


def test_population_metrics_are_those_every_run_recorded():
    histories = [_history(1.0), _history(2.0)]
    assert population_metrics(histories, ("acc_mean",)) == (
        "virtual_time", "wasted_share", "acc_group0", "participation_tier0", "acc_group1",
        "participation_tier1")
    assert population_metrics(histories, ("virtual_time",))[0] == "wasted_share"
    assert population_metrics([[{"round": 1, "acc_mean": 0.5}]], ()) == ()
