"""The simulator's side of the opt-in bound: ``SimulationConfig(max_update_norm=...,
update_norm_reference=..., max_samples_per_client=...)`` takes the server step the shared
functions of :mod:`fastfair.aggregators.bounds` give (the same as the Flower strategy's), for
every rule, on the 1000x round of docs/aggregators.md."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fastfair.aggregators.bounds import UpdateBound  # noqa: E402
from fastfair.sim import Simulation, SimulationConfig  # noqa: E402
from fastfair.sim.training.schedule import LocalTrainingConfig  # noqa: E402
from tests.aggregators.test_bounds import ABSOLUTE, BOUND, poison  # noqa: E402

TINY = dict(dataset="synthetic", clients=10, per_round=10, rounds=1, eval_every=1,
            eval_clients=10)


def server_step(sim, updates, losses, counts):
    """The simulator's server side of one round on the given updates ``[10, P]`` (what
    training would hand it): returns the global step ``w - w'``."""
    before = sim.params.clone()
    local = LocalTrainingConfig(epochs=1, batch_size=sim.config.batch_size, lr=sim.config.lr)
    sim._aggregate(np.arange(10), slice(0, 10), losses, counts, sim.rule.client_objective(),
                   torch.from_numpy(updates).to(sim.params.dtype), None, local)
    return (before - sim.params).double().numpy()


def round_of(sim, factor=1000.0):
    """The docs' poisoned round with as many parameters as the simulator's model."""
    P = sim.params.numel()
    updates, losses, counts = poison.poisoned_round(factor)
    rng = np.random.default_rng(1)
    wide = 0.01 * rng.standard_normal((10, P))
    wide[:, :100] = updates  # the docs' round in the first 100 parameters
    wide[9] *= np.where(np.arange(P) < 100, 1.0, factor)
    return wide.astype(np.float32).astype(np.float64), losses, counts


#: Fed-CVaR-Avg's round input (the thresholds) comes from its clients' training, not the updates.
SIM_RULES = [name for name in poison.RULES if name != "fedcvar"]


@pytest.mark.parametrize("name", SIM_RULES)
@pytest.mark.parametrize("bound", [UpdateBound(), BOUND, ABSOLUTE],
                         ids=["off", "median", "absolute"])
def test_the_simulator_bounds_as_the_shared_functions_do(name, bound):
    options = {} if not bound.clips else {"max_update_norm": bound.max_update_norm,
                                          "update_norm_reference": bound.update_norm_reference}
    sim = Simulation(SimulationConfig(rule=name, **TINY, **options))
    updates, losses, counts = round_of(sim)
    step = server_step(sim, updates, losses, counts)
    expected, _ = poison.bounded_step(name, updates, losses, counts, bound)
    scale = np.abs(expected).max()
    assert np.allclose(step, expected, rtol=1e-4, atol=1e-5 * scale)
    if bound.clips and name != "fedmgda":
        free = Simulation(SimulationConfig(rule=name, **TINY))
        free_step = np.linalg.norm(server_step(free, updates, losses, counts))
        # (q-FedAvg's own norm scaling already bounds the poisoned step.)
        assert np.linalg.norm(step) < free_step / (1.1 if name == "qfedavg" else 10)


def test_the_simulator_caps_reported_counts():
    sim = Simulation(SimulationConfig(rule="fedavg", **TINY, max_samples_per_client=1000))
    updates, losses, counts = round_of(sim, factor=1.0)
    counts[9] = 1e308
    server_step(sim, updates, losses, counts)
    assert sim.rule.last_mixture[9] == pytest.approx(1000 / 1900)


@pytest.mark.parametrize("options,match", [
    ({"max_update_norm": 0.0}, "max_update_norm"),
    ({"max_update_norm": 1.0, "update_norm_reference": "mean"}, "update_norm_reference"),
    ({"max_samples_per_client": -5.0}, "max_samples_per_client"),
    ({"update_norm_reference": "absolute"}, "no effect without max_update_norm"),
])
def test_bad_bound_options_are_refused_by_the_config(options, match):
    with pytest.raises((TypeError, ValueError), match=match):
        SimulationConfig(**TINY, **options)
