"""A run folder by what it holds: an experiment's (``config.json``) or a sweep's
(``sweep.json``). For callers (the command line) that continue a folder without knowing which it
is, or must know a saved run's settings before they make the run itself (the device its processes
start on). The folder's format stays the business of :class:`~.experiment.Experiment` and
:class:`~.sweep.Sweep`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Type, Union

from fastfair.sim.config import SimulationConfig
from fastfair.sim.experiments.common import Orchestration, read_config
from fastfair.sim.experiments.experiment import Experiment
from fastfair.sim.experiments.sweep import Sweep


def kind(out: Union[str, Path]) -> Type[Orchestration]:
    """:class:`Sweep` when ``out`` holds a sweep's configuration file, else
    :class:`Experiment` (whose :meth:`~.common.Orchestration.resume` says what is wrong with a
    folder that is neither)."""
    return Sweep if os.path.lexists(Path(out) / Sweep.CONFIG) else Experiment


def resume(out: Union[str, Path], **options: Any) -> Orchestration:
    """The experiment or sweep saved in ``out``, to continue with ``run()``; ``options`` as
    :meth:`~.common.Orchestration.resume` takes them (progress, dist, threads, callbacks)."""
    return kind(out).resume(out, **options)


def saved_config(out: Union[str, Path]) -> SimulationConfig:
    """The configuration (the base one, for a sweep) of the run saved in ``out``.

    Raises
    ------
    ValueError
        ``out`` holds no run's configuration file, or not a valid one.
    """
    out = Path(out)
    name = kind(out).CONFIG
    try:
        return SimulationConfig.from_dict(read_config(out, name)["config"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{out / name} is not a valid run configuration ({exc})") from None
