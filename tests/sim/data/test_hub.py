"""Client data from data-hub partitions: mappings of columns (always) and Hugging Face
``datasets`` partitions built locally (where ``datasets`` is installed; no network)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastfair.sim.data.hub import from_partitions, pixels


def _images(rng, n, label):
    return {"image": rng.integers(0, 256, (n, 6, 5), dtype=np.uint8),
            "label": np.full(n, label, dtype=np.int64)}


def test_pixels_are_floats_in_0_1_channels_first():
    x = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(1, 2, 2, 3) * 10
    out = pixels(x)
    assert out.dtype == np.float32 and out.shape == (1, 3, 2, 2)
    assert out[0, 2, 1, 0] == pytest.approx(x[0, 1, 0, 2] / 255)
    assert pixels(np.zeros((4, 7, 7), np.uint8)).shape == (4, 1, 7, 7)
    tokens = np.ones((3, 5), np.int64)
    assert pixels(tokens) is tokens                      # token ids are left as they are


def test_mapping_partitions_become_clients(rng):
    train = [_images(rng, n, k) for k, n in enumerate([5, 8, 3])]
    test = [_images(rng, 2, k) for k in range(3)]
    data = from_partitions(train, test, num_classes=4)
    assert data.num_clients == 3 and data.sample_shape == (1, 6, 5)
    batch = data.client_data([1], "train")
    np.testing.assert_allclose(batch.x.numpy(), train[1]["image"][:, None] / 255, rtol=1e-6)
    assert batch.y.tolist() == [1] * 8 and batch.x.dtype == torch.float32
    assert data.client_data([2], "test").y.tolist() == [2, 2]


def test_a_missing_column_names_the_partition_and_its_columns(rng):
    with pytest.raises(ValueError, match=r"train\[1\] has no column 'img'.*\['image', 'label'\]"):
        from_partitions([{"img": np.zeros((2, 3, 3), np.uint8), "label": [0, 1]},
                         _images(rng, 2, 0)], x="img")


def test_hugging_face_partitions_as_flower_datasets_gives_them(rng):
    datasets = pytest.importorskip("datasets")
    whole = _images(rng, 40, 0)
    whole["label"] = rng.integers(0, 3, 40)
    table = datasets.Dataset.from_dict({"image": list(whole["image"]),
                                        "label": whole["label"].tolist()})
    parts = [table.shard(num_shards=4, index=k, contiguous=True) for k in range(4)]
    data = from_partitions(parts, num_classes=3)
    assert data.num_clients == 4
    x, y = data.client_data([3], "train").x, data.client_data([3], "train").y
    assert x.shape == (8, 1, 6, 5)                       # 10 samples, 80 % for training
    np.testing.assert_allclose(x.numpy(), whole["image"][30:38, None] / 255, rtol=1e-6)
    assert y.tolist() == whole["label"][30:38].tolist()
