# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion completes `fastfair` with it)
"""``fastfair`` command line. ``fastfair simulate`` runs federated simulations of any rule (or
several, side by side) and writes metrics, plots and checkpoints: a thin layer over
:class:`fastfair.sim.Experiment`. ``fastfair sweep`` runs rules x seeds x hyperparameter grids as
one batched program and reports mean, confidence intervals and paired differences (over
:class:`fastfair.sim.Sweep`). ``fastfair rules`` lists the rules and their options."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Set, cast

from fastfair.cli_options import (
    apply_file,
    config_values,
    file_by_rule,
    parse_grid,
    parse_rule_options,
)
from fastfair.cli_parser import DEFAULT_RULES, DEFAULT_SEEDS, build_parser
from fastfair.sim import run_files

#: The packages of the ``sim`` extra that ``simulate`` and ``sweep`` import; without one, the
#: command says what to install (``help``, ``rules`` and the option checks need NumPy alone).
SIM_PACKAGES = ("torch", "sklearn", "scipy", "tqdm", "matplotlib")
#: The commands' messages (banner, files written, errors); their results go to standard output.
LOG = logging.getLogger("fastfair")


def _fresh_folder(command: str) -> Path:
    base = Path("fastfair-runs") / time.strftime(f"{command}-%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _rules(args: argparse.Namespace) -> List[str]:
    """The rules of ``--rule`` / ``--compare`` (the default comparison when neither is given)."""
    from fastfair.sim.reporting.report import parse_rules

    if getattr(args, "rule", None) and args.compare:
        raise ValueError("pass --rule or --compare, not both")
    if getattr(args, "rule", None):
        return [args.rule]
    return list(parse_rules(args.compare or ",".join(DEFAULT_RULES)))


def _seeds(args: argparse.Namespace) -> List[int]:
    """``--seeds`` (or simulate's ``--seed``; the default comparison's seeds when simulate gets
    neither and no rules)."""
    if args.command == "simulate" and args.seed is not None:
        if args.seeds is not None:
            raise ValueError("pass --seed or --seeds, not both")
        return [args.seed]
    text = args.seeds or ("0" if args.rule or args.compare else DEFAULT_SEEDS)
    try:
        seeds = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--seeds expects comma-separated integers; got {text!r}") from None
    if not seeds:
        raise ValueError("--seeds needs at least one seed")
    return seeds


def _config(args: argparse.Namespace, rules: Sequence[str], seed: int) -> Any:
    """The :class:`~fastfair.sim.config.SimulationConfig` of the run options."""
    from fastfair.methods import METHODS
    from fastfair.sim.config import SimulationConfig

    values = config_values(args, SimulationConfig)
    values["dataset"] = args.dataset or ("digits" if set(rules) & set(METHODS)
                                         else SimulationConfig().dataset)
    values["clients"] = _clients(args, values["dataset"])
    try:
        return SimulationConfig(**values, seed=seed)
    except (ValueError, TypeError) as exc:
        if getattr(args, "file", None) is None:
            raise
        raise type(exc)(f"{exc} (options of {args.file.path} and the command line)") from None


def _experiment(args: argparse.Namespace, dist: Any) -> Any:
    """The experiment the options describe (or the one saved in ``--resume DIR``): an
    :class:`~fastfair.sim.Experiment` for one seed, a :class:`~fastfair.sim.Sweep` for several
    (and for ``fastfair sweep``)."""
    from fastfair.sim.experiments import Experiment, Sweep, run_folder
    from fastfair.sim.process import idle_cores

    progress = False if args.quiet else None  # None: a bar in a terminal, none in a log file
    if args.resume is not None:
        sweep = run_folder.kind(args.resume).fills_idle_cores
        return run_folder.resume(args.resume, progress=progress, dist=dist,
                                 threads=args.threads or idle_cores() if sweep else args.threads,
                                 callbacks=_callbacks(args, args.resume))
    rules, seeds = _rules(args), _seeds(args)
    options = parse_rule_options(args.rule_option, rules,
                                 file_by_rule(args, "rule_options", rules))
    grid = parse_grid(getattr(args, "grid", []), rules, file_by_rule(args, "grid", rules))
    out = args.out or _fresh_folder(args.command)
    if args.command == "simulate" and len(seeds) == 1 and not grid:
        return Experiment(_config(args, rules, seeds[0]), rules, options, out=out,
                          checkpoint_every=args.checkpoint_every, progress=progress,
                          dist=dist, threads=args.threads, callbacks=_callbacks(args, out))
    baseline = getattr(args, "baseline", "fedavg") or None
    run = getattr(args, "file", None)  # its metrics, batched and base seed: a sweep folder's
    base_seed = run.base_seed if run and run.base_seed is not None \
        and not {"seed", "seeds"} & getattr(args, "typed", set()) else seeds[0]
    return Sweep(_config(args, rules, base_seed), rules, seeds, grid,
                 {r: o for r, o in options.items() if o},
                 baseline=baseline if baseline in rules or args.command == "sweep" else None,
                 select=getattr(args, "select", "acc_mean"), out=out,
                 checkpoint_every=args.checkpoint_every, progress=progress,
                 callbacks=_callbacks(args, out), dist=dist,
                 threads=args.threads or idle_cores(),
                 **{k: v for k, v in (run.run if run else {}).items()
                    if k in ("metrics", "batched")})


def _callbacks(args: argparse.Namespace, out: Path) -> List[Any]:
    """The loggers of ``--log`` writing into ``out``, after a line per evaluation round at the
    debug level."""
    from fastfair.sim.reporting.callbacks import LoggingCallback, build_callbacks

    names = [name.strip() for name in args.log.split(",") if name.strip()]
    return [LoggingCallback(logging.DEBUG), *build_callbacks(names, out)]


def _clients(args: argparse.Namespace, dataset: str) -> int:
    """``--clients``, or by default every user of a data set with its own clients (read from
    the files' headers), the clients adult's ``column:`` partitions make, and the
    configuration's default otherwise."""
    from fastfair.sim.config import SimulationConfig
    from fastfair.sim.data import DATASETS, count_clients

    if args.clients is not None:
        return args.clients
    partition = str(getattr(args, "partition", None) or "dirichlet")
    if args.data_dir is not None and (DATASETS[dataset].natural_split
                                      or (dataset == "adult" and partition.startswith("column:"))):
        return count_clients(dataset, args.data_dir, partition)
    return SimulationConfig().clients


def simulate(args: argparse.Namespace) -> int:
    """``fastfair simulate`` and ``fastfair sweep``: runs the experiment (or sweep) and prints its
    summary table."""
    from fastfair.sim.names import default_model_note

    others = sorted(getattr(args, "typed", set()) - RESUME_COMPANIONS)
    if args.resume is not None and others:
        flags = ", ".join("--" + name.replace("_", "-") for name in others)
        raise ValueError(f"--resume continues the saved run with its saved options; drop "
                         f"{flags} (to change them, start a new run)")
    if getattr(args, "config", None) is not None:
        from fastfair.sim.config import SimulationConfig

        apply_file(args, args.config, getattr(args, "typed", set()), SimulationConfig)
    try:
        from tqdm.contrib.logging import logging_redirect_tqdm

        from fastfair.sim.distributed import Distributed
    except ModuleNotFoundError:
        if args.resume is None:  # the options are checked all the same, with NumPy alone
            _config(args, _rules(args), _seeds(args)[0])
        raise
    dist = Distributed.from_environment(_device(args))
    try:
        experiment = _experiment(args, dist)
        lead = dist.rank == 0
        if lead:
            b = experiment.base
            seeds = getattr(experiment, "seeds", [b.seed])
            LOG.info("fastfair %s: %s | K=%d m=%d rounds=%d seeds=%s dataset=%s | writing to "
                     "%s", args.command, ", ".join(experiment.rules), b.clients, b.per_round,
                     b.rounds, ",".join(map(str, seeds)), b.dataset, experiment.out)
            note = default_model_note(b.dataset, b.model)
            if note:
                LOG.info("%s", note)
        # Messages during the rounds go through tqdm, so they do not break its progress bars.
        with logging_redirect_tqdm(loggers=[LOG]):
            result = experiment.run()
        if lead:
            from fastfair.sim.experiments.sweep_result import SweepResult
            from fastfair.sim.reporting.sweep_report import terminal_width

            print(result.table(terminal_width()) if isinstance(result, SweepResult)
                  else result.table(), flush=True)
            files = sorted(p.name for p in result.out.iterdir()
                           if p.name not in (run_files.EXPERIMENT_CONFIG, run_files.SWEEP_CONFIG))
            LOG.info("wrote %s/%s", result.out, ", ".join(files))
        return 0
    finally:
        dist.close()


def _device(args: argparse.Namespace) -> str:
    """The device of the run: ``--device``, or the saved run's when resuming."""
    from fastfair.sim.config import DEVICE
    from fastfair.sim.experiments.run_folder import saved_config

    if getattr(args, "resume", None) is None:
        if not DEVICE.fullmatch(args.device):  # checked before torch reads it as a device
            raise ValueError(f"device (--device) must be cpu, cuda or cuda:N; got "
                             f"{args.device!r}")
        return args.device
    try:
        return saved_config(args.resume).device
    except ValueError:
        return "cpu"  # Experiment.resume reports what is wrong with the folder


def _typed(argv: Optional[Sequence[str]]) -> Set[str]:
    """The destinations of the options ``argv`` gives, whatever their values (an option typed
    at its default value counts: it is what the user asked for)."""
    parser = build_parser()
    parsers = [parser] + [sub for action in cast(Any, parser._subparsers)._group_actions
                          for sub in action.choices.values()]  # build_parser() made them
    for each in parsers:
        each._defaults.clear()
        for action in each._actions:
            action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv)))


