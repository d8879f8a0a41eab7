"""The layout of ``models.pt`` that docs/data.md documents ("What `models.pt` holds") is what
every model saves: the same keys, in order, with the same shapes; and a run's ``models.pt``
loads with it."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from fastfair.sim import Experiment, SimulationConfig
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.models.catalog import build_model
from tests.helpers import ROOT
from tests.helpers import sim_files as sf

ROW = re.compile(r"^\| ([\w-]+) \| `([\w.]+)` \| `\[([^\]]*)\]` \|$", re.M)
#: The sizes of the symbols of the documented shapes, per model: F features, C classes,
#: H hidden units, V vocabulary; and the data set each model is built for.
CASES = {"logreg": ((108,), 2, None, ()), "mlp": ((108,), 2, None, ()),
         "femnist-cnn": ((1, 28, 28), 62, None, ()), "cifar-cnn": ((3, 32, 32), 10, None, ()),
         "flgo-cifar-cnn": ((3, 32, 32), 10, None, ()),
         "char-lstm": ((80,), 81, 81, (80,)), "sent140-lstm": ((25,), 2, 16384, ())}


def documented():
    text = (ROOT / "docs" / "data.md").read_text()
    section = text.split("## What `models.pt` holds", 1)[1].split("\n## ", 1)[0]
    table = {}
    for model, key, shape in ROW.findall(section):
        table.setdefault(model, []).append((key, shape))
    return table


def _dataset(shape, classes, vocab, labels) -> FederatedDataset:
    data = FederatedDataset()
    data.sample_shape, data.num_classes, data.vocab_size = shape, classes, vocab
    data.label_shape, data.num_features, data.num_clients = labels, int(np.prod(shape)), 1
    return data


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_documented_model_saves_the_documented_keys_and_shapes(name):
    shape, classes, vocab, labels = CASES[name]
    model = build_model(name, _dataset(shape, classes, vocab, labels))
    params = model.init(torch.Generator().manual_seed(0)) if name in ("logreg", "mlp") \
        else model.init(None)
    saved = model.state_dict(params)
    sizes = {"F": int(np.prod(shape)), "C": classes, "H": 64, "V": vocab}
    expected = [(key, tuple(int(sizes.get(d.strip(), d)) for d in dims.split(",") if d.strip()))
                for key, dims in documented()[name]]
    assert [(k, tuple(v.shape)) for k, v in saved.items()] == expected
    assert all(v.dtype == torch.float32 for v in saved.values())


def test_a_runs_models_pt_has_the_documented_logreg_layout(tmp_path, rng):
    sf.write_adult(tmp_path / "adult", rng, 40, 16)
    config = SimulationConfig(dataset="adult", data_dir=str(tmp_path / "adult"), clients=2,
                              per_round=2, rounds=2, partition="column:education=Doctorate")
    Experiment(config, ["fedavg"], out=tmp_path / "run").run()
    saved = torch.load(tmp_path / "run" / "models.pt", weights_only=True)["fedavg"]
    features = 6 + 3 + 4 + 1 + 2 + 1 + 1 + 2 + 1    # numeric, then each column's values
    assert list(saved) == ["W", "b"]
    assert tuple(saved["W"].shape) == (features, 2) and tuple(saved["b"].shape) == (2,)
