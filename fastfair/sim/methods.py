"""Methods whose training loops differ from the classification rules of the engine: FedEvg
(a federated energy-based model that synthesises a server-side data set) and SuPerFed-MM / -LM
(personalisation along a low-loss line between a federated and a local model).

Each runner plays rounds like :class:`~fastfair.sim.engine.Simulation` and has its interface
(``step``, ``evaluate``, ``evaluate_metrics``, ``history``, ``eval_ids``, ``state_dict``), so
``fastfair simulate`` writes the same metrics files and plots for them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict, Optional, Tuple, Type

import numpy as np
import torch

from fastfair.sim.runner import Runner

METHODS = ("fedevg", "superfed-mm", "superfed-lm")


def options_of(cls: Type, options: Dict[str, Any], rule: str) -> Any:
    """``cls(**options)`` with unknown keys reported as a ValueError naming the rule."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"rule {rule!r} has no option {', '.join(unknown)}; its options are "
                         f"{', '.join(sorted(known))}")
    return cls(**options)


class MethodRunner(Runner):
    """A runner whose tiny per-client models train and evaluate on one torch thread (see
    :func:`torch_threads`)."""

    def step(self) -> Dict[str, Any]:
        with torch_threads(1):
            return super().step()

    def evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        with torch_threads(1):
            return self._evaluate()


@contextlib.contextmanager
def torch_threads(n: int):
    """Runs the block with ``n`` intra-op torch threads (restored after). The runners' models are
    tiny: their ops run in microseconds on one thread, while several threads contending for busy
    cores turn each into milliseconds of synchronisation."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def make_simulation(config: Any, dist: Optional[Any] = None, **kwargs: Any) -> Any:
    """The runner of ``config.rule``: FedEvg and SuPerFed have their own; every other rule runs
    in :class:`~fastfair.sim.engine.Simulation`."""
    if config.rule == "fedevg":
        from fastfair.sim.fedevg import FedEvgSimulation

        return FedEvgSimulation(config, dist, **kwargs)
    if config.rule in ("superfed-mm", "superfed-lm"):
        from fastfair.sim.superfed import SuperFedSimulation

        return SuperFedSimulation(config, dist, **kwargs)
    from fastfair.sim.engine import Simulation

    return Simulation(config, dist, **kwargs)


def check_options(rule: str, options: Dict[str, Any]) -> None:
    """Raises ValueError for an unknown option of a method (the CLI checks before writing)."""
    if rule == "fedevg":
        from fastfair.sim.fedevg import FedEvgOptions

        options_of(FedEvgOptions, options, rule)
    else:
        from fastfair.sim.superfed import SuperFedOptions

        options_of(SuperFedOptions, {**options, "mode": rule.rsplit("-", 1)[1]}, rule)


def single_process(dist: Optional[Any], rule: str) -> None:
    if dist is not None and dist.world_size > 1:
        raise ValueError(f"rule {rule!r} runs in one process; launch it without torchrun")
