"""The papers' client splits: FedProx's power-law MNIST split (two digits a client) and the
restricted-availability split (rare digits only on the last clients), on labels alone and on
the real MNIST files when ../shared/data holds them."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.reproduce.prepare import build_split, check_split, powerlaw_parts, rare_parts
from tests.helpers import ROOT

MNIST = ROOT.parent / "shared" / "data" / "mnist"
LABELS = np.repeat(np.arange(10), 300)


def test_powerlaw_clients_hold_two_neighbouring_digits_at_power_law_sizes():
    parts = powerlaw_parts(LABELS, 40, sigma=2.0, seed=0)
    assert len(parts) == 40
    flat = np.concatenate(parts)
    assert flat.size == np.unique(flat).size  # disjoint
    for k, p in enumerate(parts):
        classes = set(LABELS[p].tolist())
        assert classes == {k % 10, (k + 1) % 10}
        assert min(np.bincount(LABELS[p], minlength=10)[list(classes)]) >= 5
    sizes = np.array([p.size for p in parts])
    assert sizes.max() > 4 * np.median(sizes)  # a heavy tail
    assert [p.tolist() for p in powerlaw_parts(LABELS, 40, 2.0, seed=0)] == \
        [p.tolist() for p in parts]


def test_powerlaw_refuses_more_slots_than_samples():
    with pytest.raises(ValueError, match="use fewer clients"):
        powerlaw_parts(LABELS, 400, sigma=2.0, seed=0)


def test_rare_digits_sit_only_on_the_last_clients():
    parts = rare_parts(LABELS, 10, rare_clients=3, rare_classes=[8, 9], seed=0)
    for k, p in enumerate(parts):
        rare = np.isin(LABELS[p], [8, 9])
        assert rare.all() if k >= 7 else not rare.any()
    assert sum(p.size for p in parts) == LABELS.size
    with pytest.raises(ValueError, match="rare_classes"):
        rare_parts(LABELS, 10, 3, [10], seed=0)


def test_split_options_are_checked_by_name():
    with pytest.raises(ValueError, match="did you mean 'sigma'"):
        check_split("mnist-powerlaw", {"sigmaa": 1.0})
    with pytest.raises(TypeError, match="'clients'"):
        check_split("mnist-rare", {"clients": "30"})


@pytest.mark.skipif(not MNIST.is_dir(), reason="needs the real MNIST files in ../shared/data")
def test_real_mnist_splits():
    powerlaw = build_split("mnist-powerlaw", str(MNIST), {"clients": 1000})
    sizes = powerlaw.num_samples(np.arange(1000))
    assert powerlaw.num_clients == 1000 and 55_000 < sizes.sum() <= 60_000
    rare = build_split("mnist-rare", str(MNIST), {"rare_classes": [9]})
    assert rare.num_clients == 30
    assert rare.groups(np.arange(30)).tolist() == [0] * 27 + [1] * 3
