"""Ditto against its definition (Li et al. 2021, Algorithm 1): the personal step by hand, a
round against a brute-force loop over the clients one at a time, the global model equal to
FedAvg's, lambda = 0 as local training alone, checkpoints and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastfair.cli import main
from fastfair.methods.ditto import DittoOptions, personal_step
from fastfair.sim import DittoSimulation, Simulation, SimulationConfig
from fastfair.sim.seeding import Stream, torch_seed
from fastfair.sim.training.schedule import LocalTrainingConfig, minibatch_schedule

torch = pytest.importorskip("torch")

TINY = dict(dataset="digits", clients=12, per_round=3, rounds=3, eval_every=3, model="mlp",
            hidden=8, epochs=1, batch_size=32, lr=0.05)


def test_the_personal_step_by_hand():
    # v = [1, 2], grad = [0.5, -1], w = [0, 4], lambda = 2, lr = 0.1:
    # v - 0.1 * ([0.5, -1] + 2 * ([1, 2] - [0, 4])) = [1, 2] - 0.1 * [2.5, -5] = [0.75, 2.5]
    out = personal_step(np.array([1.0, 2.0]), np.array([0.5, -1.0]), np.array([0.0, 4.0]),
                        2.0, 0.1)
    np.testing.assert_allclose(out, [0.75, 2.5])
    with pytest.raises(ValueError, match="lam must be finite and >= 0; got -1"):
        DittoOptions(lam=-1)


def _brute_force(sim, ids, t):
    """Round t by the definition, one client at a time with its own autograd loop: the
    global copy by SGD from w^t, the personal model by SGD on F_k + lam/2 ||v - w^t||^2, the
    server's w^{t+1} = w^t - sum_k n_k / n (w^t - f_k) (server SGD at lr 1)."""
    cfg, lam = sim.config, sim.opts.lam
    w = sim.params.clone()
    local = LocalTrainingConfig(epochs=cfg.epochs, steps=cfg.local_steps,
                                batch_size=cfg.batch_size, lr=cfg.client_lr(t))
    globals_, personals, counts = [], [], []
    for k in ids.tolist():
        batch = sim.dataset.client_data(np.array([k]), "train")
        f, v = w.clone(), sim.personal[k].clone()
        for take, valid in minibatch_schedule(batch.counts, local, np.array([k]),
                                              torch_seed(cfg.seed, Stream.ROUND_TRAINING, t)):
            rows = take[0][valid[0]]
            if rows.numel() == 0:
                continue
            x, y = batch.x[rows], batch.y[rows]
            grads = []
            for params in (f, v):
                leaf = params.clone().requires_grad_(True)
                loss = torch.nn.functional.cross_entropy(
                    sim.model.forward(leaf[None], x[None])[0], y)
                grads.append(torch.autograd.grad(loss, leaf)[0])
            f = f - local.lr * grads[0]
            v = v - local.lr * (grads[1] + lam * (v - w))
        globals_.append(f)
        personals.append(v)
        counts.append(float(batch.counts[0]))
    p = torch.tensor(counts) / sum(counts)
    new_w = w - sum(pk * (w - fk) for pk, fk in zip(p, globals_))
    return new_w, torch.stack(personals)


@pytest.mark.parametrize("lam", [0.0, 0.5, 5.0])
def test_a_round_is_algorithm_1_client_by_client(lam):
    sim = DittoSimulation(SimulationConfig(rule="ditto", rule_options={"lam": lam}, **TINY))
    for t in (1, 2):
        ids = sim.sample(t)
        expected_w, expected_v = _brute_force(sim, ids, t)
        sim.finish(t, sim._play(t, ids), 0.0)
        torch.testing.assert_close(sim.params, expected_w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(sim.personal[torch.as_tensor(ids)], expected_v, rtol=1e-5,
                                   atol=1e-6)


def test_the_global_model_is_fedavgs_and_lambda_0_is_local_training():
    ditto = DittoSimulation(SimulationConfig(rule="ditto", rule_options={"lam": 0.0}, **TINY))
    avg = Simulation(SimulationConfig(rule="fedavg", **TINY))
    w0 = ditto.params.clone()
    ids = ditto.sample(1)
    f, v, _ = ditto.client_updates(ids, ditto.dataset.client_data(ids, "train"), 1)
    torch.testing.assert_close(v, f, rtol=0, atol=0)     # both from w^0, no pull: the same
    ditto.finish(1, ditto._play(1, ids), 0.0)
    avg.step()
    for _ in range(2):
        ditto.step()
        avg.step()
    torch.testing.assert_close(ditto.params, avg.params, rtol=1e-5, atol=1e-6)
    never = np.setdiff1d(np.arange(12), np.flatnonzero(
        (ditto.personal != w0).any(1).numpy()))
    assert torch.equal(ditto.personal[torch.as_tensor(never)],
                       w0.reshape(1, -1).repeat(len(never), 1))   # v_k^0 = w^0 until sampled


def test_checkpoints_resume_exactly_and_evaluation_is_personal():
    cfg = SimulationConfig(rule="ditto", rule_options={"lam": 1.0}, **TINY)
    a = DittoSimulation(cfg)
    a.step()
    b = DittoSimulation(cfg)
    b.load_state_dict(a.state_dict())
    ra, rb = a.step(), b.step()
    assert {k: v for k, v in ra.items() if k != "seconds"} == {
        k: v for k, v in rb.items() if k != "seconds"}
    torch.testing.assert_close(a.personal, b.personal, rtol=0, atol=0)
    last = a.step()
    assert 0.0 <= last["acc_mean"] <= 1.0 and 0.0 <= last["acc_global"] <= 1.0
    acc, _, _ = a.evaluate()
    assert acc.shape == (len(a.eval_ids),)


def test_the_command_line_runs_ditto_and_refuses_what_it_does_not_use(tmp_path):
    out = tmp_path / "ditto"
    assert main(["simulate", "--rule", "ditto", "--rule-option", "lam=0.5", "--clients", "12",
                 "--per-round", "3", "--rounds", "2", "--eval-every", "1", "--model", "mlp",
                 "--hidden", "8", "--out", str(out), "--quiet"]) == 0
    history = json.loads((out / "metrics.json").read_text())["ditto"]
    assert len(history) == 2 and "acc_global" in history[-1]
    assert main(["simulate", "--rule", "ditto", "--rule-option", "mu=1", "--out",
                 str(tmp_path / "bad"), "--quiet"]) == 2
    with pytest.raises(ValueError, match=r"does not use fair_over \(--fair-over\)"):
        DittoSimulation(SimulationConfig(rule="ditto", fair_over="groups", **TINY))


@pytest.mark.parametrize("method,rule_options", [("ditto", {"lam": 1.0}), ("superfed-mm", {})])
def test_personalised_methods_refuse_a_model_with_buffers(method, rule_options):
    import torch

    from fastfair.sim import ModuleModel, SuperFedSimulation

    with_norm = ModuleModel(torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.BatchNorm1d(8),
                                                torch.nn.Linear(8, 10)))
    runner = DittoSimulation if method == "ditto" else SuperFedSimulation
    with pytest.raises(ValueError, match=r" models without buffers \(batch norm\)"):
        runner(SimulationConfig(rule=method, rule_options=rule_options, **TINY), model=with_norm)
