"""One simulator round, end to end: the cohort's data, the loss of the received model, local
training, the rule's coefficients and the aggregation.

The simulator (AAggFF-D, Synthetic(1, 1), multinomial logistic regression, one local epoch of
batch 32; every client sampled, so each round trains the same cohort) against a plain per-client
PyTorch loop that trains the same clients on the same data with ``torch.optim.SGD`` and applies
the float64 reference rule. The floor here is a **compute** floor, not a copy floor: the same
real samples trained as one dense, pre-generated batch (one forward, backward and SGD step of
one model over all of them per epoch, in the fastest formulation we know), the arithmetic a
round cannot avoid; the same step written as the usual ``cross_entropy(x @ W + b, y)`` is
reported beside it. Every contender runs under :func:`fastfair.sim.process.kept_heap`, as
``Experiment.run`` runs a simulation.

Run: ``python -m pytest bench/bench_sim.py -q -s``.
"""

from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Tuple

import numpy as np
import torch

from bench.conftest import interleaved, sizes
from fastfair.reference import aggregators as ref

CLIENTS = sizes(1000, 10)
LR, BATCH = 0.1, 32


class Simulator(NamedTuple):
    play_round: Callable[[], object]
    train_data: Callable[[int], Tuple[torch.Tensor, torch.Tensor]]
    num_features: int
    num_classes: int


def simulator(clients: int) -> Simulator:
    """The one place this file uses ``fastfair.sim`` (whose API is being reshaped): an AAggFF-D
    simulation over ``clients`` clients that samples all of them every round, without
    evaluation rounds; ``train_data(k)`` is client k's training data."""
    from fastfair.sim.rounds.engine import Simulation, SimulationConfig

    sim = Simulation(SimulationConfig(rule="aaggff-d", clients=clients, per_round=clients,
                                      rounds=10**6, eval_every=10**6, eval_clients=1, lr=LR,
                                      batch_size=BATCH))

    def train_data(k: int) -> Tuple[torch.Tensor, torch.Tensor]:
        batch = sim.dataset.client_data(np.array([k]), "train")
        return batch.x, batch.y

    return Simulator(sim.step, train_data, sim.dataset.num_features, sim.dataset.num_classes)


def _per_client_loop(s: Simulator, clients: int):
    """A round as a plain PyTorch loop: per client, the loss of the received model on its data
    (generated once, held in memory as the simulator holds a cohort that repeats), one epoch of
    minibatch SGD on its own copy; then the AAggFF-D reference rule and the weighted update of
    the global model."""
    F, C = s.num_features, s.num_classes
    data = [s.train_data(k) for k in range(clients)]
    W, b = torch.zeros(F, C), torch.zeros(C)
    state = {"G": np.zeros(clients), "p": np.full(clients, 1.0 / clients), "t": 0}
    gen = torch.Generator().manual_seed(0)

    def round_():
        losses, updates = [], []
        for _k, (x, y) in enumerate(data):
            Wk, bk = W.clone().requires_grad_(True), b.clone().requires_grad_(True)
            with torch.no_grad():
                losses.append(float(torch.nn.functional.cross_entropy(x @ W + b, y)))
            opt = torch.optim.SGD([Wk, bk], lr=LR)
            order = torch.randperm(x.shape[0], generator=gen)
            for start in range(0, x.shape[0], BATCH):
                rows = order[start:start + BATCH]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(x[rows] @ Wk + bk, y[rows]).backward()
                opt.step()
            updates.append(torch.cat([(W - Wk).detach().reshape(-1), (b - bk).detach()]))
        state["t"] += 1
        state["G"], state["p"], q = ref.aaggffd_round(state["G"], state["p"], np.arange(clients),
                                                      np.array(losses), state["t"])
        step = torch.from_numpy(q).float() @ torch.stack(updates)
        W.sub_(step[:F * C].reshape(F, C))
        b.sub_(step[F * C:])

    return round_


def _dense_steps(s: Simulator, clients: int) -> Dict[str, Callable[[], None]]:
    """One forward, backward and SGD step of one model over all the cohort's training samples,
    pre-generated as one dense batch, in two formulations: ``floor``, the fastest we know for a
    large cohort (the product as :math:`W^\top x^\top`, BLAS's fast shape for few outputs, and
    cross-entropy written out), and ``idiom``, the plain ``cross_entropy(x @ W + b, y)`` (2.7x
    slower at 1000 clients, faster at a few); the round's floor is the faster of the two."""
    data: List[Tuple[torch.Tensor, torch.Tensor]] = [s.train_data(k) for k in range(clients)]
    x, y = torch.cat([d[0] for d in data]), torch.cat([d[1] for d in data])
    W = torch.zeros(s.num_features, s.num_classes, requires_grad=True)
    b = torch.zeros(s.num_classes, requires_grad=True)
    opt = torch.optim.SGD([W, b], lr=LR)

    def floor():
        z = torch.baddbmm(b[None, :, None], W.t()[None], x.t()[None])[0].t().contiguous()
        loss = (torch.logsumexp(z, 1) - z.gather(1, y[:, None])[:, 0]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def idiom():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(x @ W + b, y).backward()
        opt.step()

    return {"floor": floor, "idiom": idiom}


def test_simulator_round(floor_report):
    from fastfair.sim.process import kept_heap

    with kept_heap():  # as Experiment.run runs: every contender reuses freed memory
        _simulator_round(floor_report)


def _simulator_round(floor_report):
    s = simulator(CLIENTS)
    dense = _dense_steps(s, CLIENTS)
    contenders = {"fastfair Simulation.step": s.play_round,
                  "torch per-client loop": _per_client_loop(s, CLIENTS),
                  "floor": dense["floor"],
                  "torch dense step, cross_entropy idiom": dense["idiom"]}
    for fn in contenders.values():  # warm-up
        fn()
    times = interleaved(contenders, 5)
    # The faster of the two dense formulations (at smoke size the idiom wins).
    floor = min(min(times.pop("floor")), min(times["torch dense step, cross_entropy idiom"]))
    case = f"simulator round AAggFF-D logreg {CLIENTS} clients"
    for impl, seconds in times.items():
        floor_report.add(case, impl, min(seconds), floor_seconds=floor,
                         reference=impl == "torch per-client loop")
