"""``fastfair reproduce``: lists the shipped tables, or runs one and prints its comparison."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from fastfair.sim import run_files

LOG = logging.getLogger("fastfair")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Adds the ``reproduce`` subcommand to the subparsers ``sub`` of the ``fastfair``
    parser and returns its parser (the caller adds the options it shares with ``simulate``:
    ``--device``, ``--threads``, ``--checkpoint-every``, ``--resume``)."""
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
    return p


#: The file of a table's folder that holds what ``--resume`` needs to finish it.
SETTINGS = run_files.REPRODUCE_SETTINGS
#: What ``--resume`` may be given with: how the table is executed and shown, not what it runs.
RESUME_COMPANIONS = {"command", "resume", "device", "threads", "quiet"}


def main(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    """Runs ``fastfair reproduce`` with its parsed ``args`` (``argv``: the command line as
    typed, recorded in the outputs); ``--resume DIR`` finishes the table started in DIR with
    the settings saved there (:data:`SETTINGS`)."""
    from fastfair.reproduce.table import check_data, load_table, replace_seeds, table_names

    if args.list:
        for name in table_names():
            spec = load_table(name)
            print(f"{name}: {spec.title}")
        return 0
    if args.resume is not None:
        return _resume(args)
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
    check_data(spec, None if args.data_dir is None else str(args.data_dir), args.full)
    out = args.out or Path("fastfair-runs") / time.strftime(f"reproduce-{spec.name}-%Y%m%d-%H%M%S")
    command = "fastfair reproduce " + " ".join(shlex.quote(a) for a in (argv or [args.name])
                                               if a != "reproduce")
    table = str(Path(args.name).resolve()) if str(args.name).endswith(".toml") else args.name
    settings = {"table": table, "seeds": list(spec.seeds), "full": args.full,
                "data_dir": None if args.data_dir is None else str(args.data_dir.resolve()),
                "checkpoint_every": args.checkpoint_every, "device": args.device,
                "command": command}
    return _run(args, spec, out, settings, args.device, resume=False)


def _resume(args: argparse.Namespace) -> int:
    """``--resume DIR``: the table of DIR's saved settings, finished."""
    from fastfair import _files as files
    from fastfair.reproduce.table import load_table, replace_seeds

    others = sorted(getattr(args, "typed", set()) - RESUME_COMPANIONS)
    if others:
        flags = ", ".join("--" + name.replace("_", "-") for name in others)
        raise ValueError(f"--resume finishes the table with its saved options; drop {flags}")
    path = args.resume / SETTINGS
    if not path.is_file():
        raise ValueError(f"--resume {args.resume} holds no {SETTINGS}: it is not a table "
                         "folder of fastfair reproduce")
    settings = files.read_json_file(path, "table settings")
    spec = replace_seeds(load_table(settings["table"]), settings["seeds"])
    device = args.device if "device" in getattr(args, "typed", set()) else settings["device"]
    return _run(args, spec, args.resume, settings, device, resume=True)


def _run(args: argparse.Namespace, spec: Any, out: Path, settings: Dict[str, Any], device: str,
         resume: bool) -> int:
    """Runs (or, with ``resume``, finishes) the table ``spec`` into ``out`` and prints it. A
    fresh table's folder first receives its ``settings``; the table then runs as a resumed
    one, which finds no column done."""
    from fastfair import _files as files
    from fastfair.reproduce.run import run_table

    if not resume:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ValueError(f"--out {out} must be an empty folder or absent")
        out.mkdir(parents=True, exist_ok=True)
        with files.atomic(out / SETTINGS, text=True) as f:
            f.write(json.dumps(settings, indent=1))
    table = run_table(spec, settings["data_dir"], out, full=settings["full"],
                      progress=not args.quiet, command=settings["command"],
                      on_column=lambda name, s: LOG.info("%s: %.0f s", name, s), device=device,
                      threads=args.threads, checkpoint_every=settings["checkpoint_every"],
                      resume=True)
    print((out / run_files.TABLE_MD).read_text(), end="", flush=True)
    LOG.info("wrote %s/table.md, table.csv, table.json (%.0f s)", out, table.seconds)
    return 0
