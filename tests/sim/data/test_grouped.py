"""The grouped workload: power-law groups, cohort-independent client data generated in one
vectorised pass, a global model that learns, and per-group accuracy in the report."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair.cli import main
from fastfair.sim import Simulation, SimulationConfig
from fastfair.sim.data.grouped import GroupedSyntheticDataset


def test_group_shares_follow_the_power_law():
    data = GroupedSyntheticDataset(200_000, num_groups=5, group_power=1.0)
    share = np.bincount(data.groups(np.arange(200_000)), minlength=5) / 200_000
    expected = (1.0 / np.arange(1, 6)) / (1.0 / np.arange(1, 6)).sum()
    np.testing.assert_allclose(share, expected, atol=0.005)


def test_a_clients_data_do_not_depend_on_the_cohort():
    data = GroupedSyntheticDataset(1000, seed=4)
    big = data.client_data(np.array([5, 900, 17, 3]), "train")
    small = data.client_data(np.array([17]), "train")
    rows = slice(int(big.offsets[2]), int(big.offsets[3]))
    torch.testing.assert_close(big.x[rows], small.x, rtol=0, atol=0)
    torch.testing.assert_close(big.y[rows], small.y, rtol=0, atol=0)
    test = data.client_data(np.array([17]), "test")
    total = data.total_samples(np.array([17]))[0]
    assert small.x.shape[0] + test.x.shape[0] == total and small.x.shape[1] == 32
    assert 0 <= int(big.y.min()) and int(big.y.max()) < 10


def test_fedavg_learns_and_the_report_names_the_worst_group():
    sim = Simulation(SimulationConfig(dataset="grouped", clients=5000, per_round=50, rounds=20,
                                      eval_every=20, eval_clients=500, groups=4, lr=0.5))
    for _ in range(20):
        rec = sim.step()
    assert rec["acc_mean"] > 0.3          # 3x chance
    groups = [k for k in rec if k.startswith("acc_group")]
    assert len(groups) == 4
    assert rec["acc_worst_group"] == min(rec[k] for k in groups) < rec["acc_mean"]


def test_cli_runs_the_grouped_workload(tmp_path, capsys):
    assert main(["simulate", "--dataset", "grouped", "--clients", "100000", "--per-round", "20",
                 "--rounds", "2", "--eval-every", "2", "--eval-clients", "100", "--out",
                 str(tmp_path / "g"), "--quiet"]) == 0
    assert "worst grp" in capsys.readouterr().out
    with pytest.raises(ValueError, match="groups = 3 has no effect"):
        SimulationConfig(groups=3)


def test_a_data_sets_group_ids_cannot_be_made_writable():
    from fastfair.sim.data.base import check_groups

    groups, _ = check_groups(np.array([0, 1, 1]), 3, "groups")
    with pytest.raises(ValueError, match="WRITEABLE"):
        groups.setflags(write=True)
