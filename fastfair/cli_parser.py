"""The ``fastfair`` command line's parser (:func:`build_parser`): its commands and their
options, made from :class:`~fastfair.sim.config.SimulationConfig`'s fields
(:mod:`fastfair.cli_options`) and the options written here. Builds with NumPy alone, so
``fastfair --help`` needs no torch."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Callable, List, Sequence

from fastfair.cli_options import ArgumentParser, HelpFormatter, add_config_options

DEFAULT_RULES = ("fedavg", "fairavg", "aaggff-d", "fedmaba")
#: The seeds of the default comparison (no --rule, --compare, --seed or --seeds given).
DEFAULT_SEEDS = "0,1,2"
LOG_LEVELS = ("debug", "info", "warning", "error")


#: The top of ``fastfair --help`` (the module docstring carries reST roles for the API docs).
DESCRIPTION = ("fastfair simulate runs federated simulations of one rule or several side by side "
               "and writes metrics, plots and checkpoints; fastfair sweep runs rules x seeds x "
               "hyperparameter grids as one batched program and reports means, confidence "
               "intervals and paired differences; fastfair rules lists the rules and options; "
               "fastfair reproduce regenerates a seed paper's table on its data.")


def comma_list_completer(names: Sequence[str]) -> Callable[..., List[str]]:
    """A shell completer (argcomplete's protocol) of a comma list of ``names``: completes the
    item after the last comma, leaving out those already listed (``fedavg,aag`` ->
    ``fedavg,aaggff-d``, ``fedavg,aaggff-s``)."""
    def complete(prefix: str, **_: Any) -> List[str]:
        head, comma, last = prefix.rpartition(",")
        listed = set(head.split(",")) if comma else set()
        return [head + comma + name for name in names
                if name.startswith(last) and name not in listed]
    return complete


def _version() -> str:
    from fastfair import __version__

    return __version__


def _banner() -> str:
    """What was compiled (``fastfair.build_info()``), for the end of ``--help``."""
    from fastfair import build_info

    info = build_info()
    cuda = f"CUDA {info['cuda_archs']}" if info["cuda"] else "no CUDA"
    return (f"fastfair {info['version']} (build {info.get('build_id', '?')}): CPU kernels for "
            f"{info['cpu_isa']}, OpenMP {'on' if info['openmp'] else 'off'}, {cuda}, "
            f"{info['compiler']}.")


def build_parser() -> argparse.ArgumentParser:
    """The ``fastfair`` argument parser: its commands ``simulate``, ``sweep``, ``rules``,
    ``report`` and ``reproduce``, each option with its help (built with NumPy alone)."""
    from fastfair.aggregators.names import RULE_NAMES
    from fastfair.methods import METHODS

    parser = ArgumentParser(
        prog="fastfair", description=DESCRIPTION, epilog=_banner(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fastfair {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "simulate", help="run a federated simulation",
        description="Runs federated rounds of one or several aggregation rules on identical data, "
                    "client samples and seeds, and writes metrics (CSV, JSON), the config and PNG "
                    "plots into --out. With no options: " + ", ".join(DEFAULT_RULES) +
                    f" on Synthetic(1, 1) over seeds {DEFAULT_SEEDS} (as fastfair sweep).",
        formatter_class=HelpFormatter)
    g = p.add_argument_group("rules")
    g.add_argument("--rule", choices=list(RULE_NAMES) + list(METHODS),
                   help="run one rule (or method) (default: --compare's rules)")
    rules = comma_list_completer([*RULE_NAMES, *METHODS])
    g.add_argument("--compare", metavar="R1,R2,...",
                   help=f"run several rules side by side (default: {','.join(DEFAULT_RULES)})"
                   ).completer = rules  # type: ignore[attr-defined]  # argcomplete reads it
    g.add_argument("--rule-option", action="append", default=[], metavar="[RULE:]KEY=VALUE",
                   help="a rule hyperparameter: RULE:KEY=VALUE for one rule (aaggff-d:cdf=frechet),"
                        " KEY=VALUE for every rule run (repeatable)")
    g.add_argument("--seed", type=int, help=f"one seed (default {_field_default('seed')}, or the "
                                             f"default comparison's seeds {DEFAULT_SEEDS})")
    g.add_argument("--seeds", metavar="S1,S2,...",
                   help="several seeds: the rules run as a sweep (mean and 95%% CI over seeds) "
                        "(default: --seed's one)")
    _run_options(p)
    checkpoint_options(p)
    p = sub.add_parser(
        "sweep", help="run rules x seeds x hyperparameter grids as one batched program",
        description="Runs every rule at every grid point with every seed, trained together as one "
                    "batched program (each run equal to the same run alone), chooses each rule's "
                    "grid point on a validation split of the clients' training data, and reports "
                    "mean and 95% CI over seeds and differences paired on seeds against "
                    "--baseline: a table, CSV/JSON and plots in --out.",
        formatter_class=HelpFormatter)
    g = p.add_argument_group("runs")
    g.add_argument("--compare", metavar="R1,R2,...", default=",".join(DEFAULT_RULES),
                   help="the rules (and methods)"
                   ).completer = rules  # type: ignore[attr-defined]  # argcomplete reads it
    g.add_argument("--seeds", metavar="S1,S2,...", default=DEFAULT_SEEDS,
                   help="the seeds, each a run of every rule at every grid point")
    g.add_argument("--rule-option", action="append", default=[], metavar="[RULE:]KEY=VALUE",
                   help="a rule hyperparameter fixed for every run (repeatable)")
    g.add_argument("--grid", action="append", default=[], metavar="RULE:KEY=V1,V2,...",
                   help="values of a rule hyperparameter to try, e.g. term:tilt=0.1,1,10 "
                        "(repeatable; several options of a rule combine); needs --validation")
    g.add_argument("--baseline", default="fedavg",
                   help="the rule the paired differences are taken against ('' for none)")
    g.add_argument("--select", default="acc_mean", metavar="METRIC",
                   help="the metric whose validation value picks each rule's grid point")
    _run_options(p)
    checkpoint_options(p)
    p.set_defaults(threads=None)  # see --threads: the idle cores
    sub.add_parser("rules", help="list every rule, server optimizer and method with its options",
                   description="Lists every rule and server optimizer with its options and "
                               "defaults, and the methods (their options: --rule-option).")
    p = sub.add_parser(
        "report", help="write one self-contained HTML file of a run folder",
        description="Writes one HTML file of a run folder of fastfair simulate or sweep "
                    "(finished or checkpointed): its configuration, the summary table with "
                    "intervals, the per-round curves, the clients' final accuracies and, with a "
                    "device population, the tiers' participation; figures inlined as PNG.",
        formatter_class=HelpFormatter)
    p.add_argument("folder", type=Path, metavar="RUN_FOLDER", help="the run's --out folder")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="the HTML file (default: RUN_FOLDER/report.html)")
    from fastfair.reproduce.command import add_parser

    table = add_parser(sub)
    execution_options(table)
    checkpoint_options(table)
    return parser


def checkpoint_options(p: argparse.ArgumentParser) -> None:
    """``--checkpoint-every`` and ``--resume``, the same for an experiment, a sweep and a
    reproduced table."""
    g = p.add_argument_group("checkpoints")
    g.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="save a checkpoint every N rounds (0: never)")
    g.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue the run (experiment, sweep or table) saved in DIR, "
                        "bit-identical to an uninterrupted one; takes no other run option")


def execution_options(p: argparse.ArgumentParser) -> None:
    """``--device`` (the configuration's field) and ``--threads``, in the section of the
    execution options: how a run is executed, not what it computes."""
    from fastfair.sim.config import EXECUTION, SimulationConfig

    groups = {g.title: g for g in p._action_groups}
    group = groups.get(EXECUTION) or p.add_argument_group(EXECUTION)
    add_config_options(lambda title: group, SimulationConfig, only=("device",))
    group.add_argument(
        "--threads", type=int, default=1,
        help="torch and fastfair kernel threads per process (default: simulate and reproduce 1, "
             "which does not collapse on a busy machine; sweep: the cores idle at the start, up "
             "to 4, as one batched program of many runs fills them)")


def _field_default(name: str) -> Any:
    """The default of :class:`~fastfair.sim.config.SimulationConfig`'s field ``name``, read
    without building a config, whose checks load the rules."""
    from fastfair.sim.config import SimulationConfig

    return next(f.default for f in dataclasses.fields(SimulationConfig) if f.name == name)


def _run_options(p: argparse.ArgumentParser) -> None:
    """The options ``simulate`` and ``sweep`` share: one per configuration field
    (:mod:`fastfair.cli_options`; ``dataset`` and ``clients`` inferred when not given), then
    output, logging and execution."""
    from fastfair.methods import METHODS
    from fastfair.sim.config import DATA, EVALUATION, EXECUTION, TRAINING, SimulationConfig

    p.add_argument("--config", type=Path, metavar="FILE", help=(
        "read the run's options from a TOML, YAML or JSON file: SimulationConfig's fields and "
        "rules, seeds, rule_options, grid, baseline, select, checkpoint_every (a run folder's "
        "config.json or sweep.json runs that run again); options typed here override it"))
    # One section per title: a field's section that the command already has (simulate's
    # "rules") takes its options there, not in a second section of the same title.
    groups = {g.title: g for g in p._action_groups}
    for title in (DATA, TRAINING, EVALUATION, EXECUTION):
        groups.setdefault(title, p.add_argument_group(title))
    inferred = {"dataset": f"default {_field_default('dataset')}, digits for "
                           + ", ".join(METHODS),
                "clients": f"default {_field_default('clients')}, or every user of a data set "
                           "with its own clients (read from --data-dir)"}
    add_config_options(lambda t: groups[t] if t in groups
                       else groups.setdefault(t, p.add_argument_group(t)), SimulationConfig,
                       inferred, only=[f.name for f in dataclasses.fields(SimulationConfig)
                                       if f.name != "device"])
    g = groups[EVALUATION]
    g.add_argument("--out", type=Path, help="output folder (default: a fresh folder)")
    g.add_argument("--log", metavar="L1,L2", default="",
                   help="also stream every round, while it runs, to csv (--out/rounds.csv), "
                        "tensorboard (--out/tensorboard/, for tensorboard --logdir) and/or wandb "
                        "(Weights & Biases, when installed)")
    g.add_argument("--log-level", choices=LOG_LEVELS,
                   help="messages shown on standard error (default: info, or warning with "
                        "--quiet); debug adds a line per evaluation round")
    g.add_argument("--quiet", action="store_true",
                   help="no progress bar (shown only in a terminal anyway), and only warnings "
                        "and errors")
    execution_options(p)
