"""Which rule treats clients most fairly, in a Flower app? FedAvg, AAggFF-D and FedMABA as
Flower strategies (fastfair.integrations.flwr), on scikit-learn's bundled digits split over 30
clients by Dirichlet(0.3) label proportions.

Run from the repository root (no downloads; about a minute on 2 cores):

    pip install -c constraints.txt -e ".[flower,sim]"
    python examples/flower/fairness_digits.py

Each rule trains a softmax regression for 30 rounds of 10 clients (one local epoch of SGD); at
the end the server evaluates the final model on every client's held-out 20% and prints the mean,
the worst client's and the worst 10% of clients' accuracy per rule. ``--rules`` takes any of
fedavg, aaggff-d, fedmaba, qfedavg, term, fedprox, propfair, fedcvar.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network from the app
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from fastfair import aggregators as agg  # noqa: E402
from fastfair.integrations.flwr import RECEIVED_LOSS_KEY, ClientObjective, FastFairStrategy  # noqa: E402

NUM_CLIENTS, PER_ROUND, ROUNDS, ALPHA, SEED = 30, 10, 30, 0.3, 0
LR, BATCH = 0.5, 16

RULES = {
    "fedavg": lambda k: agg.FedAvg(k),
    "aaggff-d": lambda k: agg.AAggFFD(k),
    "fedmaba": lambda k: agg.FedMABA(k),
    "qfedavg": lambda k: agg.QFedAvg(k, q=1.0, lipschitz=1.0 / LR),
    "term": lambda k: agg.TERM(k, tilt=1.0),
    "fedprox": lambda k: agg.FedProx(k, mu=0.1),
    "propfair": lambda k: agg.PropFair(k, M=5.0),
    "fedcvar": lambda k: agg.FedCVaRAvg(k, alpha=0.2),
}


def partitions(num_clients: int):
    """Every client's (x_train, y_train, x_test, y_test): digits split by Dirichlet(ALPHA)
    label proportions, each client's samples 80/20 train/test in a seeded order. (Rebuilt on
    every call, about 10 ms: the ClientApp is shipped to the simulation's workers by value, so a
    cache here would not survive between messages.)"""
    from sklearn.datasets import load_digits

    from fastfair.sim.data.arrays import partition_labels

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    parts = partition_labels(digits.target, num_clients, "dirichlet", seed=SEED, alpha=ALPHA)
    rng = np.random.default_rng(SEED + 1)
    out = []
    for p in parts:
        p = torch.from_numpy(rng.permutation(p))
        cut = max(1, int(0.8 * len(p)))
        out.append((x[p[:cut]], y[p[:cut]], x[p[cut:]], y[p[cut:]]))
    return out


def new_model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Linear(64, 10)


# --------------------------------------------------------------------------- ClientApp

client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Reports the loss of the received model (before training, under RECEIVED_LOSS_KEY; not
    Flower's train_loss, the mean loss during training), then trains one epoch on the objective
    of the server's rule (plain, FedProx, PropFair or Fed-CVaR-Avg)."""
    pid = int(context.node_config["partition-id"])
    x, y, _, _ = partitions(int(context.node_config["num-partitions"]))[pid]
    model = new_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    received = [p.detach().clone() for p in model.parameters()]
    objective = ClientObjective.from_config(msg.content["config"])
    with torch.no_grad():
        loss_before = float(torch.nn.functional.cross_entropy(model(x), y))

    # Fed-CVaR-Avg trains a threshold t beside the model, with its own step size.
    start = objective.initial_state()
    state = None if start is None else torch.tensor(start, requires_grad=True)
    groups = [{"params": list(model.parameters())}]
    if state is not None:
        groups.append({"params": [state], "lr": objective.state_lr(LR)})
    opt = torch.optim.SGD(groups, lr=LR)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(pid))
    for first in range(0, len(y), BATCH):
        idx = order[first:first + BATCH]
        batch_loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss = objective(batch_loss, list(model.parameters()), received, state)
        opt.zero_grad()
        loss.backward()
        opt.step()

    metrics = {"num-examples": len(y), RECEIVED_LOSS_KEY: loss_before, "partition-id": pid,
               **objective.reply_metrics(state)}
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


# --------------------------------------------------------------------------- ServerApp

def client_accuracies(arrays: ArrayRecord, num_clients: int) -> np.ndarray:
    """The model's test accuracy on every client's held-out data ``[K]``."""
    model = new_model()
    model.load_state_dict(arrays.to_torch_state_dict())
    with torch.no_grad():
        return np.array([float((model(xt).argmax(1) == yt).float().mean())
                         for _, _, xt, yt in partitions(num_clients)])


def make_server_app(rule_names, num_clients: int, per_round: int, rounds: int) -> ServerApp:
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        rows = []
        for name in rule_names:
            strategy = FastFairStrategy(
                RULES[name](num_clients), client_id_key="partition-id",
                fraction_train=per_round / num_clients, min_train_nodes=per_round,
                min_available_nodes=num_clients, fraction_evaluate=0.0)
            start = time.perf_counter()
            result = strategy.start(grid, ArrayRecord(new_model().state_dict()),
                                    num_rounds=rounds)
            acc = client_accuracies(result.arrays, num_clients)
            worst10 = np.sort(acc)[:max(1, num_clients // 10)].mean()
            rows.append((name, acc.mean(), acc.min(), worst10, time.perf_counter() - start))
        print(f"\n{'rule':<10}{'mean acc':>10}{'worst':>10}{'worst 10%':>11}{'time':>8}")
        print("-" * 49)
        for name, mean, worst, w10, secs in rows:
            print(f"{name:<10}{100 * mean:>10.2f}{100 * worst:>10.2f}{100 * w10:>11.2f}"
                  f"{secs:>7.1f}s")
        print(f"(test accuracy in % over {num_clients} clients after {rounds} rounds of "
              f"{per_round}; time = wall seconds of the rule's rounds, the first rule's "
              "including the start of the simulation's workers)")

    return server_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", default="fedavg,aaggff-d,fedmaba",
                        help=f"comma-separated, from {', '.join(RULES)}")
    parser.add_argument("--clients", type=int, default=NUM_CLIENTS)
    parser.add_argument("--per-round", type=int, default=PER_ROUND)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    names = args.rules.split(",")
    unknown = [n for n in names if n not in RULES]
    if unknown:
        parser.error(f"unknown rule(s) {', '.join(unknown)}; choose from {', '.join(RULES)}")
    if not 1 <= args.per_round <= args.clients:
        parser.error("--per-round must be between 1 and --clients")
    run_simulation(server_app=make_server_app(names, args.clients, args.per_round, args.rounds),
                   client_app=client_app, num_supernodes=args.clients,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 2, "include_dashboard": False}})


if __name__ == "__main__":
    main()
