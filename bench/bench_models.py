"""Local training of a FEMNIST cohort (LEAF's CNN, and FedAvg's 2NN for a small model), batched
across the cohort against a per-client loop of the same module, and opening / sampling a
FEMNIST-sized LEAF data set.

Run: ``OMP_NUM_THREADS=1 python -m pytest bench/bench_models.py -q -s`` (``-k train`` or
``-k leaf``; ``FASTFAIR_BENCH_CLIENTS`` / ``FASTFAIR_BENCH_USERS`` shrink the cases).

- ``train``: 100 clients with FEMNIST's train sizes (about 200 samples each), 1 epoch, batch 10
  or 32, one cohort step from the same global model, for each network. ``batched``:
  ``train_clients`` on a :class:`~fastfair.sim.models.ModuleModel` (one ``vmap`` program for
  the cohort). ``loop``: each client in turn, the module loaded with the global weights,
  ``torch.optim.SGD`` on the same minibatches. The two run interleaved (A B A B); min and
  median are printed.
- ``leaf``: 3,500 writers in 36 train and 36 test files of LEAF's format and size (pixels as
  ``value / 255`` text, about 5 GB). Opening reads the headers; a cohort of 10 clients is then
  read cold (entries located and parsed) and again warm (kept in memory); the bytes read are
  counted.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fastfair.sim.datasets.leaf import LeafDataset
from fastfair.sim.datasets.leaf_json import LeafFile
from fastfair.sim.models import ModuleModel
from fastfair.sim.training import LocalTrainingConfig, minibatch_schedule, train_clients
from fastfair.sim.zoo import BUILDERS, Dense

CLIENTS = int(os.environ.get("FASTFAIR_BENCH_CLIENTS", "100"))
USERS = int(os.environ.get("FASTFAIR_BENCH_USERS", "3500"))


def _femnist_cnn():
    return BUILDERS["femnist-cnn"][0](SimpleNamespace(sample_shape=(1, 28, 28), num_classes=62))


def _two_layer_mlp():
    """FedAvg's 2NN (two 200-unit ReLU layers), 0.2M parameters against the CNN's 6.6M."""
    return torch.nn.Sequential(torch.nn.Flatten(), Dense(784, 200), torch.nn.ReLU(),
                               Dense(200, 200), torch.nn.ReLU(), Dense(200, 62))


NETWORKS = {"femnist-cnn": _femnist_cnn, "2nn": _two_layer_mlp}


@pytest.fixture(scope="module")
def cohort():
    rng = np.random.default_rng(0)
    counts = np.clip(rng.normal(204, 80, CLIENTS).round(), 20, 450).astype(np.int64)
    n = int(counts.sum())
    x = torch.from_numpy((rng.random((n, 1, 28, 28)) < 0.2).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 62, n))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return SimpleNamespace(x=x, y=y, offsets=offsets, counts=counts)


def _loop(module, theta, batch, config, ids, seed):
    """The per-client loop: each client from the global weights, SGD on its own minibatches."""
    steps = list(minibatch_schedule(batch.counts, config, ids, seed))
    for k in range(len(ids)):
        torch.nn.utils.vector_to_parameters(theta, module.parameters())
        opt = torch.optim.SGD(module.parameters(), lr=config.lr)
        for take, valid in steps:
            if not valid[k].any():
                continue
            rows = take[k][valid[k]]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(module(batch.x[rows]), batch.y[rows]).backward()
            opt.step()


@pytest.mark.parametrize("batch_size", [10, 32])
@pytest.mark.parametrize("network", list(NETWORKS))
def test_train_batched_vs_loop(cohort, network, batch_size):
    torch.manual_seed(0)
    module = NETWORKS[network]()
    model = ModuleModel(module)
    theta = model.init(None)
    config = LocalTrainingConfig(epochs=1, batch_size=batch_size, lr=0.05)
    ids = np.arange(CLIENTS)
    runs = {"batched": lambda: train_clients(model, theta, cohort, config, ids, seed=1),
            "loop": lambda: _loop(module, theta, cohort, config, ids, seed=1)}
    times = {name: [] for name in runs}
    for _ in range(2):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    line = " | ".join(f"{name} min {min(t):.1f} s median {statistics.median(t):.1f} s"
                      for name, t in times.items())
    print(f"\n{network} on FEMNIST, {CLIENTS} clients, {int(cohort.counts.sum())} samples, "
          f"1 epoch, batch {batch_size}, {torch.get_num_threads()} thread(s): {line} | "
          f"loop / batched {min(times['loop']) / min(times['batched']):.2f}x")


def _pixel_pool(rng, size=512):
    """JSON texts of images as LEAF writes them: ``[1.0, 0.5254901960784314, ...]``."""
    pool = []
    for _ in range(size):
        ink = rng.random(784) < 0.22
        pixels = np.where(ink, rng.integers(0, 255, 784), 255)
        pool.append(json.dumps((pixels / 255).tolist()))
    return pool


def _write_femnist_sized(root, rng):
    pool = _pixel_pool(rng)
    counts = np.clip(rng.normal(226, 88, USERS).round(), 12, 600).astype(np.int64)
    names = [f"f{k:04d}_{k % 100:02d}" for k in range(USERS)]
    for split in ("train", "test"):
        (root / split).mkdir(parents=True)
    for f, start in enumerate(range(0, USERS, 100)):
        users = names[start:start + 100]
        for split in ("train", "test"):
            n = [int(c * 0.9) if split == "train" else int(c) - int(c * 0.9)
                 for c in counts[start:start + 100]]
            with open(root / split / f"all_data_{f}_niid_0_keep_0_{split}_9.json", "w") as out:
                out.write('{"users": ' + json.dumps(users) + ', "num_samples": '
                          + json.dumps(n) + ', "user_data": {')
                for j, (u, size) in enumerate(zip(users, n)):
                    x = ", ".join(pool[i] for i in rng.integers(0, len(pool), size))
                    y = json.dumps(rng.integers(0, 62, size).tolist())
                    out.write(("" if j == 0 else ", ") + json.dumps(u) + ': {"x": [' + x
                              + '], "y": ' + y + "}")
                out.write("}}")


@pytest.fixture(scope="module")
def femnist_sized(tmp_path_factory):
    root = tmp_path_factory.mktemp("femnist_sized")
    _write_femnist_sized(root, np.random.default_rng(1))
    yield root
    shutil.rmtree(root)


def test_leaf_open_and_sample(femnist_sized, monkeypatch):
    total = sum(p.stat().st_size for p in femnist_sized.rglob("*.json"))
    read = [0]
    original = LeafFile._read

    def counted(self, start, stop):
        read[0] += stop - start
        return original(self, start, stop)

    monkeypatch.setattr(LeafFile, "_read", counted)
    opens = []
    for _ in range(3):
        start = time.perf_counter()
        data = LeafDataset("femnist", str(femnist_sized))
        opens.append(time.perf_counter() - start)
    rng = np.random.default_rng(2)
    cold, warm, sizes = [], [], []
    for _ in range(5):
        ids = np.sort(rng.choice(data.num_clients, 10, replace=False))
        for times in (cold, warm):
            start = time.perf_counter()
            batch = data.client_data(ids)
            times.append(time.perf_counter() - start)
        sizes.append(int(batch.counts.sum()))
    print(f"\nLEAF FEMNIST-sized: {data.num_clients} clients, {total / 1e9:.2f} GB of JSON in 72 "
          f"files | open min {min(opens):.2f} s median {statistics.median(opens):.2f} s | "
          f"cohort of 10 (~{int(np.mean(sizes))} samples): cold min {min(cold) * 1e3:.0f} ms "
          f"median {statistics.median(cold) * 1e3:.0f} ms, warm min {min(warm) * 1e3:.1f} ms "
          f"median {statistics.median(warm) * 1e3:.1f} ms | read {read[0] / 1e6:.0f} MB of "
          f"{total / 1e6:.0f} MB")
    assert data.num_clients == USERS
