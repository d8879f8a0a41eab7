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
import io
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from fastfair import _files as files
from fastfair.sim import checkpoint, run_files
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
        nor a checkpoint, or a file in it is not what its run wrote: not a regular file (a
        named pipe is never opened for reading), a CSV of a header alone or with a cell that
        is not a number (the message names the file, row and column), or a finished sweep's
        files holding other runs than its ``sweep.json`` lists.
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
    return checkpoint.load(path) if os.path.lexists(path) else {}


def _csv(path: Path) -> Tuple[List[str], List[Tuple[int, List[str]]]]:
    """``(header, [(line, cells)])`` of a run's CSV file; ValueError naming ``path`` when it is
    not a regular file of UTF-8 text, or a row has another number of cells than the header."""
    try:
        text = files.read_regular_file(path, "run file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start}); it is not the file its "
                         "run wrote") from None
    lines = list(csv.reader(io.StringIO(text, newline="")))
    if not lines:
        raise ValueError(f"{path} is empty; it is not the file its run wrote")
    rows = [(line, cells) for line, cells in enumerate(lines[1:], 2) if cells]
    for line, cells in rows:
        if len(cells) != len(lines[0]):
            raise ValueError(f"{path} row {line}: {len(cells)} cells under a header of "
                             f"{len(lines[0])}; it is not the file its run wrote")
    return lines[0], rows


def _number(path: Path, line: int, column: str, text: str, kind: type = float) -> Any:
    """The cell ``text`` of ``column`` as a ``kind``; ValueError naming the file, row and
    column where it is not one."""
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{path} row {line}: {column} must be {what}; got {text!r}") from None


def _columns(path: Path, header: List[str], needed: Tuple[str, ...]) -> Dict[str, int]:
    """Each of ``needed``'s position in ``header``; ValueError naming ``path`` when one is
    missing."""
    missing = [c for c in needed if c not in header]
    if missing:
        raise ValueError(f"{path} has no column {', '.join(missing)}; it is not the file its run "
                         "wrote")
    return {c: header.index(c) for c in needed}


def _load_experiment(out: Path) -> experiment.ExperimentResult:
    saved = common.read_config(out, experiment.CONFIG)
    state = _state(out, saved, experiment.CONFIG)
    if state is None:
        histories = _histories(out)
        _same_runs(out / run_files.METRICS_JSON, set(histories), set(saved.get("rules", histories)),
                   out / experiment.CONFIG)
        finals: Dict[str, np.ndarray] = {}
        eval_ids = np.zeros(0, dtype=np.int64)
        path = out / run_files.FINAL_ACCURACY_CSV
        if os.path.lexists(path):
            header, rows = _csv(path)
            _columns(path, header, ("client",))
            unknown = sorted(set(header[1:]) - set(histories))
            if header[0] != "client" or unknown:
                raise ValueError(f"{path}: its header {header} is not client and rules of "
                                 f"metrics.json ({', '.join(histories)})")
            if len(header) > 1 and not rows:
                raise ValueError(f"{path} holds a header and no rows: its run wrote a row per "
                                 "evaluated client")
            eval_ids = np.array([_number(path, line, "client", cells[0], int)
                                 for line, cells in rows], dtype=np.int64)
            finals = {rule: np.array([_number(path, line, rule, cells[j + 1])
                                      for line, cells in rows], dtype=np.float64)
                      for j, rule in enumerate(header[1:])}
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
        named = {spec.name for spec in specs}
        _same_runs(out / run_files.METRICS_JSON, set(histories), named, out / sweep.CONFIG)
        seconds = _run_seconds(out / run_files.SWEEP_RUNS, specs)
        finals, eval_ids = _sweep_finals(out / sweep.FINALS_FILE)
        _same_runs(out / sweep.FINALS_FILE, set(finals), {
            spec.name for spec in specs if not any("diverged" in r for r in histories[spec.name])
            and any("acc_mean" in r for r in histories[spec.name])}, out / sweep.CONFIG,
            absent=not os.path.lexists(out / sweep.FINALS_FILE))
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


def _same_runs(path: Path, found: set, recorded: set, record: Path, absent: bool = False) -> None:
    """Refuses ``path`` when the runs it holds (``found``) are not those the run folder's own
    ``record`` lists (``recorded``); nothing to check where the file is ``absent`` (a folder
    written before it existed)."""
    if absent or found == recorded:
        return
    lacking, foreign = sorted(recorded - found), sorted(found - recorded)
    detail = "; ".join(part for part in (
        f"lacks {', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''}" if lacking else "",
        f"holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}, not of the sweep"
        if foreign else "") if part)
    raise ValueError(f"{path} disagrees with {record}: it {detail}; the folder was changed "
                     "after its run: run it again")


def _run_seconds(path: Path, specs: List[sweep.RunSpec]) -> Dict[str, float]:
    """Each run's seconds from ``sweep_runs.csv`` (none when the file is absent)."""
    if not os.path.lexists(path):
        return {}
    header, rows = _csv(path)
    at = _columns(path, header, ("point", "seed", "seconds"))
    seconds = {sweep.run_name(cells[at["point"]], _number(path, line, "seed", cells[at["seed"]],
                                                          int)):
               _number(path, line, "seconds", cells[at["seconds"]]) for line, cells in rows}
    _same_runs(path, set(seconds), {spec.name for spec in specs}, path.with_name(sweep.CONFIG))
    return seconds


def _sweep_finals(path: Path) -> Tuple[Dict[str, np.ndarray], Dict[int, np.ndarray]]:
    """Each run's final per-client accuracy and each seed's evaluation clients, from the
    sweep's final accuracy file (none when the file is absent: a folder written before it)."""
    finals: Dict[str, List[float]] = {}
    ids: Dict[int, List[int]] = {}
    if os.path.lexists(path):
        header, rows = _csv(path)
        at = _columns(path, header, ("run", "seed", "client", "accuracy"))
        for line, cells in rows:
            run = cells[at["run"]]
            finals.setdefault(run, []).append(
                _number(path, line, "accuracy", cells[at["accuracy"]]))
            seen = ids.setdefault(_number(path, line, "seed", cells[at["seed"]], int), [])
            if len(finals[run]) > len(seen):
                seen.append(_number(path, line, "client", cells[at["client"]], int))
    return ({name: np.array(v) for name, v in finals.items()},
            {seed: np.array(v, dtype=np.int64) for seed, v in ids.items()})

