"""fastfair.sim.config: the checks of SimulationConfig."""

import dataclasses

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


def test_numpy_scalars_are_taken_where_python_numbers_are():
    import json

    import numpy as np

    given = SimulationConfig(clients=np.int64(10), per_round=np.int32(2), rounds=np.uint8(3),
                             lr=np.float32(0.5), train_loss=np.bool_(True), population="devices",
                             population_options={"time_zones": np.int64(4),
                                                 "speeds": [np.float64(10.0), 20.0, 30.0]})
    plain = SimulationConfig(clients=10, per_round=2, rounds=3, lr=0.5, train_loss=True,
                             population="devices",
                             population_options={"time_zones": 4, "speeds": [10.0, 20.0, 30.0]})
    assert given == plain
    assert type(given.clients) is int and type(given.population_options["time_zones"]) is int
    json.dumps(dataclasses.asdict(given))
    with pytest.raises(TypeError, match="option 'clients' takes int; got 10.0"):
        SimulationConfig(clients=np.float64(10.0))
