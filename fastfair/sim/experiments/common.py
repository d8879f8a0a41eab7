"""What experiments (:mod:`.experiment`) and sweeps (:mod:`.sweep`) share: the checks of their
arguments, the run folder (its saved configuration and its checkpoint), the progress bar, the
callbacks, playing one runner alone, and :meth:`Orchestration.resume`.

A run folder holds the configuration file (``config.json`` of an experiment, ``sweep.json`` of a
sweep), written when the run starts, and, with ``checkpoint_every``, ``checkpoint.pt``
(:mod:`fastfair.sim.checkpoint`: plain values and tensors only, written atomically). The
checkpoint repeats the configuration it was written under, so a folder whose configuration
changed since is refused rather than continued with other settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
)

import numpy as np
import torch

from fastfair import _files as files
from fastfair.sim import checkpoint, run_files
from fastfair.sim.distributed import Distributed, check_device
from fastfair.sim.experiments import stopping
from fastfair.sim.reporting import report
from fastfair.sim.reporting.callbacks import CallbackList, RoundCallback
from fastfair.sim.rounds.registry import runner_class
from fastfair.sim.rounds.runner import Runner

CHECKPOINT = run_files.CHECKPOINT


# ---------------------------------------------------------------------------------- checks
def check_rules(rules: Union[str, Sequence[str]]) -> List[str]:
    """``rules`` as a list (one name given as a string is a list of one); raises ValueError
    unless they are distinct known rule or method names, at least one, and TypeError when
    ``rules`` is not a string or a sequence of strings."""
    if isinstance(rules, str):
        rules = [rules]
    if not isinstance(rules, Sequence) or not all(isinstance(r, str) for r in rules):
        raise TypeError(f"rules must be a rule name or a list of rule names, e.g. "
                        f"['fedavg', 'term']; got {rules!r}")
    rules = list(rules)
    for rule in rules:
        runner_class(rule)  # an unknown name: ValueError with the closest one
    if not rules or len(set(rules)) != len(rules):
        raise ValueError(f"rules (--rule, --compare) must be distinct names, at least one; got "
                         f"{rules}: name each rule once")
    return rules


def check_seeds(seeds: Union[int, Sequence[int]]) -> List[int]:
    """``seeds`` as a list (one integer is a list of one); raises ValueError unless they are
    distinct integers >= 0, at least one."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        seeds = [int(seeds)]
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, (Sequence, range, np.ndarray)):
        raise ValueError(f"seeds (--seeds) must be an integer or a list of integers >= 0, e.g. "
                         f"[0, 1, 2]; got {seeds!r}")
    seeds = [int(s) if isinstance(s, np.integer) else s for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"seeds (--seeds) must be distinct integers >= 0, at least one; got "
                         f"{seeds}")
    return seeds


def check_named(rules: Sequence[str], **named: Mapping[str, Any]) -> None:
    """Raises ValueError when one of the ``named`` mappings (e.g. ``rule_options``, ``grid``)
    has an entry for a rule that is not among ``rules``."""
    for name, mapping in named.items():
        extra = sorted(set(mapping) - set(rules))
        if extra:
            raise ValueError(f"{name} names {', '.join(map(repr, extra))}, which is not run: "
                             f"drop it from {name} or add it to the rules")


#: The keys of a grid point (or of a rule's options in a sweep) that set a field of the run's
#: configuration rather than an option of its rule: how the run is evaluated.
RUN_KEYS = ("eval_average_iterates",)


def point_config(config: Any, rule: str, seed: int, options: Mapping[str, Any]) -> Any:
    """The configuration of one run of a sweep: ``config`` with ``rule``, ``seed`` and the grid
    point's ``options``. The keys ``objective`` and ``objective.KEY`` of a point choose the
    run's client objective and its options (over ``config.objective_options``); those of
    :data:`RUN_KEYS` set that field of the run's configuration (e.g. AFL's runs evaluated on
    the average of their iterates, the other rules' on their last model); the others are
    the rule's options. So a grid spans objectives as it spans rule options:
    ``--grid aaggff-d:objective.mu=0.001,0.01`` with ``--objective proximal``."""
    prefix = "objective."
    chosen = {k[len(prefix):]: v for k, v in options.items() if k.startswith(prefix)}
    fields = {k: v for k, v in options.items() if k in RUN_KEYS}
    return dataclasses.replace(
        config, rule=rule, seed=seed, objective=options.get("objective", config.objective),
        objective_options={**config.objective_options, **chosen}, **fields,
        rule_options={k: v for k, v in options.items()
                      if k != "objective" and not k.startswith(prefix) and k not in RUN_KEYS})


