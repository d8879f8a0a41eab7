"""A 1000-client simulator round beside pfl-research's (Apple's ``pfl``) on the same job: FedAvg,
multinomial logistic regression (60 features -> 10 classes, zero initial model) on the training
data of the 1000 Synthetic(1, 1) clients of ``bench_sim.simulator(1000)``, one local epoch of SGD
(lr 0.1, batch 32) per client, every client in the cohort, central lr 1, no DP, one thread.

pfl lives in an environment of its own, ``PFL_ENV`` (``pip install "pfl[pytorch]==0.6.0"`` beside
the same torch; its half imports nothing from fastfair), so the comparison is two commands, run
from the repository root and alternated (fastfair, pfl, fastfair, pfl, ...) so that a shared
machine's slow minutes fall on both::

    OMP_NUM_THREADS=1 python -m bench.pfl_round fastfair --export /tmp/pfl_round.npz
    OMP_NUM_THREADS=1 PFL_ENV/bin/python -m bench.pfl_round pfl /tmp/pfl_round.npz

The first (fastfair's environment) writes the clients' training arrays (``x``, ``y`` and the
clients' row ``offsets``) and times, interleaved, ``Simulation.step`` of fastfair's FedAvg, of
``bench_sim``'s AAggFF-D simulator, and ``bench_sim``'s plain PyTorch per-client loop (AAggFF-D),
under ``kept_heap`` as ``bench_sim`` runs them. The second runs pfl's own simulation:
``FederatedDataset.from_slices`` of the per-client tensors (a ``minimize_reuse`` sampler, so a
cohort of 1000 is every client once), ``FederatedAveraging`` weighted by data points,
``PyTorchModel`` and ``SimulatedBackend``, and times each central iteration with a callback.
Both print one JSON line per contender (pfl's own per-round metrics print too; the JSON lines
start with ``{``): the seconds of each round after one warm-up round, their min and median, and
for both FedAvgs ``loss_after_rounds``, the global model's loss after 0, 1, ... rounds (per
client on its training data, averaged over the clients, as fastfair's ``train_loss``). The pfl
half stops with an error unless that loss went down, and checks each round with pfl's own
counts: 1000 users trained, on all their samples, with ceil(n_k / 32) SGD steps each. pfl takes
a client's batches in its rows' order (no shuffle; fastfair draws a fresh order): only the
losses differ, in the 3rd decimal. Not a pytest module (no ``bench_`` prefix).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Dict, List

import numpy as np
import torch
import torch.nn.functional as F

CLIENTS, LR, BATCH, SERVER_LR = 1000, 0.1, 32, 1.0


def report(impl: str, seconds: List[float], **extra) -> None:
    """Prints one JSON line: the seconds of each timed round of ``impl``, their min and median."""
    print(json.dumps({"impl": impl, "clients": CLIENTS, "min": min(seconds),
                      "median": statistics.median(seconds), "seconds": seconds, **extra}),
          flush=True)


# --- fastfair's half (fastfair's environment) -----------------------------------------------

def fastfair_fedavg():
    """``bench_sim.simulator(CLIENTS)``'s simulation with FedAvg for its rule (the same data,
    model and local training)."""
    from fastfair.sim.rounds.engine import Simulation, SimulationConfig

    return Simulation(SimulationConfig(rule="fedavg", clients=CLIENTS, per_round=CLIENTS,
                                       rounds=10**6, eval_every=10**6, eval_clients=1, lr=LR,
                                       batch_size=BATCH))


def export_clients(sim, path: str) -> None:
    """Writes the training data of all of ``sim``'s clients to ``path`` (.npz): ``x [N, F]``
    float32, ``y [N]`` int64 and ``offsets [K + 1]`` (client k owns rows
    ``offsets[k]:offsets[k + 1]``)."""
    batch = sim.dataset.client_data(np.arange(sim.config.clients), "train")
    np.savez(path, x=batch.x.numpy(), y=batch.y.numpy(), offsets=batch.offsets)


def run_fastfair(export: str, rounds: int) -> None:
    """Exports the clients' data to ``export`` (when given) and times fastfair's rounds and the
    per-client loop, interleaved, after one warm-up round each."""
    from bench.bench_sim import _per_client_loop, simulator
    from bench.conftest import interleaved
    from fastfair.sim.process import kept_heap

    torch.set_num_threads(1)
    with kept_heap():  # as bench_sim and Experiment.run run
        fedavg = fastfair_fedavg()
        if export:
            export_clients(fedavg, export)
        s = simulator(CLIENTS)
        # Each round records the loss of the model it receives (after 0, 1, ... rounds), the
        # mean over the clients of each one's mean loss on its training data.
        losses: List[float] = []
        contenders = {"fastfair Simulation.step FedAvg":
                      lambda: losses.append(fedavg.step()["train_loss"]),
                      "fastfair Simulation.step AAggFF-D (bench_sim)": s.play_round,
                      "torch per-client loop AAggFF-D (bench_sim)": _per_client_loop(s, CLIENTS)}
        for fn in contenders.values():
            fn()
        times = interleaved(contenders, rounds)
    extra = {"fastfair Simulation.step FedAvg": {"loss_after_rounds": losses}}
    for impl, seconds in times.items():
        report(impl, seconds, **extra.get(impl, {}))


# --- pfl's half (pfl's environment; nothing from fastfair) ----------------------------------

class LogisticRegression(torch.nn.Module):
    """``x W + b`` with the ``loss`` and ``metrics`` that pfl's ``PyTorchModel`` calls. Counts
    its training steps (calls of ``loss``, one per local minibatch) for the round checks."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, classes)
        for p in self.linear.parameters():  # fastfair's model starts at zero too (loss ln 10)
            torch.nn.init.zeros_(p)
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, object]:
        from pfl.metrics import Weighted

        return {"loss": Weighted(F.cross_entropy(self(x), y, reduction="sum").item(), len(y))}


