"""Sweeps keep every run's final global model: ``result.models`` and ``models.pt`` by run name,
the same after a resume; a ModuleModel starts every rule of a seed from the same weights and
different seeds from different ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fastfair.sim import ArrayDataset, ModuleModel, Simulation, SimulationConfig
from fastfair.sim.experiments.sweep import MODELS_FILE, Sweep
from fastfair.sim.seeding import Stream, raw_seed

SMALL = SimulationConfig(clients=6, per_round=3, rounds=4, eval_every=2)
BUILT_IN = SimulationConfig(clients=30, per_round=6, rounds=4, eval_every=2)
DIGITS = SimulationConfig(dataset="digits", clients=12, per_round=3, rounds=4, eval_every=1)
TINY_FEDEVG = {"fedevg": {"spc": 2, "local_epochs": 1, "eval_epochs": 2, "hidden": 16}}


class _Crash(Exception):
    pass


class _CrashAt:
    """Raises after round ``at`` of the run whose name starts with ``run``."""

    def __init__(self, run, at):
        self.run, self.at = run, at

    def on_run_start(self, run, config):
        pass

    def on_round(self, run, record):
        if run.startswith(self.run) and record["round"] == self.at:
            raise _Crash

    def on_run_end(self, run, summary):
        pass

    def close(self):
        pass


def _data():
    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n))
               for n in (9, 14, 5, 11, 7, 13)]
    return ArrayDataset(clients, test=clients)


class _Recording(ModuleModel):
    """A ModuleModel that remembers every initial model it gave, with the generator's seed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.given = []

    def init(self, generator):
        params = super().init(generator)
        self.given.append((generator.initial_seed(), params.clone()))
        return params


def _net():
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _assert_same_models(a, b):
    assert list(a) == list(b)
    for name in a:
        assert list(a[name]) == list(b[name]), name
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), (name, key)


def test_sweep_keeps_every_runs_final_model(tmp_path):
    base = BUILT_IN
    sweep = Sweep(base, ["fedavg", "term"], seeds=[0, 1], rule_options={"term": {"tilt": 1.0}},
                  out=tmp_path / "out")
    result = sweep.run()
    names = [spec.name for spec in sweep.specs]
    assert list(result.models) == names == ["fedavg/seed0", "fedavg/seed1",
                                            "term(tilt=1.0)/seed0", "term(tilt=1.0)/seed1"]
    for name, state in result.models.items():
        assert state and all(isinstance(t, torch.Tensor) and t.device.type == "cpu"
                             for t in state.values()), name
    # Each is the run's own final model: runs differ (rules, seeds).
    flat = {n: torch.cat([t.reshape(-1) for t in s.values()]) for n, s in result.models.items()}
    assert not torch.equal(flat["fedavg/seed0"], flat["fedavg/seed1"])
    assert not torch.equal(flat["fedavg/seed0"], flat["term(tilt=1.0)/seed0"])
    # ... equal to the same run played alone.
    alone = Simulation(dataclasses.replace(base, rule="fedavg", seed=1))
    for _ in range(base.rounds):
        alone.step()
    for key, value in alone.global_state_dict().items():
        torch.testing.assert_close(result.models["fedavg/seed1"][key], value.cpu(), rtol=0,
                                   atol=0)
    saved = torch.load(tmp_path / "out" / MODELS_FILE, weights_only=True)
    _assert_same_models(saved, result.models)


def test_sweep_without_a_folder_keeps_models_in_memory():
    result = Sweep(SMALL, ["fedavg"], seeds=[3], dataset=_data(),
                   model=ModuleModel(_net())).run()
    (state,) = result.models.values()
    assert list(result.models) == ["fedavg/seed3"]
    net = _net()
    net.load_state_dict(state)  # a ModuleModel's models load into the user's module
    assert result.out is None


