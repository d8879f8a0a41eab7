"""What LEAF's own scripts write and the reader takes, on small files: Shakespeare's test
``num_samples`` counting the 79 windows its split drops, partial sets whose train and test files
hold different users, and the files side by side without train/ and test/ folders."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from fastfair.sim.data.leaf import OVERLAP, LeafDataset, count_users
from tests.helpers import sim_files as sf


def _inflate_test_counts(root, extra):
    """Adds ``extra(held)`` to every test user's num_samples, as LEAF's split counts."""
    for path in (root / "test").glob("*.json"):
        data = json.loads(path.read_text())
        data["num_samples"] = [n + extra(n) for n in data["num_samples"]]
        path.write_text(json.dumps(data))


def test_shakespeare_test_records_are_taken_where_num_samples_counts_the_overlap(
        tmp_path, rng, caplog):
    sf.write_leaf(tmp_path, sf.split_users(rng, sf.shakespeare_users(rng, [30, 12, 20])))
    _inflate_test_counts(tmp_path, lambda n: OVERLAP)
    data = LeafDataset("shakespeare", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="fastfair.sim.data"):
        test = data.client_data(np.arange(3), "test")
        data.client_data(np.arange(3), "test")
    assert test.counts.tolist() == [3, 2, 2]          # the records, 10 % of each role
    assert sum("79 windows fewer" in r.getMessage() for r in caplog.records) == 1


def test_other_count_mismatches_are_still_refused(tmp_path, rng):
    sf.write_leaf(tmp_path, sf.split_users(rng, sf.shakespeare_users(rng, [30, 12])))
    _inflate_test_counts(tmp_path, lambda n: 5)
    data = LeafDataset("shakespeare", str(tmp_path))
    with pytest.raises(ValueError, match="the index promises 8 samples"):
        data.client_data(np.arange(1), "test")


def test_a_partial_set_keeps_the_users_with_training_data_and_says_what_it_left(
        tmp_path, rng, caplog):
    split = sf.split_users(rng, sf.femnist_users(rng, [6, 5, 8, 7]))
    names = list(split["train"])
    del split["train"][names[3]]                     # a test-only writer
    del split["test"][names[0]]                      # a writer without test data
    sf.write_leaf(tmp_path, split, per_file=2)
    with caplog.at_level(logging.WARNING, logger="fastfair.sim.data"):
        data = LeafDataset("femnist", str(tmp_path))
    assert data.users == names[:3]
    messages = [r.getMessage() for r in caplog.records]
    assert any("1 users of the test files (1 test samples) have no training data" in m
               for m in messages), messages
    assert any("1 users (5 training samples) have no test entry" in m for m in messages)
    assert data.client_data(np.arange(3), "test").counts.tolist() == [0, 1, 1]


def test_files_side_by_side_read_as_the_train_and_test_folders(tmp_path, rng):
    sf.write_leaf(tmp_path / "leaf", sf.split_users(rng, sf.femnist_users(rng, [4, 6, 5])))
    flat = tmp_path / "flat"
    flat.mkdir()
    for split in ("train", "test"):
        for path in (tmp_path / "leaf" / split).glob("*.json"):
            (flat / path.name).write_bytes(path.read_bytes())
    (flat / "users_and_plays.json").write_text("{}")  # LEAF's other files are not read
    a, b = LeafDataset("femnist", str(tmp_path / "leaf")), LeafDataset("femnist", str(flat))
    assert count_users(str(flat)) == 3
    for split in ("train", "test"):
        x, y = a.client_data(np.arange(3), split), b.client_data(np.arange(3), split)
        assert np.array_equal(x.x.numpy(), y.x.numpy()) and np.array_equal(x.offsets, y.offsets)
