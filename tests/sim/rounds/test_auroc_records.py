"""A binary task's runs record AUROC (per client in the last round, summarised in every
evaluation round), and it is the AUROC of the saved model's margins, as scikit-learn computes
it; other tasks record none."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fastfair.sim import Experiment, SimulationConfig
from fastfair.sim.data.adult import AdultDataset
from tests.helpers import sim_files as sf


def test_a_binary_run_records_the_auroc_of_its_saved_model(tmp_path, rng):
    from sklearn.metrics import roc_auc_score

    folder = tmp_path / "adult"
    sf.write_adult(folder, rng, 60, 40)
    config = SimulationConfig(dataset="adult", data_dir=str(folder), clients=2, per_round=2,
                              rounds=3, eval_every=1, partition="column:education=Doctorate")
    Experiment(config, ["fedavg"], out=tmp_path / "run").run()
    records = json.loads((tmp_path / "run" / "metrics.json").read_text())["fedavg"]
    assert all("auroc_worst10" in r and "auroc_pooled" in r for r in records)
    last = records[-1]
    assert [k for k in last if k.startswith("auroc_client")] == ["auroc_client0",
                                                                 "auroc_client1"]
    assert not any(k.startswith("auroc_client") for k in records[0])
    saved = torch.load(tmp_path / "run" / "models.pt", weights_only=True)["fedavg"]
    data = AdultDataset(str(folder), partition="column:education=Doctorate")
    test = data.client_data(np.arange(2), "test")
    logits = test.x @ saved["W"] + saved["b"]
    margin = (logits[:, 1] - logits[:, 0]).double().numpy()
    y = test.y.numpy()
    per_client = [roc_auc_score(y[a:b], margin[a:b])
                  for a, b in zip(test.offsets[:-1], test.offsets[1:])]
    assert [last["auroc_client0"], last["auroc_client1"]] == pytest.approx(per_client, abs=1e-9)
    assert last["auroc_pooled"] == pytest.approx(roc_auc_score(y, margin), abs=1e-9)
    assert last["auroc_worst10"] == pytest.approx(min(per_client), abs=1e-9)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["fedavg"]
    assert summary["auroc_mean"] == pytest.approx(np.mean(per_client), abs=1e-9)


def test_a_task_of_more_classes_records_no_auroc(tmp_path):
    config = SimulationConfig(dataset="synthetic", clients=6, per_round=2, rounds=1)
    Experiment(config, ["fedavg"], out=tmp_path / "run").run()
    records = json.loads((tmp_path / "run" / "metrics.json").read_text())["fedavg"]
    assert not any(k.startswith("auroc") for r in records for k in r)
