"""ModuleModel's initial model: drawn from the run's seed by default (each submodule's
reset_parameters under the seed), the module's own weights with init="given"; the module and
torch's global random state are left alone."""

from __future__ import annotations

import pytest
import torch

from fastfair.sim.models.module import ModuleModel
from fastfair.sim.seeding import Stream, raw_seed


def _generator(seed):
    """The generator the runners pass: the run's MODEL_INIT stream."""
    return torch.Generator().manual_seed(raw_seed(seed, Stream.MODEL_INIT))


class _Scaled(torch.nn.Module):
    """A layer with a parameter of its own and no reset_parameters."""

    def __init__(self, n):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((n,), 2.0))

    def forward(self, x):
        return x * self.scale


def _net():
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7, momentum=0.1),
                               _Scaled(7), torch.nn.ReLU(), torch.nn.Linear(7, 3))


def _module_vector(module):
    return torch.cat([t.detach().reshape(-1).float()
                      for t in list(module.parameters()) + list(module.buffers())])


def test_two_seeds_give_different_initial_models_and_one_seed_the_same():
    model = ModuleModel(_net())
    a, b = model.init(_generator(0)), model.init(_generator(1))
    assert a.shape == b.shape == (model.num_params,)
    assert not torch.equal(a, b)
    assert torch.equal(a, model.init(_generator(0)))
    # Another ModuleModel around another copy of the network: the same draws for the seed.
    assert torch.equal(a, ModuleModel(_net()).init(_generator(0)))


def test_the_seeded_model_is_reset_parameters_under_the_seed():
    net = _net()
    torch.manual_seed(raw_seed(5, Stream.MODEL_INIT))
    for sub in net.modules():
        if hasattr(sub, "reset_parameters"):
            sub.reset_parameters()
    assert torch.equal(ModuleModel(_net()).init(_generator(5)), _module_vector(net))


def test_the_seed_leaves_module_and_global_state_alone():
    net = _net()
    before = _module_vector(net)
    model = ModuleModel(net)
    state = torch.random.get_rng_state()
    drawn = model.init(_generator(0))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(_module_vector(net), before)
    # Whatever torch's global generator did before, the seed alone decides.
    torch.manual_seed(123)
    torch.rand(10)
    assert torch.equal(model.init(_generator(0)), drawn)


def test_layers_without_reset_parameters_keep_their_weights():
    net = _net()
    with torch.no_grad():
        net[2].scale.fill_(3.0)
    model = ModuleModel(net)
    for seed in (0, 1):
        (scale,) = [v for k, v in model.state_dict(model.init(_generator(seed))).items()
                    if k == "2.scale"]
        assert torch.equal(scale, torch.full((7,), 3.0))
    assert "2" not in model.resettable and "0" in model.resettable


def test_init_given_keeps_the_modules_weights():
    net = _net()
    model = ModuleModel(net, init="given")
    expected = _module_vector(net)
    for seed in (0, 1):
        assert torch.equal(model.init(_generator(seed)), expected)
    # Without a generator, any ModuleModel gives the module's weights.
    assert torch.equal(ModuleModel(net).init(None), expected)


def test_init_is_checked():
    with pytest.raises(ValueError, match="init must be one of 'seed', 'given'; got 'random'"):
        ModuleModel(_net(), init="random")
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        ModuleModel(lambda x: x)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        ModuleModel(_net()).init(0)


def test_a_module_nothing_resets_warns_under_init_seed():
    with pytest.warns(UserWarning, match="no submodule of the module has reset_parameters"):
        model = ModuleModel(_Scaled(3))
    assert torch.equal(model.init(_generator(0)), model.init(_generator(1)))


@pytest.mark.parametrize("network", ["femnist-cnn", "char-lstm"])
def test_the_zoo_networks_draw_every_weight_from_the_seed(network):
    """Dense and the LSTM have reset_parameters: a zoo network built outside the simulator (the
    global generator anywhere) starts from weights of the seed alone, with their bounds."""
    from types import SimpleNamespace

    from fastfair.sim.models.zoo import LSTM, Dense
    from fastfair.sim.names import get_model_builder

    shape = SimpleNamespace(sample_shape=(1, 28, 28), num_classes=62, vocab_size=80)
    build = get_model_builder(network)
    firsts = []
    for state in (1, 2):
        torch.manual_seed(state)
        model = ModuleModel(build(shape, 64))
        firsts.append(model.init(_generator(0)))
    assert torch.equal(firsts[0], firsts[1])
    assert not torch.equal(firsts[0], model.init(_generator(1)))
    torch.manual_seed(3)
    lstm = LSTM(8, 16, 2)
    assert all(layer.bound == 16 ** -0.5 for layer in [*lstm.ih, *lstm.hh])
    assert all(p.abs().max() <= 16 ** -0.5 for p in lstm.parameters())
    dense = Dense(25, 4)
    assert dense.bound == 0.2 and dense.weight.abs().max() <= 0.2
