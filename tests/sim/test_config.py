"""fastfair.sim.config: the checks of SimulationConfig."""

import pytest

from fastfair.sim.config import SimulationConfig


def test_unknown_model_is_a_value_error_listing_the_choices():
    # The model's choices include None (inferred from the data set): the message once failed
    # to build (TypeError from str.join) instead of naming the field and its choices.
    with pytest.raises(ValueError, match=r"model \(--model\) must be one of .*None; got 'bogus'"):
        SimulationConfig(model="bogus")


def test_unknown_rule_is_refused_with_the_closest_name():
    with pytest.raises(ValueError, match=r"unknown rule \(--rule\) 'aaggffd' \(did you mean "
                       r"'aaggff-d'\?\)"):
        SimulationConfig(rule="aaggffd")


def test_the_choice_tables_are_the_registries_keys():
    """The availability and policy choices the command line offers are exactly what
    the simulator builds."""
    from fastfair.sim import names
    from fastfair.sim.population import selection
    from fastfair.sim.rounds.availability import AVAILABILITY

    assert names.AVAILABILITY == tuple(AVAILABILITY)
    assert selection.POLICIES is names.POLICIES