def with_fairness(config: Any, fair_over: Optional[str],
                  group_prior: Optional[str]) -> Any:
    """``config`` with ``fair_over`` and ``group_prior`` where given (not None), checked as the
    configuration checks its fields."""
    given = {k: v for k, v in (("fair_over", fair_over), ("group_prior", group_prior))
             if v is not None}
    return dataclasses.replace(config, **given) if given else config


#: Most threads a run takes (``threads``, ``--threads``): far above any machine's cores, and
#: below what makes OpenMP's thread pool exhaust memory.
MAX_THREADS = 4096


def check_threads(threads: Optional[int]) -> None:
    """Raises ValueError unless ``threads`` is an integer in ``[1, MAX_THREADS]`` or None."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise ValueError(f"threads (--threads) must be an integer in [1, {MAX_THREADS}] or "
                         f"None; got {threads!r}")


def check_checkpoint_every(checkpoint_every: int, out: Any) -> None:
    """Raises ValueError unless ``checkpoint_every`` is an integer >= 0, and > 0 only with an
    output folder ``out``."""
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) \
            or checkpoint_every < 0:
        raise ValueError(f"checkpoint_every (--checkpoint-every) must be an integer >= 0; got "
                         f"{checkpoint_every!r}")
    if checkpoint_every and out is None:
        raise ValueError("checkpoint_every (--checkpoint-every) needs an output folder: pass "
                         "out= (--out)")


# ---------------------------------------------------------------------------------- the folder
def open_folder(out: Path, name: str, config: Dict[str, Any]) -> None:
    """Creates the run folder ``out`` (it must be empty or absent) and writes ``config`` into
    its file ``name``. Called when a run starts, after every check passed, so that a refused
    run leaves no folder behind."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {out} is a file, not a folder; pick a new folder")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"out folder {out} is not empty; pick a new folder or resume it")
    with files.writing(out):
        out.mkdir(parents=True, exist_ok=True)
    with files.atomic(out / name, text=True) as f:
        f.write(json.dumps(config, indent=1))


def read_config(out: Path, name: str) -> Dict[str, Any]:
    """The configuration saved in the run folder ``out`` (its file ``name``); ValueError when
    ``out`` is not such a folder, or the file is not a regular file of JSON (a named pipe in
    its place is refused, never opened for reading)."""
    if not os.path.lexists(out / name):
        raise ValueError(f"{out} holds no {name}: it is not a fastfair run folder of this kind "
                         "(an experiment's holds config.json, a sweep's sweep.json)")
    saved = files.read_json_file(out / name, "run configuration")
    if not isinstance(saved, dict):
        raise ValueError(f"{out / name} is not a valid run configuration (not an object)")
    return saved


def save_checkpoint(out: Path, config: Dict[str, Any], **state: Any) -> None:
    """Writes ``state`` with the run's saved ``config`` as the checkpoint of ``out``."""
    checkpoint.save(out / CHECKPOINT, {"config": as_saved(config), **state})


def load_checkpoint(out: Path, config: Dict[str, Any], name: str) -> Dict[str, Any]:
    """The checkpoint of ``out``, refused when it was written under another configuration than
    the one now in the folder's file ``name`` (``config``)."""
    state = checkpoint.load(out / CHECKPOINT)
    if not isinstance(state, dict) or state.get("config") != as_saved(config):
        raise ValueError(f"{out / name} changed since the checkpoint was written; restore it or "
                         "start a new run")
    return state


def as_saved(config: Dict[str, Any]) -> Dict[str, Any]:
    """``config`` as it reads back from its JSON file (tuples as lists, ...)."""
    return json.loads(json.dumps(config))


# ---------------------------------------------------------------------------------- progress
def interactive() -> bool:
    """Whether someone watches this process: standard error is a terminal, or the code runs in
    a Jupyter kernel (a notebook). A job's log file, a pipe or a test runner is not."""
    ipython = sys.modules.get("IPython")
    if ipython is not None:
        shell = ipython.get_ipython()
        if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
            return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


