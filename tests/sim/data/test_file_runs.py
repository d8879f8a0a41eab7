"""``fastfair simulate --dataset NAME --data-dir DIR`` and the Python API on every data set read
from files, with the data set's default model, on small files in the exact formats."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fastfair.cli import main
from fastfair.sim import Experiment, SimulationConfig
from fastfair.sim.data.catalog import open_files
from fastfair.sim.data.registry import DATASETS
from fastfair.sim.rounds.build import model_for
from tests.helpers import sim_files as sf

TINY = ["--rounds", "2", "--per-round", "2", "--eval-every", "1", "--batch-size", "16",
        "--quiet"]


def _write(name, root, rng):
    """Files of data set ``name`` in ``root``; returns the CLI options that pick its clients."""
    if name == "femnist":
        sf.write_leaf(root, sf.split_users(rng, sf.femnist_users(rng, [9, 4, 12, 6])))
    elif name == "shakespeare":
        sf.write_leaf(root, sf.split_users(rng, sf.shakespeare_users(rng, [5, 3, 6])))
    elif name == "sent140":
        sf.write_leaf(root, sf.split_users(rng, sf.sent140_users(rng, [6, 4, 9, 3])))
    elif name == "celeba":
        images = root / "raw" / "img_align_celeba"
        sf.write_leaf(root, sf.split_users(rng, sf.celeba_users(rng, [4, 3, 5], images)))
    elif name in ("mnist", "fmnist"):
        sf.write_mnist(root, "MNIST" if name == "mnist" else "FashionMNIST", rng, 120, 40)
        return ["--clients", "4", "--partition", "iid"]
    elif name in ("cifar10", "cifar100"):
        sf.write_cifar(root, rng, classes=10 if name == "cifar10" else 100, n_batch=20)
        return ["--clients", "4", "--partition", "pathological", "--classes-per-client", "3"]
    elif name == "image-folder":
        sf.write_image_folder(root, rng, {"cat": 12, "dog": 9, "fox": 10})
        return ["--clients", "4", "--partition", "iid"]
    elif name == "adult":
        sf.write_adult(root, rng, 40, 16)
        return ["--partition", "column:education=Doctorate"]
    else:
        sf.write_npz_clients(root, rng, [8, 5, 9, 6])
    return []


FILE_SETS = [n for n, s in DATASETS.items() if s.family != "generated"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Decoded images are cached in the test's own folder."""
    monkeypatch.setenv("FASTFAIR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", FILE_SETS)
def test_simulate_runs_every_data_set_with_its_default_model(tmp_path, name):
    rng = np.random.default_rng(3)
    data = tmp_path / "data"
    extra = _write(name, data, rng)
    out = tmp_path / "run"
    assert main(["simulate", "--dataset", name, "--data-dir", str(data), "--compare",
                 "fedavg,aaggff-d", "--out", str(out), *TINY, *extra]) == 0
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["dataset"] == name and saved["model"] is None
    spec = DATASETS[name]
    clients = saved["clients"]
    if spec.natural_split:       # every user by default
        assert clients == len(open_files(name, str(data)).users if name != "npz-clients"
                              else list(data.glob("*.npz")))
    rows = (out / "final_accuracy.csv").read_text().splitlines()
    assert rows[0] == "client,fedavg,aaggff-d" and 1 < len(rows) <= clients + 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert [r["round"] for r in metrics["aaggff-d"]] == [1, 2]
    assert all(np.isfinite(r["test_loss"]) for r in metrics["fedavg"])
    # The saved global models load into the data set's default model.
    models = torch.load(out / "models.pt", weights_only=True)
    config = SimulationConfig(**{**saved, "rule": "fedavg", "rule_options": {}})
    dataset = open_files(name, str(data), clients, partition=config.partition,
                         dirichlet_alpha=config.dirichlet_alpha,
                         classes_per_client=config.classes_per_client)
    model = model_for(config, dataset)
    module = getattr(model, "module", None)
    if module is not None:
        module.load_state_dict(models["aaggff-d"])
        assert not torch.equal(torch.cat([v.float().reshape(-1) for v in
                                          models["fedavg"].values()]), model.init(None))


@pytest.mark.parametrize("model", [None, "mlp"])
def test_a_run_names_the_default_model_it_trains(tmp_path, capsys, model):
    data = tmp_path / "data"
    extra = _write("adult", data, np.random.default_rng(2))
    chosen = ["--model", model] if model else []
    assert main(["simulate", "--rule", "fedavg", "--dataset", "adult", "--data-dir", str(data),
                 "--rounds", "1", "--per-round", "2", "--out", str(tmp_path / "run"),
                 *extra, *chosen]) == 0
    err = capsys.readouterr().err
    note = "adult: training the default model 'logreg' (choose one with --model)"
    assert (note in err) == (model is None)
    assert "K=2 m=2" in err


def test_python_api_writes_what_the_cli_writes_on_files(tmp_path):
    rng = np.random.default_rng(5)
    data = tmp_path / "data"
    _write("femnist", data, rng)
    assert main(["simulate", "--dataset", "femnist", "--data-dir", str(data), "--compare",
                 "fedavg,fedmaba", "--out", str(tmp_path / "cli"), *TINY]) == 0
    config = SimulationConfig(dataset="femnist", data_dir=str(data), clients=4, rounds=2,
                              per_round=2, eval_every=1, batch_size=16)
    result = Experiment(config, ["fedavg", "fedmaba"], out=tmp_path / "py").run()
    cli, py = tmp_path / "cli", tmp_path / "py"
    assert (cli / "final_accuracy.csv").read_text() == (py / "final_accuracy.csv").read_text()
    assert set(result.models) == {"fedavg", "fedmaba"}
    saved = torch.load(cli / "models.pt", weights_only=True)
    for rule in result.models:
        for key, value in result.models[rule].items():
            assert torch.equal(saved[rule][key], value)


@pytest.mark.parametrize("argv,message", [
    (["--dataset", "femnist"], "data_dir (--data-dir) must be an existing folder"),
    (["--dataset", "femnist", "--data-dir", "DATA", "--download"], "download = True has no effect"),
    (["--dataset", "femnist", "--data-dir", "DATA", "--partition", "iid"],
     "partition = 'iid' has no effect"),
    (["--dataset", "femnist", "--data-dir", "DATA", "--model", "char-lstm"],
     "'char-lstm' cannot take femnist's samples"),
    (["--dataset", "femnist", "--data-dir", "DATA", "--clients", "9"],
     "clients (9) exceeds the 4 users of femnist"),
    (["--dataset", "femnist", "--data-dir", "DATA", "--hidden", "8"], "hidden = 8 has no effect"),
    (["--dataset", "synthetic", "--data-dir", "DATA"], "data_dir = "),
    (["--dataset", "mnist", "--data-dir", "DATA", "--clients", "4"], "pass --download or see"),
])
def test_data_options_are_honoured_or_refused_before_writing(tmp_path, capsys, argv, message):
    data = tmp_path / "data"
    _write("femnist", data, np.random.default_rng(0))
    out = tmp_path / "run"
    argv = [str(data) if a == "DATA" else a for a in argv]
    assert main(["simulate", "--rule", "fedavg", "--per-round", "2", *argv, "--out", str(out),
                 "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
