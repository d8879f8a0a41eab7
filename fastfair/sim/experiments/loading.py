"""A run folder read back as the result its run returned: :func:`load_run`.

.. code-block:: python

    from fastfair.sim import load_run

    result = load_run("runs/x")           # an ExperimentResult or a SweepResult
    df = result.to_pandas()               # one row per run x round x metric

A finished folder is read from its output files; a folder whose run stopped (a crash, a time
limit) from its checkpoint (``checkpoint_every`` > 0): the runs finished by then, and the run (or
the batched runs) in progress with the rounds it had played.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from fastfair import _files as files
from fastfair.sim import run_files
from fastfair.sim.experiments import common, experiment, sweep
from fastfair.sim.experiments.run_folder import kind
from fastfair.sim.reporting import report
from fastfair.sim.reporting.stats import SweepRun, select, summarize


def load_run(folder: Union[str, Path]) -> Union[experiment.ExperimentResult, sweep.SweepResult]:
    """The result of the run saved in ``folder``, finished or checkpointed.

    Parameters
    ----------
    folder
        The ``out`` folder of an :class:`~fastfair.sim.Experiment` (``fastfair simulate
        --out``) or a :class:`~fastfair.sim.Sweep` (``fastfair sweep --out``).

    Returns
    -------
    ExperimentResult or SweepResult
        As the run's ``run()`` returned it, ``out`` set to ``folder``. From a checkpoint: the
        runs played so far (a run in progress with its rounds so far and no final accuracy,
        ``finals`` / ``final`` empty); the wall time is what the checkpoint recorded.

    Raises
    ------
    ValueError
        ``folder`` is not a run folder, or holds neither its output files (``metrics.json``)
        nor a checkpoint, or a file in it is not what its run wrote.
    """
    out = Path(folder)
    if kind(out) is sweep.Sweep:
        return _load_sweep(out)
    return _load_experiment(out)


def _state(out: Path, saved: Dict[str, Any], name: str) -> Optional[Dict[str, Any]]:
    """The checkpoint of a folder without output files (None when it has them)."""
    if (out / run_files.METRICS_JSON).exists():
        return None
    if not (out / common.CHECKPOINT).exists():
        raise ValueError(f"{out} holds neither metrics.json (a finished run) nor "
                         f"{common.CHECKPOINT} (a run checkpointed with checkpoint_every > 0): "
                         "its run stopped before it wrote either; run it again")
    return common.load_checkpoint(out, saved, name)


def _histories(out: Path) -> Dict[str, List[Dict[str, Any]]]:
    histories = files.read_json_file(out / run_files.METRICS_JSON, "metrics")
    if not isinstance(histories, dict):
        raise ValueError(f"{out / 'metrics.json'} is not an object of run histories")
    return histories


def _models(path: Path) -> Dict[str, Dict[str, torch.Tensor]]:
    return torch.load(path, weights_only=True) if path.exists() else {}


def _load_experiment(out: Path) -> experiment.ExperimentResult:
    saved = common.read_config(out, experiment.CONFIG)
    state = _state(out, saved, experiment.CONFIG)
    if state is None:
        histories = _histories(out)
        finals: Dict[str, np.ndarray] = {}
        eval_ids = np.zeros(0, dtype=np.int64)
        if (out / run_files.FINAL_ACCURACY_CSV).exists():
            with open(out / run_files.FINAL_ACCURACY_CSV, newline="") as f:
                rows = list(csv.reader(f))
            table = np.array(rows[1:], dtype=np.float64).reshape(-1, len(rows[0]))
            eval_ids = table[:, 0].astype(np.int64)
            finals = {rule: table[:, j + 1] for j, rule in enumerate(rows[0][1:])}
        summary = files.read_json_file(out / run_files.SUMMARY, "summary") \
            if (out / run_files.SUMMARY).exists() else report.summarize(histories, {})
        models = _models(out / experiment.MODELS_FILE)
    else:
        histories = dict(state.get("histories", {}))
        if state.get("current_rule") is not None:
            histories[state["current_rule"]] = list(state["current"]["history"])
        finals = {r: np.asarray(v, dtype=np.float64) for r, v in state.get("finals", {}).items()}
        eval_ids = np.asarray(state.get("eval_ids", np.zeros(0)), dtype=np.int64)
        summary = report.summarize(histories, dict(state.get("seconds", {})))
        models = dict(state.get("models", {}))
    return experiment.ExperimentResult(histories, finals, eval_ids, summary, out, models)


def _load_sweep(out: Path) -> sweep.SweepResult:
    saved = common.read_config(out, sweep.CONFIG)
    state = _state(out, saved, sweep.CONFIG)
    specs = [sweep.RunSpec(rule, tuple(sorted(options.items())), seed)
             for rule in saved["rules"]
             for options in sweep.grid_points(rule, dict(saved["rule_options"].get(rule, {})),
                                              dict(saved["grid"].get(rule, {})))
             for seed in saved["seeds"]]
    finals: Dict[str, np.ndarray] = {}
    eval_ids: Dict[int, np.ndarray] = {}
    if state is None:
        histories = _histories(out)
        seconds = _run_seconds(out / run_files.SWEEP_RUNS, specs)
        finals, eval_ids = _sweep_finals(out / sweep.FINALS_FILE)
        models = _models(out / sweep.MODELS_FILE)
        total = sum(seconds.values())
    else:
        finished = state.get("finished", {})
        histories = {name: list(run["history"]) for name, run in finished.items()}
        seconds = {name: float(run["seconds"]) for name, run in finished.items()}
        finals = {name: np.asarray(run["final"], dtype=np.float64)
                  for name, run in finished.items()}
        current = state.get("current")
        if current is not None:
            for name, run_state in zip(current["names"], current["states"]):
                histories[name] = list(run_state["history"])
        eval_ids = {int(s): np.asarray(ids, dtype=np.int64)
                    for s, ids in state.get("eval_ids", {}).items()}
        models = dict(state.get("models", {}))
        total = float(state.get("seconds", 0.0))
    runs = [SweepRun(spec.rule, dict(spec.options), spec.seed,
                     [dict(r) for r in histories[spec.name]],
                     finals.get(spec.name, np.zeros(0)), seconds.get(spec.name, 0.0))
            for spec in specs if spec.name in histories]
    metrics = tuple(saved["metrics"])
    metrics += tuple(m for m in sweep.GROUP_METRICS if m not in metrics and runs and all(
        any(m in r for r in run.history) for run in runs))
    evaluated = [run for run in runs if run.diverged_round is not None
                 or any("acc_mean" in r for r in run.history)]
    selection = select(evaluated, saved["select"]) if evaluated else {}
    rows = summarize(evaluated, metrics, saved["baseline"], selection) if evaluated else []
    return sweep.SweepResult(runs, selection, rows, metrics, saved["baseline"], total, out,
                             models, eval_ids)


def _run_seconds(path: Path, specs: List[sweep.RunSpec]) -> Dict[str, float]:
    """Each run's seconds from ``sweep_runs.csv`` (none when the file is absent)."""
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {sweep.run_name(row["point"], int(row["seed"])): float(row["seconds"])
                for row in csv.DictReader(f)}


def _sweep_finals(path: Path) -> Tuple[Dict[str, np.ndarray], Dict[int, np.ndarray]]:
    """Each run's final per-client accuracy and each seed's evaluation clients, from the
    sweep's final accuracy file (none when the file is absent: a folder written before it)."""
    finals: Dict[str, List[float]] = {}
    ids: Dict[int, List[int]] = {}
    if path.exists():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                finals.setdefault(row["run"], []).append(float(row["accuracy"]))
                seen = ids.setdefault(int(row["seed"]), [])
                if len(finals[row["run"]]) > len(seen):
                    seen.append(int(row["client"]))
    return ({name: np.array(v) for name, v in finals.items()},
            {seed: np.array(v, dtype=np.int64) for seed, v in ids.items()})

