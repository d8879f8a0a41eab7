"""A FastFairStrategy's state saves the PyTorch way (torch.save, then torch.load with torch's
defaults: weights only) and with NumPy alone (fastfair.save_state / load_state); a strategy that
loads either continues exactly as the one that saved it."""

import copy

import numpy as np
import pytest

pytest.importorskip("flwr")
torch = pytest.importorskip("torch")

import fastfair  # noqa: E402
from fastfair import aggregators as agg  # noqa: E402
from fastfair.integrations.flwr import FastFairStrategy  # noqa: E402
from tests.integrations.flwr.test_strategy import (  # noqa: E402, F401
    K,
    play_round,
    server_identity,
)


def _strategy():
    return FastFairStrategy(agg.FedMABA(K), server_optimizer=agg.FedAdam(lr=0.1))


def _save_torch(sd, path):
    torch.save(sd, path)
    return torch.load(path)  # torch's default: weights_only=True


def _save_numpy(sd, path):
    fastfair.save_state(path, sd)
    return fastfair.load_state(path)


@pytest.mark.parametrize("save", [_save_torch, _save_numpy], ids=["torch", "numpy"])
def test_strategy_state_round_trips_and_continues_exactly(save, tmp_path):
    trained = _strategy()
    for seed in range(3):  # the rule's and FedAdam's state move, nodes are numbered
        play_round(trained, np.random.default_rng(seed))
    loaded = save(trained.state_dict(), tmp_path / "strategy.state")
    resumed = _strategy()
    resumed.load_state_dict(loaded)
    assert resumed.state_dict()["node_ids"] == trained.state_dict()["node_ids"]
    _, _, want = play_round(copy.deepcopy(trained), np.random.default_rng(9))
    _, _, got = play_round(resumed, np.random.default_rng(9))
    for key in want.keys():
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())
