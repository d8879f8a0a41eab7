"""One name per rule and optimiser, option checks before anything is built, and the one client
objective protocol with its config round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair import aggregators as A
from fastfair.aggregators import registry
from fastfair.aggregators.objectives import ClientObjective


def test_every_rule_is_registered_under_its_own_name():
    assert set(registry.RULES) == {"fedavg", "fairavg", "fedprox", "aaggff-d", "aaggff-s",
                                   "fedmaba", "fedcvar", "qfedavg", "term", "afl", "propfair",
                                   "fedmgda"}
    for name, cls in registry.RULES.items():
        rule = registry.build(name, 8)
        assert type(rule) is cls and rule.name == name
        assert rule.state_dict()["rule"] == name


def test_build_passes_options_and_lists_them():
    rule = registry.build("aaggff-d", 50, cdf="frechet")
    assert isinstance(rule, A.AAggFFD) and rule.cdf == "frechet"
    assert registry.rule_options("fedmaba")["alpha"].default == 0.5
    listing = registry.describe()
    for name in [*registry.RULES, *A.SERVER_OPTIMIZERS]:
        assert f"  {name} " in listing
    assert "tilt=0.1" in listing and "momentum=0.9" in listing
    assert "  proximal   mu=0.1\n" in listing and "  cvar       (fedcvar only)\n" in listing


def test_unknown_names_and_options_suggest_the_closest():
    with pytest.raises(ValueError, match=r"unknown rule 'fedmab' \(did you mean 'fedmaba'\?\)"):
        registry.build("fedmab", 5)
    with pytest.raises(ValueError, match=r"rule 'fedmaba' has no option 'alpah' \(did you mean "
                                         r"'alpha'\?\); its options are: step_size=0.5"):
        registry.build("fedmaba", 5, alpah=0.1)
    with pytest.raises(ValueError, match="unknown server optimizer 'adam'"):
        registry.build_server_optimizer("adam")


@pytest.mark.parametrize("name,options,match", [
    ("term", {"tilt": "0.5"}, "option 'tilt' takes float; got '0.5'"),
    ("fedmgda", {"normalize_updates": 1}, "option 'normalize_updates' takes bool"),
    ("aaggff-d", {"cdf": 3}, "option 'cdf' takes str"),
    ("fedavg", {"zero_total": None}, "option 'zero_total' takes str"),
])
def test_wrong_types_are_refused_before_construction(name, options, match):
    with pytest.raises(TypeError, match=match):
        registry.build(name, 5, **options)


def test_value_errors_name_the_rule():
    with pytest.raises(ValueError, match="rule 'fedcvar': alpha must be finite and in"):
        registry.build("fedcvar", 5, alpha=2.0)


def test_server_optimizers_by_name_step_and_round_trip():
    opt = registry.build_server_optimizer("fedavgm", lr=0.5, momentum=0.5)
    params = np.ones(4)
    opt.step(params, np.full(4, 2.0))
    np.testing.assert_allclose(params, 0.0)       # 1 - 0.5 * 2
    twin = A.FedAvgM(lr=0.5, momentum=0.5)
    twin.load_state_dict(opt.state_dict())
    a, b = np.ones(4), np.ones(4)
    opt.step(a, np.ones(4))
    twin.step(b, np.ones(4))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="config"):
        A.FedAvgM(lr=0.5, momentum=0.1).load_state_dict(opt.state_dict())
    sgd = registry.build_server_optimizer("sgd", lr=0.1)
    p = np.zeros(3)
    sgd.step(p, np.ones(3))
    np.testing.assert_allclose(p, -0.1)


def test_rules_declare_their_round_inputs():
    assert A.QFedAvg(5).round_inputs == ("sq_norms",)
    assert A.QFedAvg(5, form="eg").round_inputs == ()
    assert A.FedMGDA(5).round_inputs == ("updates",)
    assert A.FedCVaRAvg(5).round_inputs == ("thresholds",)
    assert A.FedCVaRAvg(5, form="fedsgd").round_inputs == ()
    assert A.AAggFFS(5).full_participation and not A.AAggFFD(5).full_participation
    cvar = A.FedCVaRAvg(5, 0.3, 0.1).client_objective()
    assert set(cvar.reports) == set(A.FedCVaRAvg(5).round_inputs)


@pytest.mark.parametrize("rule", [A.FedProx(3, mu=0.3), A.PropFair(3, M=4.0, epsilon=0.1),
                                  A.PropFair(3, extension="reference_code"),
                                  A.FedCVaRAvg(3, 0.3, 0.2, threshold=0.7),
                                  A.FedCVaRAvg(3, lr_threshold_ratio=0.5),
                                  A.FedCVaRAvg(3, 0.3, 0.2, lr_threshold=0.05)])
def test_objective_config_round_trip(rule):
    objective = rule.client_objective()
    back = ClientObjective.from_config(objective.to_config())
    assert type(back) is type(objective) and back.options() == objective.options()
    assert all(v is not None for v in objective.to_config().values())   # a Flower ConfigRecord


def test_rules_without_objective_and_a_plain_config():
    for rule in (A.FedAvg(3), A.AAggFFD(3), A.PropFair(3, weighting="eg"),
                 A.FedCVaRAvg(3, form="fedsgd")):
        assert rule.client_objective() is None
    assert type(ClientObjective.from_config({})) is ClientObjective
    with pytest.raises(ValueError, match="lacks fastfair-mu"):
        ClientObjective.from_config({"fastfair-objective": "proximal"})
    with pytest.raises(ValueError, match="known objectives"):
        ClientObjective.from_config({"fastfair-objective": "nope"})


def test_one_objective_serves_a_cohort_and_one_client():
    prox = A.FedProx(3, mu=0.5).client_objective()
    params, glob = torch.ones(2, 4), torch.zeros(4)
    cohort = prox(torch.tensor([1.0, 2.0]), params, glob)
    torch.testing.assert_close(cohort, torch.tensor([2.0, 3.0]))    # 0.25 * 4 = 1
    one = prox(1.0, [np.ones((2, 2))], [np.zeros((2, 2))])
    assert one == pytest.approx(2.0)
    cvar = A.FedCVaRAvg(3, 0.5, 0.0, threshold=1.0).client_objective()
    # t steps with lr_threshold_ratio (default 0.05, the paper's FashionMNIST runs) times lr
    assert cvar.initial_state() == 1.0 and cvar.state_lr(0.1) == pytest.approx(0.005)
    assert A.FedCVaRAvg(3, lr_threshold_ratio=1.0).client_objective().state_lr(0.1) == 0.1
    assert A.FedCVaRAvg(3, lr_threshold=0.02).client_objective().state_lr(0.1) == 0.02
    assert cvar.reply_metrics(0.8) == {"fastfair-threshold": 0.8}
    assert float(cvar(2.0, state=1.0)) == pytest.approx(1.0 + 2.0)
