"""Local training of a FEMNIST cohort (LEAF's CNN, and FedAvg's 2NN for a small model) and of a
Shakespeare-like cohort (LEAF's char-LSTM), batched across the cohort against a per-client loop
of the same module, and opening / sampling a FEMNIST-sized LEAF data set.

Run: ``OMP_NUM_THREADS=1 python -m pytest bench/bench_models.py -q -s`` (``-k train`` or
``-k leaf``; the full sizes take about 15 minutes and 5 GB of disk in the temporary folder).

- ``train``: 100 clients with FEMNIST's train sizes (about 200 samples each), 1 epoch, batch 10
  or 32, one cohort step from the same global model, for each network. ``fastfair batched``:
  ``train_clients`` on a :class:`~fastfair.sim.models.module.ModuleModel` with its default
  ``cohort="auto"``: the CNN (6.6M parameters) trains each client's copy alone as the plain
  module (``channels_last``), the 2NN (0.2M) its copies together in ``vmap`` programs. The
  char-LSTM (0.82M parameters, a label per position) trains on 10 clients of 10-120 random
  sequences of 80 tokens (a vocabulary of 80), each copy alone.
  ``torch per-client loop`` (the reference): each client in turn, the module loaded with the
  global weights, ``torch.optim.SGD`` on the same minibatches. The two run
  interleaved (A B A B) under :func:`~fastfair.sim.process.kept_heap`, as ``Experiment.run``
  trains; min and median are printed. The floor is a compute floor: one epoch of
  one model over all the cohort's samples in batches of 1,024, the arithmetic the cohort cannot
  avoid.
- ``leaf``: 3,500 writers in 36 train and 36 test files of LEAF's format and size (pixels as
  ``value / 255`` text, about 5 GB). Opening reads the headers; a cohort of 10 clients is then
  read cold (by a data set just opened: entries located and parsed) and again warm (kept in
  memory), five times. The floors are the bytes read from the files, and the bytes of the batch,
  at the copy bandwidth.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time

import numpy as np
import pytest
import torch

from bench.conftest import (
    best_time,
    char_lstm,
    femnist_cnn,
    femnist_sized_cohort,
    interleaved,
    mean_cross_entropy,
    shakespeare_like_cohort,
    sizes,
)
from fastfair.sim.data.leaf import LeafDataset
from fastfair.sim.data.leaf_json import LeafFile
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.models.zoo import Dense
from fastfair.sim.process import kept_heap
from fastfair.sim.training.local import train_clients
from fastfair.sim.training.schedule import LocalTrainingConfig, minibatch_schedule

CLIENTS = sizes(100, 3)
USERS = sizes(3500, 30)
REPEATS = sizes(2, 1)



def _two_layer_mlp():
    """FedAvg's 2NN (two 200-unit ReLU layers), 0.2M parameters against the CNN's 6.6M."""
    return torch.nn.Sequential(torch.nn.Flatten(), Dense(784, 200), torch.nn.ReLU(),
                               Dense(200, 200), torch.nn.ReLU(), Dense(200, 62))



NETWORKS = {"femnist-cnn": femnist_cnn, "2nn": _two_layer_mlp, "char-lstm": char_lstm}
LSTM_CLIENTS = sizes(10, 2)


@pytest.fixture(scope="module")
def cohorts():
    return {"images": femnist_sized_cohort(CLIENTS, 62),  # FEMNIST's 62 classes
            "tokens": shakespeare_like_cohort(LSTM_CLIENTS, sizes(120, 4), sizes(80, 8))}


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
            mean_cross_entropy(module(batch.x[rows]), batch.y[rows]).backward()
            opt.step()


def _dense_epoch(module, batch, lr):
    """The compute floor: one model, one epoch over every sample of the cohort, batches of
    1,024."""
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    for start in range(0, batch.x.shape[0], 1024):
        opt.zero_grad()
        mean_cross_entropy(module(batch.x[start:start + 1024]),
                           batch.y[start:start + 1024]).backward()
        opt.step()


@pytest.mark.parametrize("batch_size", [10, 32])
@pytest.mark.parametrize("network", list(NETWORKS))
def test_train_batched_vs_loop(floor_report, cohorts, network, batch_size):
    cohort = cohorts["tokens" if network == "char-lstm" else "images"]
    clients = len(cohort.counts)
    torch.manual_seed(0)
    module = NETWORKS[network]()
    model = ModuleModel(module, init="given")  # every contender starts from these weights
    theta = model.init(None)
    config = LocalTrainingConfig(epochs=1, batch_size=batch_size, lr=0.05)
    ids = np.arange(clients)
    runs = {"fastfair batched": lambda: train_clients(model, theta, cohort, config, ids, seed=1),
            "torch per-client loop": lambda: _loop(module, theta, cohort, config, ids, seed=1)}
    with kept_heap():  # as Experiment.run trains: freed memory is reused, for both contenders
        times = interleaved(runs, REPEATS)
    floor = best_time(lambda: _dense_epoch(NETWORKS[network](), cohort, 0.05), repeat=1,
                      warmup=0)
    data = "Shakespeare-like" if network == "char-lstm" else "FEMNIST"
    case = f"{network} {data} {clients} clients batch {batch_size}"
    for name, seconds in times.items():
        floor_report.add(case, name, min(seconds), floor_seconds=floor,
                         reference=name.startswith("torch"))
    line = " | ".join(f"{name} min {min(t):.1f} s median {statistics.median(t):.1f} s"
                      for name, t in times.items())
    print(f"\n{case}, {int(cohort.counts.sum())} samples, 1 epoch, {torch.get_num_threads()} "
          f"thread(s): {line} | floor {floor:.1f} s")


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


def test_leaf_open_and_sample(floor_report, femnist_sized, monkeypatch):
    files = sorted(femnist_sized.rglob("*.json"))
    total = sum(p.stat().st_size for p in files)
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
    headers = len(files) * (1 << 16)               # what opening reads of each file at most
    rng = np.random.default_rng(2)
    cold, warm, sizes_read, batch_bytes = [], [], [], []
    for _ in range(5):
        ids = np.sort(rng.choice(data.num_clients, min(10, data.num_clients), replace=False))
        data = LeafDataset("femnist", str(femnist_sized))
        before = read[0]
        for times in (cold, warm):
            start = time.perf_counter()
            batch = data.client_data(ids)
            times.append(time.perf_counter() - start)
        sizes_read.append(read[0] - before)
        batch_bytes.append(batch.x.numel() * 4)
    case = f"LEAF FEMNIST-sized, {data.num_clients} users"
    floor_report.add(f"{case}: open", "fastfair LeafDataset", min(opens), headers)
    floor_report.add(f"{case}: cohort of 10, cold", "fastfair client_data", min(cold),
                     int(np.median(sizes_read)))
    floor_report.add(f"{case}: cohort of 10, warm", "fastfair client_data", min(warm),
                     int(np.median(batch_bytes)))
    print(f"\n{case}, {total / 1e9:.2f} GB of JSON in {len(files)} files | open min "
          f"{min(opens):.2f} s median {statistics.median(opens):.2f} s | cohort of 10: cold min "
          f"{min(cold) * 1e3:.0f} ms median {statistics.median(cold) * 1e3:.0f} ms, warm min "
          f"{min(warm) * 1e3:.1f} ms median {statistics.median(warm) * 1e3:.1f} ms | read "
          f"{read[0] / 1e6:.0f} MB of {total / 1e6:.0f} MB")
    assert data.num_clients == USERS