@pytest.mark.parametrize("crash", [("term/seed0", 3), ("fedavg/seed2", 3)],
                         ids=["killed-in-term", "killed-in-fedavg"])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-at-a-time"])
def test_resumed_sweep_keeps_the_models(tmp_path, crash, batched):
    kwargs = {"seeds": [0, 2], "batched": batched}
    whole = Sweep(BUILT_IN, ["fedavg", "term"], **kwargs, out=tmp_path / "whole").run()
    out = tmp_path / "killed"
    with pytest.raises(_Crash):
        Sweep(BUILT_IN, ["fedavg", "term"], **kwargs, out=out, checkpoint_every=2,
              callbacks=[_CrashAt(*crash)]).run()
    result = Sweep.resume(out).run()
    _assert_same_models(result.models, whole.models)
    _assert_same_models(torch.load(out / MODELS_FILE, weights_only=True), whole.models)


def test_resumed_sweep_with_a_method_keeps_the_finished_rules_models(tmp_path):
    rules = ["fedavg", "fedevg"]
    sweep = Sweep(DIGITS, rules, seeds=[1], rule_options=TINY_FEDEVG, out=tmp_path / "whole")
    whole = sweep.run()
    assert list(whole.models) == [spec.name for spec in sweep.specs]
    assert whole.models[sweep.specs[1].name]  # the method's global model (its classifier)
    out = tmp_path / "killed"
    with pytest.raises(_Crash):  # fedavg finished and checkpointed; fedevg killed
        Sweep(DIGITS, rules, seeds=[1], rule_options=TINY_FEDEVG, out=out, checkpoint_every=2,
              callbacks=[_CrashAt("fedevg", 3)]).run()
    result = Sweep.resume(out).run()
    _assert_same_models(result.models, whole.models)


def test_module_model_sweep_pairs_initial_models_within_a_seed():
    model = _Recording(_net())
    Sweep(SMALL, ["fedavg", "term"], seeds=[0, 1], dataset=_data(), model=model).run()
    by_seed = {}
    for seed, params in model.given:
        by_seed.setdefault(seed, []).append(params)
    assert sorted(by_seed) == sorted(raw_seed(s, Stream.MODEL_INIT) for s in (0, 1))
    for _seed, inits in by_seed.items():
        assert len(inits) == 2  # one per rule
        assert torch.equal(inits[0], inits[1])
    first, second = (v[0] for v in by_seed.values())
    assert not torch.equal(first, second)  # seeds vary the initial model


def test_simulations_of_a_seed_start_from_the_same_module_weights():
    data, model = _data(), ModuleModel(_net())
    params = {(rule, seed): Simulation(dataclasses.replace(SMALL, rule=rule, seed=seed),
                                       dataset=data, model=model).params
              for rule in ("fedavg", "qfedavg") for seed in (0, 1)}
    assert torch.equal(params["fedavg", 0], params["qfedavg", 0])
    assert torch.equal(params["fedavg", 1], params["qfedavg", 1])
    assert not torch.equal(params["fedavg", 0], params["fedavg", 1])
    given = ModuleModel(model.module, init="given")
    fixed = [Simulation(dataclasses.replace(SMALL, seed=seed), dataset=data, model=given).params
             for seed in (0, 1)]
    assert torch.equal(fixed[0], fixed[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_runs_models_are_kept_on_the_cpu(tmp_path):
    # A run trained on the GPU is read back on a machine without one: torch.load with its
    # defaults and no map_location.
    from fastfair.sim import Experiment

    config = dataclasses.replace(SMALL, device="cuda")
    results = [Experiment(config, ["fedavg"], out=tmp_path / "one").run(),
               Sweep(config, ["fedavg"], [0, 1], out=tmp_path / "several").run()]
    for result in results:
        saved = torch.load(result.out / MODELS_FILE, map_location=None)
        for models in (result.models, saved):
            assert {t.device.type for state in models.values() for t in state.values()} == {"cpu"}

