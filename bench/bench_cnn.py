"""One FedAvg round of the models users train, every client in the round, one local epoch of SGD
(lr 0.05):

- ``fedavg-cnn``: FedAvg's CNN (McMahan et al. 2017: 5x5 conv 32 + 2x2 max pool, 5x5 conv 64 +
  pool, dense 512, 10 outputs; 1.66M parameters) over a FEMNIST-sized cohort: 100 clients of
  about 200 images 28x28 each;
- ``femnist-cnn``: LEAF's FEMNIST CNN (dense 2048, 62 outputs; 6.6M parameters) on the same
  kind of cohort with 62 classes;
- ``char-lstm``: LEAF's char-LSTM (0.82M parameters) over 10 clients of 10-120 random sequences
  of 80 tokens, a next-token label per position.

Contenders, interleaved (A B A B) under :func:`~fastfair.sim.process.kept_heap` and the same
thread setting (:func:`~fastfair.sim.process.torch_threads`), as ``Experiment.run`` runs:

- ``fastfair round``: ``Simulation.step`` of FedAvg on the cohort as an
  :class:`~fastfair.sim.data.arrays.ArrayDataset` and the module as a
  :class:`~fastfair.sim.models.module.ModuleModel` (every client sampled, so each round trains
  the same cohort from its kept batch): sampling, training, FedAvg's coefficients, the averaging
  kernel and the server step.
- ``torch per-client loop`` (the reference): per client, the module loaded with the global
  weights, ``torch.optim.SGD`` on its minibatches of the same schedule, its update added to the
  sample-weighted average; then the global step. In bf16 its forward passes run under
  ``torch.autocast`` (the plain way; NCHW inputs).
- the floor: one model trained on all the round's samples in batches of 1,024 (one epoch; in
  bf16 under autocast with ``channels_last`` inputs), the arithmetic a round cannot avoid;
- ``one model, batches of B``: the same epoch at the round's batch size B, the least any local
  SGD at that batch size does (a step's gradient and update of every parameter, the weights
  read again per minibatch), with no client's model to load or average.

``--device cuda`` (and the ``cuda`` case) runs all three on the GPU: the cohort's tensors, the
module and the loop's minibatch indices live there before the clock starts, and every contender
ends with a device synchronisation, so a round's time is its device time.

pfl-research is not a contender here: its environment (``bench/pfl_round.py``) is not installed
on the machines these figures come from.

Run: ``OMP_NUM_THREADS=1 python -m pytest bench/bench_cnn.py -q -s`` (FedAvg's CNN at batch 10
and 32, 1 and 2 threads, fp32 and bf16 where the CPU has bf16 kernels; the other two networks at
batch 10 and 32, one thread, fp32), or one case at a chosen cohort size:
``python -m bench.bench_cnn --clients 30 --batch 32 --threads 1 --precision bf16 --repeat 3``
(``--network femnist-cnn`` or ``char-lstm`` for the others)
(add ``--device cuda`` for the GPU). Peak memory, one contender per process:
``python -m bench.bench_cnn --clients 30 --batch 32 --repeat 2 --peak-memory fastfair`` (or
``loop``, ``floor``; with ``--device cuda`` also the peak device memory).
"""

from __future__ import annotations

import argparse
import statistics
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch

from bench.conftest import (
    char_lstm,
    femnist_cnn,
    femnist_sized_cohort,
    interleaved,
    mean_cross_entropy,
    shakespeare_like_cohort,
    sizes,
)
from fastfair.sim import ArrayDataset, ModuleModel, Simulation, SimulationConfig
from fastfair.sim.models.zoo import two_conv_cnn
from fastfair.sim.process import kept_heap, torch_threads
from fastfair.sim.training.schedule import LocalTrainingConfig, minibatch_schedule

CLIENTS = sizes(100, 3)
REPEATS = sizes(2, 1)
LR = 0.05


def fedavg_cnn() -> torch.nn.Module:
    """FedAvg's CNN for 28x28 grey images and 10 classes."""
    return two_conv_cnn((1, 28, 28), 10, 512, "fedavg-cnn")




#: network -> (module builder, cohort of n clients, classes)
NETWORKS: Dict[str, tuple] = {
    "fedavg-cnn": (fedavg_cnn, lambda n: femnist_sized_cohort(n, 10), 10),
    "femnist-cnn": (femnist_cnn, lambda n: femnist_sized_cohort(n, 62), 62),
    "char-lstm": (char_lstm, lambda n: shakespeare_like_cohort(n, sizes(120, 4), sizes(80, 8)),
                  80),
}


def _synchronised(fn: Callable[[], object], device: str) -> Callable[[], None]:
    """``fn`` followed by a wait for the device's queued work (nothing to wait for on a CPU)."""
    def run() -> None:
        fn()
        if device != "cpu":
            torch.cuda.synchronize(device)
    return run


