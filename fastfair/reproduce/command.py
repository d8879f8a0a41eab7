"""``fastfair reproduce``: lists the shipped tables, or runs one and prints its comparison."""

from __future__ import annotations

import argparse
import logging
import shlex
import time
from pathlib import Path
from typing import Any, List, Optional

LOG = logging.getLogger("fastfair")


def add_parser(sub: Any) -> None:
    """Adds the ``reproduce`` subcommand to the subparsers ``sub`` of the ``fastfair``
    parser."""
    p = sub.add_parser(
        "reproduce", help="regenerate a seed paper's table beside the paper's numbers",
        description="Runs one of the seed papers' tables from the table file shipped with "
                    "fastfair (fastfair/reproduce/tables/NAME.toml) over several seeds and "
                    "writes the paper's numbers beside ours, with 95 % intervals and a "
                    "verdict, as table.md, table.csv and table.json in --out (docs/fidelity.md, "
                    "'The papers' tables on their data').")
    p.add_argument("name", nargs="?", help="the table (fastfair reproduce --list names them), "
                                           "or a table file's path (.toml)")
    p.add_argument("--list", action="store_true", help="list the tables and exit")
    p.add_argument("--seeds", metavar="S1,S2,...",
                   help="comma-separated seeds (default: the table's, at least 3)")
    p.add_argument("--data-dir", type=Path, metavar="DIR",
                   help="the folder holding the data sets' folders (mnist/, adult/, ...)")
    p.add_argument("--out", type=Path, help="output folder (default: a fresh folder)")
    p.add_argument("--full", action="store_true",
                   help="run the paper's full setting (hours on a CPU; meant for a GPU) "
                        "instead of the shipped reduced one")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def main(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    """Runs ``fastfair reproduce`` with its parsed ``args`` (``argv``: the command line as
    typed, recorded in the outputs)."""
    from fastfair.reproduce.run import run_table
    from fastfair.reproduce.table import load_table, replace_seeds, table_names

    if args.list:
        for name in table_names():
            spec = load_table(name)
            print(f"{name}: {spec.title}")
        return 0
    if args.name is None:
        raise ValueError("name the table to run (fastfair reproduce --list names them)")
    spec = load_table(args.name)
    if args.seeds is not None:
        try:
            seeds = [int(t) for t in args.seeds.split(",") if t.strip()]
        except ValueError:
            raise ValueError(f"--seeds expects comma-separated integers; got "
                             f"{args.seeds!r}") from None
        spec = replace_seeds(spec, seeds)
    out = args.out or Path("fastfair-runs") / time.strftime(f"reproduce-{spec.name}-%Y%m%d-%H%M%S")
    command = "fastfair reproduce " + " ".join(shlex.quote(a) for a in (argv or [args.name])
                                               if a != "reproduce")
    table = run_table(spec, None if args.data_dir is None else str(args.data_dir), out,
                      full=args.full, progress=not args.quiet, command=command,
                      on_column=lambda name, s: LOG.info("%s: %.0f s", name, s))
    print((out / "table.md").read_text(), end="", flush=True)
    LOG.info("wrote %s/table.md, table.csv, table.json (%.0f s)", out, table.seconds)
    return 0
