"""A fresh cohort's data against the training it feeds: Synthetic(1, 1), 1000 clients of 10^6.

Every call draws 1000 ids the process has not seen (a cross-device round meets new clients), and
the contenders run interleaved (A B A B), one thread:

- ``client_data``: ``SyntheticDataset.client_data(ids)``, the cohort's training split as the
  simulator makes it each round (keyed normals for the models and the samples, the latter into
  the memory of the previous cohort, then the feature transform and labelling of
  :func:`fastfair.ops.label_segments`);
- its parts: the samples' keyed float32 normals (``normal_segments``, into memory already
  mapped) and ``label_segments`` alone;
- ``training kernel``: :func:`fastfair.ops.softmax_regression_sgd` on that cohort (one local
  epoch of batch 32, as the simulator's default round), with and without the received model's
  loss (AAggFF-D's rounds need it), the reference: data generation should take no longer.

Run: ``OMP_NUM_THREADS=1 python -m pytest bench/bench_synthetic_cohort.py -q -s``.
"""

from __future__ import annotations

import statistics

import numpy as np

from bench.conftest import interleaved, sizes

POPULATION, COHORT, REPEAT = 10**6, sizes(1000, 50), sizes(15, 2)


def test_fresh_cohort_against_training(floor_report):
    import torch

    from fastfair import ops
    from fastfair.sim.data.base import PrefixSplit
    from fastfair.sim.data.synthetic import SyntheticDataset, normals
    from fastfair.sim.process import torch_threads
    from fastfair.sim.seeding import Stream, keys, shuffle_client_keys

    ds = SyntheticDataset(POPULATION, seed=0)
    F, C = ds.num_features, ds.num_classes
    fresh = np.random.default_rng(0).permutation(POPULATION)
    state = {"next": 0}

    def new_ids():
        first = state["next"]
        state["next"] = (first + COHORT) % (POPULATION - COHORT)
        return np.sort(fresh[first:first + COHORT])

    batch = ds.client_data(new_ids())
    offsets = torch.from_numpy(batch.offsets.astype(np.int64))
    steps = torch.from_numpy(-(-batch.counts.astype(np.int64) // 32))
    clients = torch.arange(COHORT)
    shuffle = shuffle_client_keys(0, np.arange(COHORT), None)
    start = torch.zeros(COHORT, F * C + C)

    def train(received_loss):
        def run():
            loss = torch.empty(COHORT, dtype=torch.float64) if received_loss else None
            ops.softmax_regression_sgd(batch.x, batch.y, offsets, shuffle, clients, steps,
                                       start.clone(), batch_size=32, lr=0.1,
                                       received_loss=loss)
        return run

    samples = torch.empty(2 * batch.x.numel())  # mapped memory, as client_data's HostBuffer

    def sample_normals():
        ids = new_ids()
        starts = PrefixSplit(ds.total_samples(ids), "train").starts
        normals(keys(0, Stream.SYNTHETIC_SAMPLES, ids), starts * F, torch.device("cpu"),
                out=samples[:int(starts[-1]) * F])

    W, b, v = ds._model(batch_ids := new_ids(), torch.device("cpu"))
    rows = PrefixSplit(ds.total_samples(batch_ids), "train")
    x = normals(keys(0, Stream.SYNTHETIC_SAMPLES, batch_ids), rows.starts * F,
                torch.device("cpu")).reshape(-1, F)
    starts = torch.from_numpy(rows.starts)
    std = ds._feature_std

    def label():
        ops.label_segments(x, starts, W, b, scale=std, shift=v)

    contenders = {"client_data": lambda: ds.client_data(new_ids()),
                  "keyed normals of the samples": sample_normals,
                  "label_segments (transform + labels)": label,
                  "training kernel": train(False),
                  "training kernel + received loss": train(True)}
    with torch_threads(1):
        for fn in contenders.values():
            fn()
        times = interleaved(contenders, REPEAT)
    case = f"Synthetic fresh cohort {COHORT} of {POPULATION:.0e}, {batch.x.shape[0]} rows"
    reference = min(times["training kernel"])
    for name, t in times.items():
        print(f"{case}: {name}: min {min(t) * 1e3:.1f} ms, median "
              f"{statistics.median(t) * 1e3:.1f} ms")
        floor_report.add(case, f"fastfair {name}", min(t), floor_seconds=reference,
                         reference=name == "training kernel")
