"""Top-5 accuracy, calibration and per-class accuracy (``--class-metrics``): the expected and
maximum calibration errors against their definition, a run's records against the saved model's
own predictions, labels per position counted per position, and nothing recorded unless asked
for."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fastfair.sim import Experiment, SimulationConfig
from fastfair.sim.data.base import ClientBatch
from fastfair.sim.data.catalog import build_dataset
from fastfair.sim.reporting.metrics import calibration_errors, class_metrics
from fastfair.sim.training.evaluate import class_scores


def _calibration_by_loop(confidence, correct, bins=15):
    """ECE and MCE by their definition, one bin after another."""
    ece, mce = 0.0, 0.0
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        members = [(p, c) for p, c in zip(confidence, correct)
                   if (low < p <= high) or (b == 0 and p == 0.0)]
        if members:
            gap = abs(np.mean([c for _, c in members]) - np.mean([p for p, _ in members]))
            ece += len(members) / len(confidence) * gap
            mce = max(mce, gap)
    return ece, mce


def test_calibration_errors_by_hand_and_against_their_definition(rng):
    # Two predictions at 0.9 (one right) and one at 0.3 (wrong): bins 14 and 5.
    assert calibration_errors([0.9, 0.9, 0.3], [1, 0, 0]) == pytest.approx((1.1 / 3, 0.4))
    for _ in range(20):
        n = int(rng.integers(1, 60))
        p = rng.choice([0.0, 1 / 15, 0.5, 1.0, *rng.random(8)], size=n)
        c = rng.integers(0, 2, size=n)
        assert calibration_errors(p, c) == pytest.approx(_calibration_by_loop(p, c), abs=1e-12)
    assert all(np.isnan(calibration_errors([], [])))
    with pytest.raises(ValueError, match="confidence has 2 entries but correct has 1"):
        calibration_errors([0.5, 0.5], [1])


def test_class_metrics_summarise_clients_and_pool_every_prediction():
    confidence = np.array([0.9, 0.9, 0.3, 0.6, 0.6])
    correct = np.array([1, 0, 0, 1, 1])
    labels = np.array([2, 0, 2, 1, 2])
    offsets = np.array([0, 3, 5])
    out = class_metrics(np.array([0.5, 1.0]), confidence, correct, labels, offsets,
                        np.array([3, 2]))
    ece = [1.1 / 3, 0.4]
    assert out["ece_mean"] == pytest.approx(np.mean(ece))
    assert out["ece_weighted_mean"] == pytest.approx((3 * ece[0] + 2 * ece[1]) / 5)
    assert out["ece_worst10"] == pytest.approx(max(ece))
    assert out["mce_mean"] == pytest.approx(0.4)
    assert out["ece_pooled"] == pytest.approx(calibration_errors(confidence, correct)[0])
    assert out["acc5_weighted_mean"] == pytest.approx((3 * 0.5 + 2 * 1.0) / 5)
    # Class 2's three predictions over both clients: two right.
    assert (out["acc_class0"], out["acc_class1"], out["acc_class2"]) == pytest.approx(
        (0.0, 1.0, 2 / 3))
    assert not any(k.startswith("acc5") for k in class_metrics(None, confidence, correct, labels,
                                                                offsets, np.array([3, 2])))


#: The logits of :class:`_PositionModel`'s ranked classes, best first.
_RANKED = torch.tensor([2.0, 1.75, 1.5, 1.25, 1.0, 0.75, 0.5])


class _PositionModel:
    """Logits for a label per position, ``[L, n, T, 7]``: at position t of a sample x the
    classes x + t, x + t + 1, ... (mod 7) rank first, second, ..."""
    eval_rows = 2

    def forward(self, params, xs):
        n, T, C = xs.shape[1], 3, 7
        logits = torch.zeros(xs.shape[0], n, T, C)
        for i in range(n):
            for t in range(T):
                for j in range(C):
                    logits[:, i, t, (int(xs[0, i, 0]) + t + j) % C] = _RANKED[j]
        return logits


def test_a_label_per_position_counts_every_position():
    x = torch.tensor([[0.0], [1.0], [2.0]])
    # Each label's rank: sample 0: 1st, 1st, 1st; sample 1: 1st, 6th, 1st; sample 2: 5th, 4th,
    # 3rd. Client 0 holds samples 0 and 1, client 1 sample 2.
    y = torch.tensor([[0, 1, 2], [1, 0, 3], [6, 6, 6]])
    batch = ClientBatch(x, y, np.array([0, 2, 3]))
    top, confidence, correct, labels, offsets = class_scores(_PositionModel(), torch.zeros(1),
                                                             batch)
    assert labels.tolist() == y.reshape(-1).tolist()
    assert offsets.tolist() == [0, 6, 9]
    assert correct.tolist() == [1, 1, 1, 1, 0, 1, 0, 0, 0]
    assert confidence == pytest.approx(np.full(9, torch.softmax(_RANKED.double(), 0)[0].item()))
    assert top is not None and top.tolist() == pytest.approx([5 / 6, 1.0])


def test_a_run_records_top5_and_calibration_of_its_saved_model(tmp_path):
    config = SimulationConfig(dataset="synthetic", clients=6, per_round=3, rounds=2,
                              eval_every=1, class_metrics=True)
    Experiment(config, ["fedavg"], out=tmp_path / "run").run()
    last = json.loads((tmp_path / "run" / "metrics.json").read_text())["fedavg"][-1]
    saved = torch.load(tmp_path / "run" / "models.pt", weights_only=True)["fedavg"]
    test = build_dataset(config).client_data(np.arange(6), "test")
    logits = (test.x.double() @ saved["W"].double() + saved["b"].double())
    probs = torch.softmax(logits, -1)
    top5 = (logits.topk(5, -1).indices == test.y[:, None]).any(-1).double().numpy()
    confidence, predicted = probs.max(-1)
    correct = (predicted == test.y).double().numpy()
    bounds = list(zip(test.offsets[:-1], test.offsets[1:]))
    counts = np.diff(test.offsets)
    top5_client = [top5[a:b].mean() for a, b in bounds]
    ece = [calibration_errors(confidence.numpy()[a:b], correct[a:b])[0] for a, b in bounds]
    assert last["acc5_weighted_mean"] == pytest.approx(np.dot(counts, top5_client) / counts.sum(),
                                                       abs=1e-6)
    assert last["ece_mean"] == pytest.approx(np.mean(ece), abs=1e-5)
    assert 0 <= last["mce_pooled"] <= 1
    y = test.y.numpy()
    assert last["acc_class3"] == pytest.approx(correct[y == 3].mean(), abs=1e-9)


def test_no_class_metrics_unless_asked(tmp_path):
    config = SimulationConfig(dataset="synthetic", clients=6, per_round=2, rounds=1)
    Experiment(config, ["fedavg"], out=tmp_path / "run").run()
    records = json.loads((tmp_path / "run" / "metrics.json").read_text())["fedavg"]
    assert not any(k.startswith(("acc5_", "ece_", "mce_")) for r in records for k in r)
