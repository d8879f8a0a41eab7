"""Mixed precision of local training: bf16 / fp16 autocast where the device runs it, refused
before anything runs where it does not; parameters and updates stay float32."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fastfair.sim import Simulation, SimulationConfig
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.rounds import runner
from fastfair.sim.training.local import train_clients
from fastfair.sim.training.precision import autocast, check_precision
from fastfair.sim.training.schedule import LocalTrainingConfig

BF16_CPU = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _no_cpu_support(monkeypatch):
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", lambda: False)


def test_a_precision_the_device_cannot_run_is_refused_before_anything_runs(monkeypatch):
    _no_cpu_support(monkeypatch)

    def no_data(*args, **kwargs):
        raise AssertionError("the data set was built before the precision was checked")

    monkeypatch.setattr(runner, "build_dataset", no_data)
    for precision in ("bf16", "fp16"):
        with pytest.raises(ValueError, match=f"precision '{precision}' .*this CPU has no native "
                                             f"{precision}.*pass precision='fp32'"):
            Simulation(SimulationConfig(precision=precision))
    with pytest.raises(ValueError, match=r"precision \(--precision\) must be one of fp32, bf16"):
        SimulationConfig(precision="int8")
    with pytest.raises(ValueError, match="precision must be 'fp32', 'bf16' or 'fp16'"):
        LocalTrainingConfig(precision="fp64")
    check_precision("fp32", torch.device("cpu"))  # always runs
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision("tf32", torch.device("cpu"))


def test_autocast_is_the_precisions_dtype_and_nothing_for_fp32():
    x = torch.ones(2, 3)
    with autocast("fp32", torch.device("cpu")):
        assert (x @ x.T).dtype == torch.float32
    with autocast("bf16", torch.device("cpu")):
        assert (x @ x.T).dtype == torch.bfloat16


@pytest.mark.skipif(not BF16_CPU, reason="needs a CPU with bf16 kernels")
@pytest.mark.parametrize("cohort", ["alone", "vmap"])
def test_bf16_training_keeps_float32_updates_close_to_fp32(cohort):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(4 * 3 * 3, 3))
    model = ModuleModel(net, cohort=cohort)
    g = torch.Generator().manual_seed(1)
    counts = np.array([9, 6, 11])
    batch = SimpleNamespace(x=torch.rand(26, 1, 6, 6, generator=g),
                            y=torch.randint(0, 3, (26,), generator=g),
                            offsets=np.concatenate([[0], np.cumsum(counts)]), counts=counts)
    theta = model.init(None)
    out = {}
    for precision in ("fp32", "bf16"):
        config = LocalTrainingConfig(epochs=2, batch_size=4, lr=0.1, precision=precision)
        out[precision], _ = train_clients(model, theta, batch, config, np.arange(3), seed=2)
    assert out["bf16"].dtype == torch.float32 and not torch.equal(out["bf16"], out["fp32"])
    # bf16 keeps 8 bits of mantissa: the updates agree to a few per cent of their size.
    assert (out["bf16"] - out["fp32"]).norm() < 0.05 * out["fp32"].norm()


@pytest.mark.skipif(not BF16_CPU, reason="needs a CPU with bf16 kernels")
@pytest.mark.parametrize("model", ["logreg", "mlp"])
def test_a_bf16_run_trains_through_autocast_with_float32_parameters(model):
    # logreg: through autograd, not the fp32 kernel; mlp: a hidden layer's bf16 output feeds
    # the next product's backward.
    config = dict(clients=20, per_round=4, rounds=2, eval_every=2, model=model)
    fp32, bf16 = (Simulation(SimulationConfig(**config, precision=p)) for p in ("fp32", "bf16"))
    for _ in range(2):
        fp32.step(), bf16.step()
    assert bf16.params.dtype == torch.float32 and not torch.equal(bf16.params, fp32.params)
    torch.testing.assert_close(bf16.params, fp32.params, rtol=0.05, atol=0.02)


def test_cuda_bf16_needs_native_support_and_fp16_runs_on_any_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True:
                        including_emulation)  # emulated only, as on a pre-Ampere GPU
    with pytest.raises(ValueError, match="the GPU Tesla T4 has no native bf16 arithmetic.*"
                                         "pass precision='fp32' or 'fp16'"):
        check_precision("bf16", torch.device("cuda"))
    check_precision("fp16", torch.device("cuda:0"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    check_precision("bf16", torch.device("cuda"))
