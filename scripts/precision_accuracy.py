"""Final accuracy of FedAvg's CNN trained in fp32 and in bf16 (autocast), over seeds.

scikit-learn's bundled digits as 1x8x8 images (1797 samples, 10 classes; no download), split
over 20 clients by Dirichlet(0.5) labels (the seed's partition), 10 clients a round, one local
epoch of batch 10 at lr 0.05; FedAvg's two-conv CNN (conv 32, conv 64, dense 512). Prints each
seed's final mean client accuracy and, per precision, the mean with its 95% t-interval over the
seeds, and whether bf16's mean lies within fp32's interval; the test loss beside each accuracy
shows the two precisions trained different models where their accuracies tie.

Run: ``python scripts/precision_accuracy.py --seeds 0,1,2 --rounds 100`` (bf16 needs a CPU with
bf16 kernels, or ``--device cuda``).
"""

from __future__ import annotations

import argparse
from typing import Tuple

import numpy as np

from fastfair.sim import ArrayDataset, ModuleModel, SimulationConfig
from fastfair.sim.data.arrays import partition_labels
from fastfair.sim.experiments.experiment import Experiment
from fastfair.sim.models.zoo import two_conv_cnn
from fastfair.sim.reporting.stats import mean_ci

CLIENTS, PER_ROUND = 20, 10


def digit_images(seed: int) -> ArrayDataset:
    """The digits as [n, 1, 8, 8] images in [0, 1], over CLIENTS clients (80/20 train/test)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    parts = partition_labels(y, CLIENTS, "dirichlet", seed=seed)
    return ArrayDataset([(x[p], y[p]) for p in parts], num_classes=10)


def final_accuracy(seed: int, precision: str, rounds: int, device: str) -> Tuple[float, float]:
    """``(final mean client accuracy, final test loss)`` of one run."""
    config = SimulationConfig(clients=CLIENTS, per_round=PER_ROUND, rounds=rounds, lr=0.05,
                              batch_size=10, seed=seed, precision=precision, device=device,
                              eval_every=rounds)
    model = ModuleModel(two_conv_cnn((1, 8, 8), 10, 512, "fedavg-cnn"))
    result = Experiment(config, ["fedavg"], dataset=digit_images(seed), model=model).run()
    last = result.histories["fedavg"][-1]
    return float(np.mean(result.finals["fedavg"])), float(last["test_loss"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    accuracy = {p: [] for p in ("fp32", "bf16")}
    for seed in seeds:
        for precision in accuracy:
            acc, loss = final_accuracy(seed, precision, args.rounds, args.device)
            accuracy[precision].append(acc)
            print(f"seed {seed} {precision}: final mean accuracy {acc:.4f}, test loss {loss:.6f}",
                  flush=True)
    intervals = {p: mean_ci(a) for p, a in accuracy.items()}
    for p, (mean, half) in intervals.items():
        print(f"{p}: {mean:.4f} +- {half:.4f} (95%, {len(seeds)} seeds)")
    (mean32, half32), (mean16, _) = intervals["fp32"], intervals["bf16"]
    print("bf16 mean within fp32's 95% interval:", abs(mean16 - mean32) <= half32)


if __name__ == "__main__":
    main()