def check_progress(progress: Optional[bool]) -> None:
    """Raises ValueError unless ``progress`` is True, False or None (shown when
    :func:`interactive`)."""
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress must be True, False or None (shown in a terminal or a "
                         f"notebook); got {progress!r}")


def progress_bar(total: int, initial: int, desc: str, enabled: Optional[bool]) -> Any:
    """A bar over ``total`` rounds from ``initial``: ``tqdm.auto`` (a widget in a notebook, text
    on standard error elsewhere), shown when ``enabled``, or, for None, when
    :func:`interactive`."""
    from tqdm.auto import tqdm

    shown = interactive() if enabled is None else enabled
    return tqdm(total=total, initial=initial, desc=desc, unit="round", disable=not shown,
                dynamic_ncols=True, file=sys.stderr)


def advance(bar: Any, record: Dict[str, Any]) -> None:
    """Moves ``bar`` one round on, showing the mean and worst-10% accuracy of an evaluation
    round's ``record``."""
    bar.update(1)
    if "acc_mean" in record:
        bar.set_postfix(mean=f"{record['acc_mean']:.3f}", worst10=f"{record['acc_worst10']:.3f}")


# ---------------------------------------------------------------------------------- callbacks
@contextlib.contextmanager
def round_hooks(callbacks: Sequence[RoundCallback], dist: Distributed) -> Iterator[CallbackList]:
    """The ``callbacks`` as one (none but on rank 0), closed when the block ends or raises."""
    hooks = CallbackList(callbacks if dist.rank == 0 else [])
    try:
        yield hooks
    finally:
        hooks.close()


def run_summary(name: str, history: List[Dict[str, Any]], seconds: float) -> Dict[str, float]:
    """The summary row of run ``name`` (what :meth:`RoundCallback.on_run_end` receives)."""
    return report.summarize({name: history}, {name: seconds}).get(name, {})


def play_alone(runner: Runner, name: str, hooks: RoundCallback, bar: Any,
               checkpoint_every: int, save: Optional[Callable[[float], None]],
               seconds: float = 0.0) -> float:
    """Plays ``runner``'s remaining rounds, telling ``hooks`` (``name``) and ``bar``, and calls
    ``save(seconds so far)`` every ``checkpoint_every`` rounds (none for 0 or without
    ``save``). A run that diverges stops at that round (:attr:`Runner.diverged`). Returns
    the run's seconds (``seconds`` already spent before this call included); the caller
    evaluates, ends the run with its hooks and closes nothing."""
    started = time.perf_counter() - seconds
    hooks.on_run_start(name, runner.config.to_dict())
    while runner.round < runner.config.rounds and runner.diverged is None:
        record = runner.step()
        hooks.on_round(name, record)
        advance(bar, record)
        if save is not None and checkpoint_every and runner.round % checkpoint_every == 0:
            save(time.perf_counter() - started)
        stopping.check(name, runner.round, None if save is None or not checkpoint_every
                       else lambda: save(time.perf_counter() - started), runner.dist,
                       saves=bool(checkpoint_every))
    bar.close()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------- the base
_Run = TypeVar("_Run", bound="Orchestration")
_Result = TypeVar("_Result")


