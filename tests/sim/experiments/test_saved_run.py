"""A run folder saved before the settings were split by layer (``saved_run/``: ``fastfair
simulate --rule fedavg --rounds 4 --clients 8 --per-round 2 --eval-every 2 --eval-clients 8
--lr-schedule cosine:min=0.01 --max-samples 60 --checkpoint-every 2``) still loads, reruns from
its ``config.json`` to the same numbers and the same file (with the settings added since at
their defaults), and resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fastfair.cli import main
from fastfair.sim import SimulationConfig, load_run
from fastfair.sim.settings import non_default_fields

SAVED = Path(__file__).parent / "saved_run"


def _without_seconds(metrics):
    return {rule: {k: v for k, v in values.items() if k not in ("seconds", "round_seconds")}
            for rule, values in metrics.items()}


def _as_saved(config_file):
    """A run's ``config.json`` as it was saved before any setting was added since: the saved
    keys in their order, each newer one checked to hold its default and left out."""
    written = json.loads(config_file.read_text())
    saved = json.loads((SAVED / "config.json").read_text())
    newer = {k: v for k, v in written["config"].items() if k not in saved["config"]}
    assert not set(newer) & set(non_default_fields(SimulationConfig.from_dict(newer))), newer
    written["config"] = {k: v for k, v in written["config"].items() if k in saved["config"]}
    return json.dumps(written, indent=1)


def test_a_saved_config_round_trips_to_the_same_text(tmp_path):
    saved = json.loads((SAVED / "config.json").read_text())
    config = SimulationConfig.from_dict(saved["config"])
    (tmp_path / "config.json").write_text(json.dumps({**saved, "config": config.to_dict()}))
    assert _as_saved(tmp_path / "config.json") == json.dumps(saved, indent=1)
    assert config.client_lr(4) < config.client_lr(1) == config.lr


def test_a_saved_folder_loads_as_its_run_returned_it(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(SAVED, folder)
    result = load_run(folder)
    assert result.summary == json.loads((SAVED / "summary.json").read_text())


def test_a_saved_config_reruns_to_the_same_numbers_and_file(tmp_path):
    out = tmp_path / "again"
    assert main(["simulate", "--config", str(SAVED / "config.json"), "--out", str(out),
                 "--quiet"]) == 0
    assert _as_saved(out / "config.json") == json.dumps(
        json.loads((SAVED / "config.json").read_text()), indent=1)
    assert _without_seconds(json.loads((out / "summary.json").read_text())) == \
        _without_seconds(json.loads((SAVED / "summary.json").read_text()))


def test_a_saved_checkpoint_resumes(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(SAVED, folder)
    assert main(["simulate", "--resume", str(folder), "--quiet"]) == 0
    assert _without_seconds(json.loads((folder / "summary.json").read_text())) == \
        _without_seconds(json.loads((SAVED / "summary.json").read_text()))
