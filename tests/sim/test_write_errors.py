"""A full disk: a checkpoint, state, metrics or rounds.csv write that fails with ENOSPC says "no
space left on device while writing PATH", leaves no temporary file behind and keeps the earlier
file."""

from __future__ import annotations

import errno
import pickle

import numpy as np
import pytest
import torch

import fastfair
from fastfair import _files
from fastfair.sim import checkpoint
from fastfair.sim.reporting import callbacks
from tests.helpers.sim_files import full_disk


def test_a_checkpoint_on_a_full_disk_keeps_the_earlier_one(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, {"round": 1, "params": torch.arange(5.0)})
    before = path.read_bytes()
    full_disk(monkeypatch, _files, after=64)
    with pytest.raises(OSError, match=f"^no space left on device while writing {path}$") as err:
        checkpoint.save(path, {"round": 2, "params": torch.zeros(10000),
                               "x": np.ones(1000)})
    assert err.value.errno == errno.ENOSPC
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]   # no .tmp left
    monkeypatch.undo()
    assert checkpoint.load(path)["round"] == 1


def test_a_checkpoint_that_cannot_be_serialised_leaves_no_temporary(tmp_path):
    with pytest.raises((pickle.PicklingError, AttributeError)):   # by Python version
        checkpoint.save(tmp_path / "c.pt", {"f": lambda: 0})
    assert list(tmp_path.iterdir()) == []


def test_rounds_csv_on_a_full_disk_says_which_file(tmp_path, monkeypatch):
    path = tmp_path / "rounds.csv"
    logger = callbacks.CSVLogger(path)
    full_disk(monkeypatch, callbacks, after=40)
    logger.on_run_start("fedavg", {})
    with pytest.raises(OSError, match=f"^no space left on device while writing {path}$"):
        for t in range(1, 20):
            logger.on_round("fedavg", {"round": t, "train_loss": 0.5, "acc_mean": 0.25})
    logger.close()           # closes without a second error


def test_state_on_a_full_disk_keeps_the_earlier_one(tmp_path, monkeypatch):
    path = tmp_path / "state.npz"
    fastfair.save_state(path, {"w": np.arange(3.0)})
    before = path.read_bytes()
    full_disk(monkeypatch, _files, after=64)
    with pytest.raises(OSError, match=f"^no space left on device while writing {path}$"):
        fastfair.save_state(path, {"w": np.zeros(10000)})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.npz"]


def test_metrics_on_a_full_disk_say_which_file(tmp_path, monkeypatch):
    from fastfair.sim.reporting import report

    full_disk(monkeypatch, _files, after=10)
    with pytest.raises(OSError, match="no space left on device while writing .*metrics.csv"):
        report.write_metrics(tmp_path, {"fedavg": [{"round": 1, "acc_mean": 0.5}] * 50})
    full_disk(monkeypatch, _files, after=10 ** 9, fail_on_name="metrics.json.tmp")
    with pytest.raises(OSError, match="no space left on device while writing .*metrics.json"):
        report.write_metrics(tmp_path, {"fedavg": [{"round": 1, "acc_mean": 0.5}] * 50})
    full_disk(monkeypatch, _files, after=5)
    with pytest.raises(OSError, match="no space left .*final_accuracy.csv"):
        report.write_final_accuracy(tmp_path, {"fedavg": np.ones(40)}, np.arange(40))
