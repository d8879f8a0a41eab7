"""The simulator's device-generic path, checked on the CPU (CUDA cases skip without a GPU):
device hashing equals the host's, training costs the clients' real steps, threads are chosen,
and several "nodes" under torchrun match one process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

import fastfair
from fastfair.sim import Experiment, Simulation, SimulationConfig, SyntheticDataset
from fastfair.sim.models.flat import MLP, LogisticRegression
from fastfair.sim.seeding import splitmix64, splitmix64_torch
from fastfair.sim.training.local import train_clients
from fastfair.sim.training.schedule import LocalTrainingConfig, local_steps
from tests.helpers import ROOT
from tests.helpers.runs import assert_runs_match

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_device_hash_is_the_host_hash():
    x = np.random.default_rng(0).integers(0, 2 ** 64, 10_000, dtype=np.uint64)
    x[:3] = [0, 2 ** 63, 2 ** 64 - 1]
    on_torch = splitmix64_torch(torch.from_numpy(x.view(np.int64))).numpy().view(np.uint64)
    np.testing.assert_array_equal(on_torch, splitmix64(x))


def _cohort(ids):
    data = SyntheticDataset(200, seed=3)
    return data.client_data(np.asarray(ids), "train"), data.num_features, data.num_classes


def test_a_client_trains_the_same_in_any_cohort():
    # Compaction trains the clients still stepping as a prefix: a client's update must not
    # depend on which other clients (with more or fewer steps) share its round.
    local = LocalTrainingConfig(epochs=2, batch_size=16, lr=0.1)
    alone, F, C = _cohort([7])
    crowd, _, _ = _cohort([3, 7, 150, 42])
    model = LogisticRegression(F, C)
    start = torch.randn(model.num_params, generator=torch.Generator().manual_seed(0))
    u_alone, _ = train_clients(model, start, alone, local, np.array([7]), 11)
    u_crowd, _ = train_clients(model, start, crowd, local, np.array([3, 7, 150, 42]), 11)
    torch.testing.assert_close(u_crowd[1], u_alone[0], rtol=1e-6, atol=1e-7)


def test_training_arithmetic_follows_real_samples():
    """Autograd training (an MLP: logistic regression goes to the kernel, which never pads)
    feeds each step only the clients still training, not every client padded to the longest."""
    batch, F, C = _cohort(np.arange(100))
    local = LocalTrainingConfig(epochs=1, batch_size=32, lr=0.1)
    model = MLP(F, C, 8)
    rows = []
    forward = model.forward_pieces
    model.forward_pieces = lambda p, x, *step: (rows.append(x.shape[0] * x.shape[1])
                                                or forward(p, x, *step))
    train_clients(model, model.init(torch.Generator().manual_seed(0)), batch, local,
                  np.arange(100), 5)
    real = int(batch.counts.sum())           # one epoch: every real sample once
    padded = int(local_steps(batch.counts, local).max()) * 32 * 100
    assert real <= sum(rows) <= 1.25 * real < padded, (sum(rows), real, padded)


def test_threads_are_chosen_and_restored():
    before = torch.get_num_threads(), fastfair.get_num_threads()
    seen = []
    config = SimulationConfig(clients=20, per_round=4, rounds=1, eval_every=1)
    exp = Experiment(config, threads=1)
    run = exp._run
    exp._run = lambda: seen.append((torch.get_num_threads(), fastfair.get_num_threads())) or run()
    exp.run()
    assert seen == [(1, 1)]
    assert (torch.get_num_threads(), fastfair.get_num_threads()) == before
    with pytest.raises(ValueError, match=r"threads \(--threads\) must be an integer in "):
        Experiment(config, threads=0)


def test_device_is_checked():
    with pytest.raises(ValueError, match=r"device \(--device\) must be 'cpu', 'cuda' or 'cuda:N'"):
        SimulationConfig(device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA GPU"):
            Simulation(SimulationConfig(device="cuda"))


@needs_cuda
def test_cuda_run_matches_the_cpu_run():
    # train_loss: FedAvg's rounds compute it only when asked (the CPU's kernel reports it).
    config = dict(clients=60, per_round=6, rounds=4, eval_every=2, train_loss=True)
    cpu = Simulation(SimulationConfig(**config))
    gpu = Simulation(SimulationConfig(**config, device="cuda"))
    for _ in range(4):
        a, b = cpu.step(), gpu.step()
        assert a["participants"] == b["participants"]
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4, abs=1e-6)
    torch.testing.assert_close(gpu.params.cpu(), cpu.params, rtol=1e-4, atol=1e-5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_localhost_match_one_process(tmp_path):
    args = ["--compare", "fedavg,qfedavg", "--rounds", "4", "--clients", "60", "--per-round",
            "6", "--eval-every", "2", "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    single = subprocess.run([sys.executable, "-m", "fastfair", "simulate", *args, "--out",
                             str(tmp_path / "one")], cwd=ROOT, env=env, capture_output=True,
                            timeout=300)
    assert single.returncode == 0, single.stderr.decode()[-2000:]
    port = _free_port()
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--node-rank", str(rank), "--rdzv-backend", "c10d", "--rdzv-id", "fastfair-test",
         "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "fastfair", "simulate", *args, "--out",
         str(tmp_path / "two")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE) for rank in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=300)
        assert node.returncode == 0, err.decode()[-2000:]
    assert_runs_match(tmp_path / "one", tmp_path / "two")
