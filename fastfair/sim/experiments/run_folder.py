"""What a run folder says about its run, read without running it: for callers (the command
line) that must know a saved run's settings before they make the run itself, e.g. the device
its processes start on. The folder's format stays the business of the experiments
(``Experiment.resume`` reads and checks it all; this reads only its configuration)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from fastfair.sim.config import SimulationConfig
from fastfair.sim.experiments.experiment import CONFIG


def saved_config(out: Union[str, Path]) -> SimulationConfig:
    """The configuration of the experiment saved in the run folder ``out``.

    Raises
    ------
    ValueError
        ``out`` holds no experiment's configuration file, or not a valid one.
    """
    path = Path(out) / CONFIG
    try:
        saved = json.loads(path.read_text())
        return SimulationConfig.from_dict(saved["config"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a valid run configuration ({exc})") from None