class Orchestration:
    """What :class:`~fastfair.sim.experiments.experiment.Experiment` and
    :class:`~fastfair.sim.experiments.sweep.Sweep` share: the checked run settings, the run
    folder and its checkpoint, and :meth:`resume`. A subclass names its configuration file
    (``CONFIG``), says what it saves there (``_saved_config``) and how to make it again from
    that (``_arguments``)."""

    CONFIG = run_files.EXPERIMENT_CONFIG
    #: Whether it runs many runs as one program, whose threads default to the idle cores.
    fills_idle_cores = False
    out: Optional[Path]
    checkpoint_every: int
    progress: Optional[bool]
    dist: Distributed
    threads: Optional[int]
    callbacks: List[RoundCallback]

    def _settings(self, device: str, out: Union[str, Path, None], checkpoint_every: int,
                  progress: Optional[bool], dist: Optional[Distributed], threads: Optional[int],
                  callbacks: Optional[Sequence[RoundCallback]]) -> None:
        """Checks and keeps the settings every orchestration takes."""
        check_threads(threads)
        check_progress(progress)
        check_checkpoint_every(checkpoint_every, out)
        self.out = None if out is None else Path(out)
        self.checkpoint_every = checkpoint_every
        self.progress = progress
        self.dist = dist or Distributed(device=torch.device(device))
        check_device(self.dist.device)
        self.threads = threads
        self.callbacks = list(callbacks or [])
        self._state: Optional[Dict[str, Any]] = None
        self._fresh = True
        self._opened = False
        self._lock: Optional[stopping.FolderLock] = None

    @classmethod
    def resume(cls: Type[_Run], out: Union[str, Path], *, progress: Optional[bool] = None,
               dist: Optional[Distributed] = None, threads: Optional[int] = 1,
               callbacks: Optional[Sequence[RoundCallback]] = None) -> _Run:
        """The run saved in ``out``, to continue from its checkpoint with ``run()``.

        Parameters
        ----------
        out
            The run folder, written with ``checkpoint_every`` > 0.
        progress, dist, threads, callbacks
            As for the constructor. The callbacks see the rounds played from the checkpoint
            on (those before it are not replayed; those after it, lost with the crash, are
            seen again).

        Returns
        -------
        The experiment or sweep; its ``run()`` gives what an uninterrupted run gives, bit for
        bit (but wall times).

        Raises
        ------
        ValueError
            ``out`` is no run folder of this kind, holds no readable checkpoint, or its
            configuration changed since the checkpoint was written.
        """
        out = Path(out)
        saved = read_config(out, cls.CONFIG)
        try:
            args, kwargs = cls._arguments(saved)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{out / cls.CONFIG} is not a valid run configuration ({exc})") \
                from None
        state = load_checkpoint(out, saved, cls.CONFIG)
        # Every orchestration's constructor takes these settings (the base has none of its own).
        run: _Run = cast(Any, cls)(*args, **kwargs, out=out, progress=progress, dist=dist,
                                   threads=threads, callbacks=callbacks)
        run._state, run._fresh = state, False
        return run

    @classmethod
    def _arguments(cls, saved: Dict[str, Any]) -> Tuple[tuple, Dict[str, Any]]:
        """The constructor's arguments (but ``out`` and the run settings of :meth:`resume`)
        from the saved configuration."""
        raise NotImplementedError

    def _saved_config(self) -> Dict[str, Any]:
        """What the configuration file holds."""
        raise NotImplementedError

    def _open(self) -> None:
        """Opens the run folder of a fresh run on rank 0, once per ``run()``: called when the
        first runner is built (its data read, its model checked) and about to play, so that a
        run refused by then leaves no folder behind."""
        if self.dist.rank == 0 and self.out is not None and self._fresh and not self._opened:
            open_folder(self.out, self.CONFIG, self._saved_config())
            if self._lock is not None:
                self._lock.acquire()
        self._opened = True

    def _owning(self, play: Callable[[], _Result]) -> _Result:
        """``play()`` (a ``run()``) holding the run folder (:class:`~.stopping.FolderLock`:
        from the start for a resumed run, from its opening for a fresh one); a run stopped by
        a signal (:class:`~.stopping.Interrupted`) learns its folder, and the folder loses the
        ``*.tmp`` files of writes cut short."""
        self._lock = (stopping.FolderLock(self.out)
                      if self.out is not None and self.dist.rank == 0 else None)
        try:
            if self._lock is not None and not self._fresh:
                self._lock.acquire()
            return play()
        except stopping.Interrupted as stop:
            stop.out = self.out
            if self.out is not None and self.dist.rank == 0:
                stopping.remove_partial_files(self.out)
            raise
        finally:
            if self._lock is not None:
                self._lock.release()

    def _start(self) -> bool:
        """Begins a ``run()`` (its folder not opened yet); whether this process writes."""
        self._opened = False
        return self.dist.rank == 0

    def _checkpoint(self, **state: Any) -> None:
        """Saves ``state`` as the run folder's checkpoint (rank 0 only)."""
        if self.dist.rank == 0:
            assert self.out is not None  # checkpoint_every > 0 needs out (check_checkpoint_every)
            save_checkpoint(self.out, self._saved_config(), **state)

    def _bar(self, total: int, initial: int, desc: str):
        """The progress bar of ``desc`` (:func:`progress_bar`: shown by rank 0 with
        ``progress``, or with None when :func:`interactive`)."""
        return progress_bar(total, initial, desc, False if self.dist.rank else self.progress)