def fastfair_round(data: SimpleNamespace, batch_size: int, precision: str,
                   device: str = "cpu", network: str = "fedavg-cnn") -> Callable[[], None]:
    """A FedAvg simulation of the cohort on ``device``; returns its ``step`` (one round), warmed
    up."""
    k = len(data.counts)
    arrays = [(data.x[data.offsets[i]:data.offsets[i + 1]].numpy(),
               data.y[data.offsets[i]:data.offsets[i + 1]].numpy()) for i in range(k)]
    build, _, classes = NETWORKS[network]
    tokens = not data.x.is_floating_point()
    dataset = ArrayDataset(arrays, test=arrays, num_classes=classes,
                           vocab_size=80 if tokens else None)
    config = SimulationConfig(clients=k, per_round=k, rounds=10 ** 6, eval_every=10 ** 6,
                              eval_clients=1, lr=LR, batch_size=batch_size, precision=precision,
                              device=device)
    sim = Simulation(config, dataset=dataset, model=ModuleModel(build()))
    step = _synchronised(sim.step, device)
    step()
    return step


def loop_round(data: SimpleNamespace, batch_size: int, precision: str,
               device: str = "cpu", network: str = "fedavg-cnn") -> Callable[[], None]:
    """The plain per-client PyTorch loop of a FedAvg round (see the module's docstring)."""
    module = NETWORKS[network][0]().to(device)
    theta = torch.nn.utils.parameters_to_vector(module.parameters()).detach()
    config = LocalTrainingConfig(epochs=1, batch_size=batch_size, lr=LR)
    ids = np.arange(len(data.counts))
    steps = list(minibatch_schedule(data.counts, config, ids, seed=1))
    batches = [[take[k][valid[k]].to(device) for take, valid in steps if valid[k].any()]
               for k in ids]
    weights = data.counts / data.counts.sum()
    x, y = data.x.to(device), data.y.to(device)
    autocast = torch.device(device).type

    def play() -> None:
        direction = torch.zeros_like(theta)
        for k in ids:
            torch.nn.utils.vector_to_parameters(theta, module.parameters())
            opt = torch.optim.SGD(module.parameters(), lr=LR)
            for rows in batches[k]:
                opt.zero_grad()
                with torch.autocast(autocast, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    out = module(x[rows])
                mean_cross_entropy(out.float(), y[rows]).backward()
                opt.step()
            trained = torch.nn.utils.parameters_to_vector(module.parameters()).detach()
            direction.add_(theta - trained, alpha=float(weights[k]))
        theta.sub_(direction)

    return _synchronised(play, device)


def floor_round(data: SimpleNamespace, precision: str, device: str = "cpu",
                network: str = "fedavg-cnn", batch_size: int = 1024) -> Callable[[], None]:
    """One epoch of one model over all the cohort's samples in batches of ``batch_size``."""
    module = NETWORKS[network][0]().to(device)
    opt = torch.optim.SGD(module.parameters(), lr=LR)
    low = precision == "bf16"
    x, y = data.x.to(device), data.y.to(device)
    autocast = torch.device(device).type

    def play() -> None:
        for start in range(0, x.shape[0], batch_size):
            xb = x[start:start + batch_size]
            if low and xb.dim() == 4:
                xb = xb.contiguous(memory_format=torch.channels_last)
            opt.zero_grad()
            with torch.autocast(autocast, dtype=torch.bfloat16, enabled=low):
                out = module(xb)
            mean_cross_entropy(out.float(), y[start:start + batch_size]).backward()
            opt.step()

    return _synchronised(play, device)


def round_times(clients: int, batch_size: int, threads: int, precision: str,
                repeat: int, device: str = "cpu", network: str = "fedavg-cnn"
                ) -> Dict[str, List[float]]:
    """``{contender: [seconds of each round]}`` of ``network`` on ``device``, interleaved,
    ``repeat`` rounds each."""
    data = NETWORKS[network][1](clients)
    with kept_heap(), torch_threads(threads):
        runs = {"fastfair round": fastfair_round(data, batch_size, precision, device, network),
                "torch per-client loop": loop_round(data, batch_size, precision, device,
                                                    network),
                f"one model, batches of {batch_size}": floor_round(data, precision, device,
                                                                   network, batch_size),
                "floor": floor_round(data, precision, device, network)}
        return interleaved(runs, repeat)


def _line(case: str, times: Dict[str, List[float]]) -> str:
    loop = times["torch per-client loop"]
    floor = min(times["floor"])
    parts = [f"{name} min {min(t):.2f} s median {statistics.median(t):.2f} s"
             + ("" if name == "floor" else f" ({min(t) / min(loop):.2f}x loop, "
                f"{min(t) / floor:.2f}x floor)") for name, t in times.items()]
    return f"{case}: " + " | ".join(parts)


PRECISIONS = ["fp32"] + (["bf16"] if torch.ops.mkldnn._is_mkldnn_bf16_supported() else [])


NAMES = {"fedavg-cnn": "FedAvg CNN", "femnist-cnn": "LEAF FEMNIST CNN", "char-lstm": "char-LSTM"}


def _case(clients: int, batch_size: int, threads: int, precision: str,
          device: str = "cpu", network: str = "fedavg-cnn") -> str:
    where = f"{threads} thread(s)" if device == "cpu" else device
    return (f"{NAMES[network]} round, {clients} clients, batch {batch_size}, {where}, "
            f"{precision}")


def test_fedavg_cnn_round(floor_report):
    for precision in PRECISIONS:
        for threads in (1, 2):
            for batch_size in (10, 32):
                case = _case(CLIENTS, batch_size, threads, precision)
                times = round_times(CLIENTS, batch_size, threads, precision, REPEATS)
                floor = min(times.pop("floor"))
                for name, seconds in times.items():
                    floor_report.add(case, name, min(seconds), floor_seconds=floor,
                                     reference=name.startswith("torch"))
                print("\n" + _line(case, {**times, "floor": [floor]}))
    if not PRECISIONS[1:]:
        pytest.skip("bf16: this CPU has no bf16 kernels")


@pytest.mark.parametrize("network", ["femnist-cnn", "char-lstm"])
def test_leaf_model_round(floor_report, network):
    """LEAF's FEMNIST CNN (100 clients) and char-LSTM (10), batch 10 and 32, one thread, fp32."""
    clients = CLIENTS if network == "femnist-cnn" else sizes(10, 2)
    for batch_size in (10, 32):
        case = _case(clients, batch_size, 1, "fp32", network=network)
        times = round_times(clients, batch_size, 1, "fp32", REPEATS, network=network)
        floor = min(times.pop("floor"))
        for name, seconds in times.items():
            floor_report.add(case, name, min(seconds), floor_seconds=floor,
                             reference=name.startswith("torch"))
        print("\n" + _line(case, {**times, "floor": [floor]}))


def test_fedavg_cnn_round_cuda(cuda_floor_report):
    """The same round on the GPU, fp32 and bf16, batch 10 and 32 (one host thread)."""
    for precision in ("fp32", "bf16"):
        for batch_size in (10, 32):
            case = _case(CLIENTS, batch_size, 1, precision, "cuda")
            times = round_times(CLIENTS, batch_size, 1, precision, REPEATS + 1, "cuda")
            floor = min(times.pop("floor"))
            for name, seconds in times.items():
                cuda_floor_report.add(case, name, min(seconds), floor_seconds=floor,
                                      reference=name.startswith("torch"))
            print("\n" + _line(case, {**times, "floor": [floor]}))


def peak_memory(args: argparse.Namespace) -> Tuple[float, Optional[float]]:
    """MB of the process's peak resident set after ``args.repeat`` rounds of one contender (the
    cohort's data made first, as in :func:`round_times`), and on a GPU the MB of device memory
    torch's allocator held at its peak (None on the CPU)."""
    import resource

    data = NETWORKS[args.network][1](args.clients)
    make = {"fastfair": lambda: fastfair_round(data, args.batch, args.precision, args.device,
                                               args.network),
            "loop": lambda: loop_round(data, args.batch, args.precision, args.device,
                                       args.network),
            "floor": lambda: floor_round(data, args.precision, args.device,
                                         args.network)}[args.peak_memory]
    with kept_heap(), torch_threads(args.threads):
        play = make()
        for _ in range(args.repeat):
            play()
    device = torch.device(args.device)
    on_device = (torch.cuda.max_memory_allocated(device) / 2 ** 20 if device.type == "cuda"
                 else None)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, on_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--network", default="fedavg-cnn", choices=list(NETWORKS))
    parser.add_argument("--peak-memory", choices=("fastfair", "loop", "floor"),
                        help="run this contender alone for --repeat rounds and print the "
                             "process's peak resident memory (one contender per process)")
    args = parser.parse_args()
    if args.peak_memory:
        host, device = peak_memory(args)
        print(f"{args.peak_memory}: peak resident memory {host:.0f} MB"
              + ("" if device is None else f", peak device memory {device:.0f} MB"))
        return
    times = round_times(args.clients, args.batch, args.threads, args.precision, args.repeat,
                        args.device, args.network)
    print(_line(_case(args.clients, args.batch, args.threads, args.precision, args.device,
                      args.network), times))


if __name__ == "__main__":
    main()
