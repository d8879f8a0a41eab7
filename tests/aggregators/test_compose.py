"""The client objective as an axis apart from the rule: choices, presets and refusals."""

from __future__ import annotations

import pytest

from fastfair.aggregators import compose, registry
from fastfair.aggregators.objectives import PropFairObjective, ProximalObjective


@pytest.mark.parametrize("rule", sorted(set(registry.RULES) - {"fedprox", "propfair", "fedcvar"}))
def test_every_rule_without_an_objective_of_its_own_takes_each(rule):
    aggregator = registry.build(rule, 4)
    assert compose.choose_objective(aggregator, None) is None
    assert compose.choose_objective(aggregator, "plain") is None
    prox = compose.choose_objective(aggregator, "proximal", {"mu": 0.01})
    assert isinstance(prox, ProximalObjective) and prox.mu == 0.01
    assert compose.round_objective(aggregator, prox) is prox
    fair = compose.choose_objective(aggregator, "propfair", {"M": 3.0})
    assert isinstance(fair, PropFairObjective) and (fair.M, fair.epsilon) == (3.0, 0.2)


def test_an_objective_takes_the_options_and_defaults_of_the_rule_that_names_it():
    assert compose.objective_options("proximal") == {"mu": 0.1}
    assert compose.objective_options("propfair") == {"M": 2.0, "epsilon": 0.2,
                                                     "extension": "huber"}
    assert compose.objective_options("plain") == {} == compose.objective_options("cvar")
    fedavg = registry.build("fedavg", 4)
    for rule, name, options in (
            ("fedprox", "proximal", {"mu": 0.3}),
            ("propfair", "propfair", {"M": 5.0, "extension": "reference_code"})):
        preset = registry.build(rule, 4, **options).client_objective()
        chosen = compose.choose_objective(fedavg, name, options)
        assert chosen.to_config() == preset.to_config()


def test_the_rules_own_objective_stays_with_its_state():
    cvar = registry.build("fedcvar", 4)
    assert compose.choose_objective(cvar, "cvar") is None
    cvar.t = 0.7  # the threshold the rule sends moves round by round
    assert compose.round_objective(cvar, None).to_config()["fastfair-threshold"] == 0.7
    assert compose.choose_objective(registry.build("fedprox", 4), "proximal") is None


@pytest.mark.parametrize("rule,options,name,message", [
    ("fedprox", {}, "propfair", "fedprox is the proximal objective with FedAvg's sample-weighted "
                                r"mixing.*fedavg with objective 'propfair' \(--rule fedavg "
                                "--objective propfair"),
    ("fedprox", {}, "plain", "--rule fedavg --objective plain"),
    ("propfair", {}, "proximal", "PropFair's loss transform with FedAvg's mixing"),
    ("fedcvar", {}, "proximal", "averages the thresholds t' that its CVaR objective trains"),
    ("fedcvar", {"form": "fedsgd"}, "proximal", "gradient of its plain loss at the received"),
    ("propfair", {"weighting": "eg"}, "propfair", "already apply the transform's gradient"),
    ("fedavg", {}, "cvar", "only fedcvar's server sends and averages"),
])
def test_a_combination_without_meaning_is_refused_with_its_reason(rule, options, name, message):
    with pytest.raises(ValueError, match=message):
        compose.choose_objective(registry.build(rule, 4, **options), name)


def test_propfairs_eg_weighting_takes_the_proximal_term():
    eg = registry.build("propfair", 4, weighting="eg")
    assert isinstance(compose.choose_objective(eg, "proximal"), ProximalObjective)


@pytest.mark.parametrize("name,options,kind,message", [
    ("proximal", {"mu": -1.0}, ValueError, r"objective 'proximal': mu must be"),
    ("proximal", {"mu": "big"}, TypeError, r"objective 'proximal': option 'mu' takes float"),
    ("proximal", {"nu": 1.0}, ValueError, r"has no option 'nu'; its options: mu=0.1"),
    ("propfair", {"extension": "log"}, ValueError, r"objective 'propfair': extension"),
    ("plain", {"mu": 1.0}, ValueError, r"objective 'plain' takes no options"),
    ("proxima", {}, ValueError, r"unknown objective 'proxima' \(did you mean 'proximal'\?\)"),
    (None, {"mu": 1.0}, ValueError, r"objective options need an objective"),
])
def test_names_and_options_are_checked_before_anything_is_built(name, options, kind, message):
    with pytest.raises(kind, match=message):
        compose.check_objective_options(name, options)
    with pytest.raises(kind, match=message):
        compose.choose_objective(registry.build("fedavg", 4), name, options)


def test_the_rules_own_objective_takes_its_options_as_rule_options():
    with pytest.raises(ValueError, match=r"--rule-option mu=\.\.\."):
        compose.choose_objective(registry.build("fedprox", 4), "proximal", {"mu": 0.2})


@pytest.mark.parametrize("mu", [float("nan"), float("inf"), -1.0])
def test_a_proximal_objective_built_directly_checks_mu(mu):
    with pytest.raises(ValueError, match="mu must be finite"):
        ProximalObjective(mu)


@pytest.mark.parametrize("settings", [
    dict(rule="fedavg", objective="proximal", objective_options={"mu": 1e6}),
    dict(rule="fedprox", rule_options={"mu": 20.0}),
])
def test_a_proximal_step_that_diverges_is_refused_before_a_run(settings):
    from fastfair.sim.config import SimulationConfig
    from fastfair.sim.rounds.build import RulePlan

    config = SimulationConfig(clients=4, per_round=2, lr=0.1, **settings)
    with pytest.raises(ValueError, match=r"objective 'proximal': mu = .* lr \* mu = .* >= 2"):
        RulePlan(config)
    RulePlan(SimulationConfig(clients=4, per_round=2, lr=0.1, rule="fedprox",
                              rule_options={"mu": 19.0}))
