"""The papers' models and any nn.Module batched across the cohort: shapes, per-client dropout and
batch norm against a plain per-client loop, the LSTM against nn.LSTM, the state_dict out, and
the errors that name what does not fit."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fastfair.sim import seeding
from fastfair.sim.models.catalog import build_model
from fastfair.sim.models.flat import TrainingStep, check_model
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.models.zoo import CIFAR10_MEAN, CIFAR10_STD, LSTM, Standardize
from fastfair.sim.names import check_pair, get_model, list_datasets, list_models
from fastfair.sim.training.local import train_clients
from fastfair.sim.training.schedule import LocalTrainingConfig, minibatch_schedule


@pytest.fixture(params=["together", "one at a time"])
def passes(request, monkeypatch):
    """Runs a test with the cohort's copies batched by vmap, and again as a model too big to
    batch on the CPU runs them (one plain module call per copy)."""
    if request.param == "one at a time":
        monkeypatch.setattr("fastfair.sim.models.flat.CPU_PASS_BYTES", 1)
    return request.param


def _data(shape, classes, vocab=None, labels=()):
    return SimpleNamespace(sample_shape=shape, num_classes=classes, vocab_size=vocab,
                           label_shape=labels, num_features=int(np.prod(shape)))


FITS = {"femnist-cnn": _data((1, 28, 28), 62), "cifar-cnn": _data((3, 32, 32), 10),
        "flgo-cifar-cnn": _data((3, 32, 32), 10),
        "resnet8": _data((3, 32, 32), 100), "celeba-cnn": _data((3, 84, 84), 2),
        "char-lstm": _data((80,), 81, 81, (80,)), "sent140-lstm": _data((25,), 2, 1 << 14)}


NETWORKS = [name for name in list_models() if get_model(name).eval_rows is not None]


def test_every_network_has_samples_that_fit():
    assert sorted(FITS) == sorted(NETWORKS)


@pytest.mark.parametrize("name", NETWORKS)
def test_every_model_maps_its_samples_to_logits(name):
    d = FITS[name]
    model = build_model(name, d, seed=3)
    x = (torch.randint(0, d.vocab_size, (2, 4) + d.sample_shape) if d.vocab_size
         else torch.rand((2, 4) + d.sample_shape))
    params = model.init(None).repeat(2, 1)
    assert model.forward(params, x).shape == (2, 4) + d.label_shape + (d.num_classes,)
    # Initial weights come from the seed.
    assert torch.equal(build_model(name, d, seed=3).init(None), model.init(None))
    assert not torch.equal(build_model(name, d, seed=4).init(None), model.init(None))


def test_flgo_cifar_cnn_is_flgos_module_on_normalized_images():
    # FLGo's benchmark/cifar10_classification/model/cnn.py, fed torchvision's Normalize of
    # easyFL's benchmark/cifar10_classification/core.py, with our weights copied in.
    model = build_model("flgo-cifar-cnn", FITS["flgo-cifar-cnn"], seed=5)
    params = model.init(None)
    ours = list(model.state_dict(params).values())
    theirs = nn.Sequential(nn.Conv2d(3, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(64, 64, 5),
                           nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(1), nn.Linear(1600, 384),
                           nn.ReLU(), nn.Linear(384, 192), nn.ReLU(), nn.Linear(192, 10))
    layers = [m for m in theirs if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        for layer, (w, b) in zip(layers, zip(ours[0::2], ours[1::2])):
            layer.weight.copy_(w if isinstance(layer, nn.Conv2d) else w.T)
            layer.bias.copy_(b)
    x = torch.rand(6, 3, 32, 32)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
    std = torch.tensor([0.2023, 0.1994, 0.2010]).view(3, 1, 1)
    expected = theirs((x - mean) / std)
    torch.testing.assert_close(model.forward(params[None], x[None])[0], expected,
                               rtol=1e-5, atol=1e-5)
    # torch's default initialisation: every weight and bias within fan_in^-1/2.
    for w, b in zip(ours[0::2], ours[1::2]):
        bound = (w[0].numel() if w.dim() == 4 else w.shape[0]) ** -0.5
        assert w.abs().max() <= bound and b.abs().max() <= bound
        assert w.abs().max() > 0.9 * bound


def test_standardize_checks_its_constants_and_the_channels():
    with pytest.raises(ValueError, match="one value per channel, std > 0"):
        Standardize((0.5, 0.5), (0.2,))
    with pytest.raises(ValueError, match="one value per channel, std > 0"):
        Standardize((0.5,), (0.0,))
    with pytest.raises(ValueError, match="images with 1 channels; the standardisation has 3"):
        Standardize(CIFAR10_MEAN, CIFAR10_STD)(torch.rand(2, 1, 4, 4))
    with pytest.raises(ValueError, match="takes colour images"):
        build_model("flgo-cifar-cnn", _data((1, 32, 32), 10))
    with pytest.raises(ValueError, match="at least 16x16"):
        build_model("flgo-cifar-cnn", _data((3, 12, 12), 10))


def test_every_data_set_has_a_default_model_that_takes_its_samples():
    for name in list_datasets():
        check_pair(name, None)
    with pytest.raises(ValueError, match="'char-lstm' cannot take femnist's samples .image.; "
                                         "choose from logreg, mlp, femnist-cnn"):
        check_pair("femnist", "char-lstm")


def test_a_model_that_does_not_fit_is_refused_with_both_shapes():
    gray = build_model("femnist-cnn", FITS["femnist-cnn"])
    with pytest.raises(ValueError, match=r"samples \[3, 32, 32\].*on one sample "
                                         r"\[1, 1, 3, 32, 32\] it fails: RuntimeError"):
        check_model(gray, _data((3, 32, 32), 10))
    with pytest.raises(ValueError, match="takes token ids"):
        build_model("char-lstm", _data((1, 28, 28), 62))
    net = ModuleModel(nn.Sequential(nn.Flatten(), nn.Linear(12, 5)))
    with pytest.raises(ValueError, match=r"F = 12 features and C = 3 classes.*on one "
                                         r"sample \[1, 1, 12\] it returns shape \[1, 1, 5\]"):
        check_model(net, _data((12,), 3))


def test_batch_norm_without_momentum_and_other_random_ops_are_refused(passes):
    with pytest.raises(ValueError, match="momentum=None"):
        ModuleModel(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3, momentum=None)))

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            return self.lin(x + torch.randn_like(x))

    model = ModuleModel(Noisy())
    with pytest.raises(ValueError, match="random operation other than dropout"):
        model.forward(model.init(None).repeat(2, 1), torch.zeros(2, 4, 3))


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 5 * 5, 16), nn.BatchNorm1d(16), nn.ReLU(),
                         nn.Linear(16, 3))


def _cohort(counts, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = int(sum(counts))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return torch.rand(n, 1, 5, 5, generator=g), torch.randint(0, 3, (n,), generator=g), offsets


def test_batch_norm_cohort_matches_a_plain_per_client_loop(passes):
    # Ragged clients: short last batches and a client that stops early exercise the masks.
    counts = np.array([7, 3, 12])
    x, y, offsets = _cohort(counts)
    batch = SimpleNamespace(x=x, y=y, offsets=offsets, counts=counts)
    config = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1)
    model = ModuleModel(_net())
    theta = model.init(None)
    ids = np.array([4, 9, 1])
    updates, _ = train_clients(model, theta, batch, config, ids, seed=5)
    steps = list(minibatch_schedule(counts, config, ids, seed=5))
    for k in range(3):
        net = _net()
        net.load_state_dict(model.state_dict(theta))
        net.train()
        for take, valid in steps:
            if not valid[k].any():
                continue
            rows = take[k][valid[k]]
            loss = nn.functional.cross_entropy(net(x[rows]), y[rows])
            grads = torch.autograd.grad(loss, list(net.parameters()))
            with torch.no_grad():
                for p, g in zip(net.parameters(), grads):
                    p -= config.lr * g
        trained = model.state_dict(theta - updates[k])
        for name, value in net.state_dict().items():
            torch.testing.assert_close(trained[name].to(value.dtype), value, rtol=2e-4,
                                       atol=2e-5, msg=f"client {k}: {name}")


def test_dropout_is_per_client_reproducible_and_independent_of_the_cohort(passes):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 32), nn.Dropout(0.5), nn.ReLU(), nn.Dropout(0.3),
                        nn.Linear(32, 3))
    model = ModuleModel(net)
    counts = np.array([9, 6, 11, 5])
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(31, 6, generator=g), torch.randint(0, 3, (31,), generator=g)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    config = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.2)
    theta = model.init(None)
    ids = np.array([10, 20, 30, 40])
    full, _ = train_clients(model, theta, SimpleNamespace(x=x, y=y, offsets=offsets,
                                                          counts=counts), config, ids, seed=3)
    again, _ = train_clients(model, theta, SimpleNamespace(x=x, y=y, offsets=offsets,
                                                           counts=counts), config, ids, seed=3)
    assert torch.equal(full, again)
    rows = slice(offsets[2], offsets[3])
    alone, _ = train_clients(model, theta, SimpleNamespace(
        x=x[rows], y=y[rows], offsets=np.array([0, 11]), counts=counts[2:3]), config, ids[2:3],
        seed=3)
    if passes == "together":
        torch.testing.assert_close(alone[0], full[2], rtol=1e-5, atol=1e-6)
    else:  # the same plain module calls in any company
        assert torch.equal(alone[0], full[2])
    other, _ = train_clients(model, theta, SimpleNamespace(x=x, y=y, offsets=offsets,
                                                           counts=counts), config, ids, seed=4)
    assert not torch.allclose(other, full)


def test_dropout_masks_keep_1_minus_p_and_differ_per_client(passes):
    with pytest.raises(ValueError, match="no parameters"):
        ModuleModel(nn.Sequential(nn.Dropout(0.25)))
    lin = nn.Linear(1, 1, bias=False)
    nn.init.ones_(lin.weight)
    model = ModuleModel(nn.Sequential(lin, nn.Dropout(0.25)))
    keys = torch.from_numpy(seeding.step_keys(9, np.arange(3), 0))
    buffers = torch.zeros(3, 0)
    out = model.forward(model.init(None).repeat(3, 1), torch.ones(3, 20000, 1),
                        TrainingStep(torch.ones(3, 20000, dtype=torch.bool), keys, buffers))
    kept = (out != 0).double().mean(1)[:, 0]
    assert torch.all((kept - 0.75).abs() < 0.01)
    assert torch.allclose(out[out != 0], torch.tensor(1 / 0.75))
    assert not torch.equal(out[0] != 0, out[1] != 0)


def test_keyed_uniforms_match_the_numpy_hash():
    key = torch.tensor(int(seeding.step_keys(1, np.array([5]), 2)[0]))
    got = seeding.keyed_uniform(key, 3, (4, 5), torch.device("cpu"))
    golden = 0x9E3779B97F4A7C15
    stream = seeding.splitmix64(np.array([int(key) ^ ((3 * golden) % 2 ** 64)], np.uint64))
    h = seeding.splitmix64(np.arange(20, dtype=np.uint64) ^ stream)
    expected = (h >> np.uint64(40)).astype(np.float64) / 2 ** 24
    np.testing.assert_array_equal(got.numpy().reshape(-1), expected.astype(np.float32))


def test_our_lstm_is_torch_lstm():
    torch.manual_seed(0)
    ours, ref = LSTM(5, 7, 2), nn.LSTM(5, 7, 2, batch_first=True)
    with torch.no_grad():
        for layer in range(2):
            ours.ih[layer].weight.copy_(getattr(ref, f"weight_ih_l{layer}").T)
            ours.hh[layer].weight.copy_(getattr(ref, f"weight_hh_l{layer}").T)
            ours.ih[layer].bias.copy_(getattr(ref, f"bias_ih_l{layer}")
                                      + getattr(ref, f"bias_hh_l{layer}"))
    x = torch.randn(3, 6, 5)
    torch.testing.assert_close(ours(x), ref(x)[0], rtol=1e-5, atol=1e-6)


def test_per_position_labels_average_loss_and_accuracy_over_positions():
    model = build_model("char-lstm", FITS["char-lstm"])
    logits = torch.zeros(1, 2, 80, 81)
    logits[0, 0, :40, 5] = 10.0
    y = torch.full((1, 2, 80), 5)
    hits = model.sample_hits(logits, y)
    np.testing.assert_allclose(hits.numpy(), [[0.5, 0.0]])
    loss = model.sample_loss(logits, y)
    expected = nn.functional.cross_entropy(logits[0, 0], y[0, 0])
    torch.testing.assert_close(loss[0, 0], expected)


def test_a_custom_loss_is_used_for_training_and_evaluation():
    torch.manual_seed(0)
    smooth = functools.partial(nn.functional.cross_entropy, reduction="none",
                               label_smoothing=0.2)
    model = ModuleModel(nn.Linear(4, 3), loss=smooth)
    out, y = torch.randn(2, 5, 3), torch.randint(0, 3, (2, 5))
    torch.testing.assert_close(model.sample_loss(out, y),
                               smooth(out.reshape(-1, 3), y.reshape(-1)).reshape(2, 5))


def test_state_dict_loads_into_the_module_and_gives_the_same_outputs():
    net = _net()
    model = ModuleModel(net)
    flat = model.init(None) + torch.linspace(0, 1, model.num_params)
    state = model.state_dict(flat)
    assert list(state) == list(net.state_dict())
    assert state["1.num_batches_tracked"].dtype == torch.int64
    fresh = _net()
    fresh.load_state_dict(state)
    fresh.eval()
    x = torch.rand(6, 1, 5, 5)
    torch.testing.assert_close(fresh(x), model.forward(flat.reshape(1, -1), x.unsqueeze(0))[0])


def test_a_gpu_pass_keeps_its_copies_within_a_fraction_of_the_device(monkeypatch):
    from types import SimpleNamespace as Props

    from fastfair.sim.models.flat import CUDA_PASS_FRACTION, LogisticRegression

    model = LogisticRegression(784, 62)  # 48,670 parameters, 194,680 bytes a copy
    monkeypatch.setattr("torch.cuda.get_device_properties",
                        lambda device: Props(total_memory=141 * 10 ** 9))
    expected = int(141e9 * CUDA_PASS_FRACTION) // (4 * model.num_params)
    assert model.rows_per_pass(torch.device("cuda")) == expected == 45266
    monkeypatch.setattr("torch.cuda.get_device_properties",
                        lambda device: Props(total_memory=10 ** 6))
    assert model.rows_per_pass(torch.device("cuda:0")) == 1
    assert model.rows_per_pass(torch.device("meta")) is None
