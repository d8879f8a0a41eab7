"""FedEvg and SuPerFed runners at tiny sizes: SuPerFed reduces to FedAvg (lambda = 0, nu = mu = 0),
rounds produce the engine's records, checkpoints round-trip, and ``fastfair simulate`` runs them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastfair.cli import main
from fastfair.sim import FedEvgSimulation, Simulation, SimulationConfig, SuperFedSimulation

torch = pytest.importorskip("torch")

TINY = dict(dataset="digits", clients=12, per_round=3, rounds=3, eval_every=3, model="mlp",
            hidden=8, epochs=1, batch_size=32, lr=0.05)
TINY_DATA = dict(dataset="digits", clients=12, per_round=3, rounds=3, eval_every=3)
TINY_FEDEVG = {"spc": 2, "local_epochs": 1, "eval_epochs": 2, "hidden": 16}


def test_superfed_without_mixing_and_regularisers_is_fedavg():
    opts = {"start": 1.0, "nu": 0.0, "mu": 0.0, "momentum": 0.0, "weight_decay": 0.0}
    sf = SuperFedSimulation(SimulationConfig(rule="superfed-mm", rule_options=opts, **TINY))
    avg = Simulation(SimulationConfig(rule="fedavg", **TINY))
    for _ in range(3):
        sf.step()
        avg.step()
    torch.testing.assert_close(sf.params, avg.params, rtol=1e-5, atol=1e-6)
    # lambda = 0 on the grid is the global model.
    lams, acc, _ = sf.evaluate_grid()
    glob = avg.evaluate()[0]
    np.testing.assert_allclose(acc[0], glob)


@pytest.mark.parametrize("rule", ["superfed-mm", "superfed-lm"])
def test_superfed_rounds_and_checkpoint(rule):
    cfg = SimulationConfig(rule=rule, rule_options={"start": 0.3}, **TINY)
    a = SuperFedSimulation(cfg)
    a.step()
    state = a.state_dict()
    b = SuperFedSimulation(cfg)
    b.load_state_dict(state)
    ra, rb = a.step(), b.step()
    assert {k: v for k, v in ra.items() if k != "seconds"} == {
        k: v for k, v in rb.items() if k != "seconds"}
    assert ra["mixing"] == 1
    torch.testing.assert_close(a.params, b.params, rtol=0, atol=0)
    torch.testing.assert_close(a.local, b.local, rtol=0, atol=0)
    last = a.step()
    assert "acc_mean" in last and 0.0 <= last["best_lambda"] <= 1.0
    assert {"acc_global", "acc_local"} <= set(last)
    # Mixing trained the sampled clients' local models away from their first draws; a run that
    # never mixes samples clients too, but keeps its local models as drawn.
    assert _local_models_trained(a)
    never = SuperFedSimulation(SimulationConfig(rule=rule, rule_options={"start": 1.0}, **TINY))
    for _ in range(3):
        assert never.step()["mixing"] == 0
    assert never.has_local.any() and not _local_models_trained(never)


def _local_models_trained(sim: SuperFedSimulation) -> bool:
    """Whether some client's local model differs from the one it was first given."""
    ids = np.flatnonzero(sim.has_local)
    drawn = SuperFedSimulation(sim.config).local_models(ids)
    return not torch.equal(sim.local[torch.as_tensor(ids)], drawn)


def test_superfed_lm_draws_one_lambda_per_layer():
    sf = SuperFedSimulation(SimulationConfig(rule="superfed-lm", **TINY))
    lam = sf._lambdas(np.random.default_rng(0), 3, True)
    assert lam.shape == (3, sf.layout.num_segments) and len(np.unique(lam[0])) > 1
    mm = SuperFedSimulation(SimulationConfig(rule="superfed-mm", **TINY))
    lam = mm._lambdas(np.random.default_rng(0), 3, True)
    assert np.all(lam == lam[:, :1])


def test_fedevg_rounds_and_checkpoint():
    cfg = SimulationConfig(rule="fedevg", rule_options=TINY_FEDEVG, **TINY_DATA)
    a = FedEvgSimulation(cfg)
    x0 = a.synthetic.clone()
    a.step()
    assert not torch.equal(a.synthetic, x0)
    b = FedEvgSimulation(cfg)
    b.load_state_dict(a.state_dict())
    ra, rb = a.step(), b.step()
    assert {k: v for k, v in ra.items() if k != "seconds"} == {
        k: v for k, v in rb.items() if k != "seconds"}
    torch.testing.assert_close(a.synthetic, b.synthetic, rtol=0, atol=0)
    assert ra["beta"] == pytest.approx(float(a.betas[1]))
    last = a.step()
    assert 0.0 <= last["acc_mean"] <= 1.0 and last["beta"] == pytest.approx(0.01)
    acc, loss, counts = a.evaluate()
    assert acc.shape == counts.shape == (len(a.eval_ids),)


def test_fedevg_code_variant_clamps_the_synthetic_set():
    opts = {**TINY_FEDEVG, "variant": "reference_code"}
    sim = FedEvgSimulation(SimulationConfig(rule="fedevg", rule_options=opts, **TINY_DATA))
    assert sim.opts.beta_end == 1.0 and sim.opts.server_noise == 1e-4 and sim.opts.grad_clip == 3
    sim.step()
    assert float(sim.synthetic.min()) >= 0.0 and float(sim.synthetic.max()) <= 1.0


def test_fedevg_rejects_unbounded_data_and_unknown_options():
    with pytest.raises(ValueError, match="--dataset digits"):
        FedEvgSimulation(SimulationConfig(rule="fedevg", dataset="synthetic"))
    with pytest.raises(ValueError, match="has no option"):
        FedEvgSimulation(SimulationConfig(rule="fedevg", rule_options={"bogus": 1}, **TINY_DATA))
    with pytest.raises(ValueError, match=r"does not use lr \(--lr\): FedEvg has its own"):
        FedEvgSimulation(SimulationConfig(rule="fedevg", **TINY_DATA, lr=0.5))


@pytest.mark.parametrize("rule,options,model", [
    ("fedevg", TINY_FEDEVG, []), ("superfed-mm", {}, ["--model", "mlp", "--hidden", "8"])])
def test_cli_runs_methods(tmp_path, capsys, rule, options, model):
    out = tmp_path / rule
    argv = ["simulate", "--rule", rule, "--clients", "12", "--per-round", "3", "--rounds", "2",
            "--eval-every", "1", *model, "--out", str(out), "--quiet"]
    for k, v in options.items():
        argv += ["--rule-option", f"{k}={v}"]
    assert main(argv) == 0
    history = json.loads((out / "metrics.json").read_text())[rule]
    assert len(history) == 2 and "acc_mean" in history[-1]
    assert json.loads((out / "config.json").read_text())["config"]["dataset"] == "digits"
    lines = (out / "final_accuracy.csv").read_text().strip().splitlines()
    assert len(lines) > 1


def test_cli_rejects_unknown_method_option(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["simulate", "--rule", "superfed-lm", "--rule-option", "lam=1", "--out",
                 str(out), "--quiet"]) == 2
    assert not out.exists()