#: What ``--resume`` may be given with: how the run is executed and reported, not what it runs.
RESUME_COMPANIONS = {"command", "resume", "quiet", "threads", "log", "log_level"}


def complete(parser: argparse.ArgumentParser) -> None:
    """Answers the shell's completion request and exits, when the shell made one
    (argcomplete's ``_ARGCOMPLETE`` in the environment, from ``eval "$(register-python-argcomplete
    fastfair)"``) and argcomplete is installed; does nothing otherwise."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ModuleNotFoundError:
        return
    argcomplete.autocomplete(parser)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``fastfair`` console script and ``python -m fastfair``."""
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    args.typed = _typed(argv)
    quiet = getattr(args, "quiet", False)
    with _console_logging(getattr(args, "log_level", None) or ("warning" if quiet else "info")):
        try:
            if args.command in ("simulate", "sweep", "reproduce"):
                from fastfair.reproduce.command import main as reproduce
                from fastfair.sim.experiments.stopping import Interrupted, graceful_signals

                try:
                    with graceful_signals():
                        if args.command == "reproduce":
                            return reproduce(args, list(sys.argv[1:] if argv is None else argv))
                        return simulate(args)
                except Interrupted as stop:  # SIGINT/SIGTERM: stopped at a round boundary
                    LOG.error("fastfair %s: %s", args.command, stop.describe(args.command))
                    return stop.exit_code
            if args.command == "report":
                from fastfair.sim.experiments.html_report import write_report

                LOG.info("wrote %s", write_report(args.folder, args.out))
                return 0
            if args.command == "rules":
                from fastfair.aggregators.registry import describe
                from fastfair.methods import METHODS

                print(describe())
                print("methods (their options: --rule-option; see fastfair.methods):")
                print("  " + ", ".join(METHODS))
                return 0
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").partition(".")[0]
            if missing not in SIM_PACKAGES:
                raise
            LOG.error("fastfair %s: error: the simulator's packages are not all installed (%s "
                      "is missing): pip install 'fastfair[sim]'", args.command, missing)
            return 2
        except (ValueError, TypeError, OSError, MemoryError) as exc:
            # OSError: a full disk names the file; MemoryError: NumPy's names the size asked.
            LOG.error("fastfair %s: error: %s", args.command, error_text(exc))
            return 2
    return 1


def error_text(exc: BaseException) -> str:
    """The message of a refusal, never empty: an exception raised without one (a
    ``MemoryError`` from a memory limit, say) is described by its kind and the fix."""
    text = str(exc).strip()
    if text:
        return text
    if isinstance(exc, MemoryError):
        return ("out of memory (MemoryError: the machine's memory or a limit such as ulimit -v "
                "was reached); lower clients, per_round or batch_size, or raise the limit")
    return f"{type(exc).__name__} without a message"


@contextlib.contextmanager
def _console_logging(level: str) -> Iterator[None]:
    """While the command runs, the ``fastfair`` loggers' messages at ``level`` (one of
    :data:`LOG_LEVELS`) and above go to standard error as plain lines; the library itself
    attaches no handler, so this is the one place that does (removed again after, for callers
    of :func:`main` in a longer-lived process)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    before = LOG.level
    LOG.addHandler(handler)
    LOG.setLevel(level.upper())
    try:
        yield
    finally:
        LOG.removeHandler(handler)
        LOG.setLevel(before)
