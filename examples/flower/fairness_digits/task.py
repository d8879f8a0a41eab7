"""What the ServerApp and the ClientApp share: the clients' data (scikit-learn's bundled digits
split over K clients by Dirichlet label proportions), the model, the rules and the logging."""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np
import torch

from fastfair import aggregators as agg

#: Each rule as a function of the number of clients K and the local learning rate.
RULES: Dict[str, Callable[[int, float], agg.Aggregator]] = {
    "fedavg": lambda k, lr: agg.FedAvg(k),
    "aaggff-d": lambda k, lr: agg.AAggFFD(k),
    "fedmaba": lambda k, lr: agg.FedMABA(k),
    "qfedavg": lambda k, lr: agg.QFedAvg(k, q=1.0, lipschitz=1.0 / lr),
    "term": lambda k, lr: agg.TERM(k, tilt=1.0),
    "fedprox": lambda k, lr: agg.FedProx(k, mu=0.1),
    "propfair": lambda k, lr: agg.PropFair(k, M=5.0),
    "fedcvar": lambda k, lr: agg.FedCVaRAvg(k, alpha=0.2),
}

Partition = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class _Expected(logging.Filter):
    """Drops Flower's warning that federated evaluation is skipped: the app evaluates every
    client itself, on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Federated evaluation will be skipped" not in record.getMessage()


_EXPECTED = _Expected()


def quiet_flower(verbose: bool) -> None:
    """Flower's own logs at WARNING in this process (INFO, every round's, with ``verbose``),
    without the warnings this app expects (federated evaluation skipped, Ray's tip about
    accelerator variables) unless ``verbose``."""
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.setLevel(logging.INFO if verbose else logging.WARNING)
    if verbose:
        flwr_logger.removeFilter(_EXPECTED)
        return
    flwr_logger.addFilter(_EXPECTED)
    warnings.filterwarnings("ignore", message="Tip: In future versions of Ray",
                            category=FutureWarning)


def setting(config: Mapping[str, Any], key: str, kind: type) -> Any:
    """The run config value ``key`` as ``kind`` (bool, int, float, str); ValueError naming the
    key when it is missing or of another type."""
    if key not in config:
        raise ValueError(f"run config has no '{key}': add it under [tool.flwr.app.config]")
    value = config[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"run config '{key}' must be a {kind.__name__}; got {value!r}")
    return value


def partitions(num_clients: int, alpha: float, seed: int) -> List[Partition]:
    """Every client's ``(x_train, y_train, x_test, y_test)``: the digits split by
    Dirichlet(``alpha``) label proportions, each client's samples 80/20 train/test in a seeded
    order. Rebuilt on every call (about 10 ms): the simulation runs clients in worker
    processes, where a cache would not survive between messages."""
    from sklearn.datasets import load_digits

    from fastfair.sim.data.arrays import partition_labels

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    parts = partition_labels(digits.target, num_clients, "dirichlet", seed=seed, alpha=alpha)
    rng = np.random.default_rng(seed + 1)
    out = []
    for p in parts:
        p = torch.from_numpy(rng.permutation(p))
        cut = max(1, int(0.8 * len(p)))
        out.append((x[p[:cut]], y[p[:cut]], x[p[cut:]], y[p[cut:]]))
    return out


def new_model(seed: int) -> torch.nn.Module:
    """The model: a softmax regression of the 64 pixels, initialised from ``seed``."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return torch.nn.Linear(64, 10)
    finally:
        torch.random.set_rng_state(gen_state)


def client_accuracies(model: torch.nn.Module, parts: List[Partition]) -> np.ndarray:
    """``model``'s test accuracy on every client's held-out data ``[K]``."""
    with torch.no_grad():
        return np.array([float((model(xt).argmax(1) == yt).float().mean())
                         for _, _, xt, yt in parts])


def table(rows: List[Tuple[str, float, float, float, float]], num_clients: int, rounds: int,
          per_round: int) -> str:
    """The result table: per rule, mean, worst and worst-10% client accuracy (fractions in
    [0, 1], as ``fastfair simulate`` prints them) and the seconds of its rounds."""
    lines = [f"{'rule':<10}{'mean acc':>10}{'worst':>10}{'worst 10%':>11}{'time':>8}",
             "-" * 49]
    for name, mean, worst, w10, secs in rows:
        lines.append(f"{name:<10}{mean:>10.3f}{worst:>10.3f}{w10:>11.3f}{secs:>7.1f}s")
    lines.append(f"(test accuracy as fractions in [0, 1] over {num_clients} clients after "
                 f"{rounds} rounds of {per_round}; time = wall seconds of the rule's rounds)")
    return "\n".join(lines)