def run_pfl(path: str, rounds: int) -> None:
    """Trains ``rounds + 1`` central iterations of pfl's FedAvg on the clients of ``path`` (the
    first a warm-up) and reports the seconds of the rest."""
    from pfl.aggregate.base import get_num_datapoints_weight_name, get_num_devices_weight_name
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByDatapoints
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.common_types import Population
    from pfl.data import FederatedDataset, get_user_sampler
    from pfl.hyperparam import NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel

    torch.set_num_threads(1)
    torch.manual_seed(0)
    np.random.seed(0)  # pfl's samplers and seeds draw from NumPy's global state
    data = np.load(path)
    # Tensors up front, as pfl's benchmarks do (numpy_to_tensor): each user's data is a view.
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    offsets = data["offsets"]
    counts = np.diff(offsets)
    users = [(x[a:b], y[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
    # minimize_reuse cycles through the users in order: a cohort of all of them is each once.
    federated = FederatedDataset.from_slices(users, get_user_sampler("minimize_reuse",
                                                                     list(range(len(users)))))
    module = LogisticRegression(x.shape[1], int(y.max()) + 1)
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=SERVER_LR))
    expected = {"users": len(users), "datapoints": int(counts.sum()),
                "steps": int(np.ceil(counts / BATCH).sum())}

    @torch.no_grad()
    def client_mean_loss() -> float:
        # The global model's mean loss on each client's data, averaged over the clients: the
        # figure fastfair's rounds record as train_loss (of the model each round receives).
        return float(np.mean([F.cross_entropy(module(xk), yk).item() for xk, yk in users]))

    class RoundTimer(TrainingProcessCallback):
        """Seconds from the end of the previous iteration's callbacks to this one's model
        update; then, untimed, the round's checks and the global model's loss."""

        def __init__(self) -> None:
            self.seconds: List[float] = []
            self.losses: List[float] = []

        def on_train_begin(self, *, model) -> Metrics:
            self.losses.append(client_mean_loss())
            module.steps = 0
            self.started = time.perf_counter()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            self.seconds.append(time.perf_counter() - self.started)
            # pfl's own counts: users trained, and their data points summed (a Weighted of
            # weight 1 per user, hence its weighted value).
            points = aggregate_metrics[get_num_datapoints_weight_name(Population.TRAIN)]
            done = {"users": int(aggregate_metrics[get_num_devices_weight_name(Population.TRAIN)]),
                    "datapoints": int(points.weighted_value), "steps": module.steps}
            if done != expected:
                raise RuntimeError(f"round {central_iteration} trained {done}; expected "
                                   f"{expected}")
            self.losses.append(client_mean_loss())
            module.steps = 0
            self.started = time.perf_counter()
            return False, Metrics()

    timer = RoundTimer()
    backend = SimulatedBackend(training_data=federated, val_data=federated,
                               postprocessors=[WeightByDatapoints()])  # fastfair's FedAvg weights
    # evaluation_frequency past the last iteration: only the warm-up (iteration 0) evaluates
    # each user before and after training; the timed rounds only train.
    params = NNAlgorithmParams(central_num_iterations=rounds + 1, evaluation_frequency=rounds + 2,
                               train_cohort_size=len(users), val_cohort_size=None)
    FederatedAveraging().run(algorithm_params=params, backend=backend, model=model,
                             model_train_params=NNTrainHyperParams(
                                 local_learning_rate=LR, local_num_epochs=1,
                                 local_batch_size=BATCH),
                             callbacks=[timer])
    if not timer.losses[-1] < timer.losses[0]:
        raise RuntimeError(f"pfl's global loss did not go down: {timer.losses}")
    report("pfl FederatedAveraging SimulatedBackend", timer.seconds[1:],
           loss_after_rounds=timer.losses, **expected)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pfl_round", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="half", required=True)
    p_ff = sub.add_parser("fastfair", help="export the clients and time fastfair's rounds")
    p_ff.add_argument("--export", default="", help=".npz to write the clients' data to")
    p_pfl = sub.add_parser("pfl", help="time pfl's rounds on the exported clients")
    p_pfl.add_argument("data", help=".npz written by the fastfair half")
    for p in (p_ff, p_pfl):
        p.add_argument("--rounds", type=int, default=5, help="timed rounds (after 1 warm-up)")
    args = parser.parse_args()
    if args.half == "fastfair":
        run_fastfair(args.export, args.rounds)
    else:
        run_pfl(args.data, args.rounds)


if __name__ == "__main__":
    main()
