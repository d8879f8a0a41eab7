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
import time
from typing import Any, Dict, List, Optional, Tuple, Type

import numpy as np
import torch

from fastfair.sim.data import ClientBatch, FederatedDataset
from fastfair.sim.metrics import fairness_metrics

METHODS = ("fedevg", "superfed-mm", "superfed-lm")


def options_of(cls: Type, options: Dict[str, Any], rule: str) -> Any:
    """``cls(**options)`` with unknown keys reported as a ValueError naming the rule."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"rule {rule!r} has no option {', '.join(unknown)}; its options are "
                         f"{', '.join(sorted(known))}")
    return cls(**options)


class MethodRunner:
    """Bookkeeping shared by the runners: round records, evaluation rounds, checkpoints."""

    version = 1
    config: Any
    history: List[Dict[str, Any]]
    round: int
    eval_ids: np.ndarray

    def _pick_eval_clients(self, dataset: FederatedDataset) -> ClientBatch:
        """Chooses the evaluation clients (the engine's choice, less those without test data, so
        that ``eval_ids`` lines up with what :meth:`evaluate` returns); returns their test data."""
        cfg = self.config
        rng = np.random.default_rng([cfg.seed, 0xE7A1])
        k = min(cfg.eval_clients, cfg.clients)
        ids = np.arange(cfg.clients) if k == cfg.clients else np.sort(
            rng.choice(cfg.clients, size=k, replace=False))
        ids = ids[dataset.client_data(ids, "test").counts > 0]
        if ids.size == 0:
            raise ValueError("no evaluation client has test data; raise --eval-clients")
        self.eval_ids = ids
        return dataset.client_data(ids, "test")

    def _finish(self, t: int, record: Dict[str, Any], started: float) -> Dict[str, Any]:
        self.round = t
        record = {"round": t, **record}
        if t % self.config.eval_every == 0 or t == self.config.rounds:
            record.update(self.evaluate_metrics())
        record["seconds"] = time.perf_counter() - started
        self.history.append(record)
        return record

    def evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(accuracy [E], loss [E], test counts [E])`` per evaluation client."""
        with torch_threads(1):
            return self._evaluate()

    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def extra_metrics(self) -> Dict[str, float]:
        """Method-specific numbers recorded beside the accuracy summary."""
        return {}

    def evaluate_metrics(self) -> Dict[str, float]:
        acc, loss, counts = self.evaluate()
        out = {f"acc_{k}": v for k, v in fairness_metrics(acc, weights=counts).items()}
        out["test_loss"] = float(np.dot(loss, counts) / counts.sum())
        out.update(self.extra_metrics())
        return out

    def _state(self) -> Dict[str, Any]:
        raise NotImplementedError

    def _load(self, state: Dict[str, Any]) -> None:
        raise NotImplementedError

    def state_dict(self) -> Dict[str, Any]:
        return {"version": self.version, "round": self.round,
                "history": [dict(r) for r in self.history], **self._state()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("version") != self.version:
            raise ValueError(f"checkpoint version {state.get('version')!r} is not {self.version}")
        self._load(state)
        self.round = int(state["round"])
        self.history = [dict(r) for r in state["history"]]


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
