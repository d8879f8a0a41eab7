"""Writes every block of the docs that shows a command's output by running that command.

    python scripts/doc_outputs.py                 # every block (the slow ones take minutes)
    python scripts/doc_outputs.py --fast          # the fast blocks only (seconds)
    python scripts/doc_outputs.py sweep-sample    # the named blocks
    python scripts/doc_outputs.py --list          # the blocks, their files and commands

A generated block sits in its Markdown file between two markers that name it::

    <!-- output: NAME -->
    ```
    what the command printed to standard output
    ```
    <!-- /output -->

and everything between the markers is rewritten (a command that prints a Markdown table gets
it unfenced). :data:`BLOCKS` names each block's command; the commands run in a scratch folder
(or the example's folder they are shown in) with ``COLUMNS=160`` (the width a table is split at)
and one thread, and only their standard output is kept (messages and timings go to standard
error; of a command that logs to standard output too, the part the docs show). A *fast* block
is deterministic and takes seconds: ``tests/test_doc_outputs.py`` checks that the shipped text
equals what this script writes. A *slow* block (minutes) is followed, inside its markers, by a
line giving the date and the commit it was made at; a block that also makes figures copies them
into ``docs/images``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
#: The environment every command runs with, beside the caller's: the width tables are split at,
#: one thread (the outputs do not depend on it; the time of a run on a shared machine does).
ENV = {"COLUMNS": "160", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


@dataclasses.dataclass(frozen=True)
class Block:
    """One generated block: the Markdown file it sits in (relative to the repository root),
    the command as the docs show it (``fastfair ...`` runs as ``python -m fastfair ...``,
    ``python SCRIPT`` with the script's path under the repository root), whether it is fast,
    and the figures the command writes into its ``--out`` folder (``OUT`` in ``args``) that are
    copied into the docs, as ``(file in the run folder, path under the repository root)``.
    ``cwd``: the folder under the repository root the command runs in (a scratch folder when
    empty); ``keep``: a pattern whose first match in the output is the part shown (all of it
    when empty); ``fenced``: False for a command that prints a Markdown table."""

    doc: str
    args: Tuple[str, ...]
    fast: bool
    figures: Tuple[Tuple[str, str], ...] = ()
    cwd: str = ""
    keep: str = ""
    fenced: bool = True


#: Every generated block, by name (the name its markers carry).
BLOCKS: Dict[str, Block] = {
    "default-job": Block("README.md", ("fastfair", "simulate", "--quiet", "--out", "OUT"), True),
    "rules": Block("docs/defaults.md", ("fastfair", "rules"), True),
    "reproduce-list": Block("docs/simulator.md", ("fastfair", "reproduce", "--list"), True),
    "sweep-sample": Block(
        "docs/simulator.md",
        ("fastfair", "sweep", "--compare", "fedavg,fairavg,aaggff-d,qfedavg,term", "--seeds",
         "0,1,2,3,4", "--grid", "term:tilt=0.1,1,10", "--grid", "qfedavg:q=0.1,1",
         "--validation", "0.2", "--quiet", "--out", "OUT"),
        False,
        (("tradeoff.png", "docs/images/sweep-tradeoff.png"),
         ("curves.png", "docs/images/sweep-curves.png"))),
    "million-clients": Block(
        "docs/simulator.md",
        ("fastfair", "simulate", "--dataset", "grouped", "--clients", "1000000", "--per-round",
         "1000", "--rounds", "100", "--compare", "fedavg,aaggff-d,afl", "--seeds", "0,1,2",
         "--quiet", "--out", "OUT"),
        False),
    "million-clients-groups": Block(
        "docs/simulator.md",
        ("fastfair", "simulate", "--dataset", "grouped", "--clients", "1000000", "--per-round",
         "1000", "--rounds", "100", "--compare", "fedavg,aaggff-d,afl", "--fair-over", "groups",
         "--seeds", "0,1,2", "--quiet", "--out", "OUT"),
        False),
    "virtual-clock": Block("docs/populations.md",
                           ("python", "examples/populations/virtual_clock.py"), True,
                           fenced=False),
    "population-deadlines": Block(
        "docs/populations.md", ("python", "scripts/population_tables.py", "deadlines"), True,
        fenced=False),
    "population-restricted": Block(
        "docs/populations.md", ("python", "scripts/population_tables.py", "restricted"), True,
        fenced=False),
    "flower-app": Block(
        "docs/flower.md",
        ("flwr", "run", ".", "--stream", "--federation-config",
         "num-supernodes=30 client-resources-num-cpus=1"),
        False, cwd="examples/flower", keep=r"^rule .*?^\(test accuracy .*?\)$"),
}

MARKERS = re.compile(r"(<!-- output: ([\w-]+) -->\n)(.*?)(<!-- /output -->)", re.S)


def command(block: Block, out: Optional[Path] = None) -> List[str]:
    """The command line of ``block`` (``OUT`` replaced by ``out``)."""
    program, *args = (str(out) if a == "OUT" and out else a for a in block.args)
    if program == "fastfair":
        return [sys.executable, "-m", program, *args]
    if program == "python":
        return [sys.executable, str(ROOT / args[0]), *args[1:]]
    return [program, *args]


def shown(block: Block) -> str:
    """The command as the docs would show it: ``fastfair ...``, ``--out`` dropped."""
    args = list(block.args)
    if "OUT" in args:
        i = args.index("OUT")
        del args[i - 1:i + 1]
    return " ".join(shlex.quote(a) for a in args if a != "--quiet")


def run(name: str, figures: bool = True) -> str:
    """The text between the markers of block ``name``: the fenced output of its command and,
    for a slow block, the line with the date and commit. With ``figures``, a slow block's
    figures are copied into place."""
    block = BLOCKS[name]
    with tempfile.TemporaryDirectory(prefix="doc-outputs-") as tmp:
        out = Path(tmp) / "run"
        done = subprocess.run(command(block, out), cwd=ROOT / block.cwd if block.cwd else tmp,
                              capture_output=True, text=True,
                              env={**os.environ, **ENV,
                                   "PYTHONPATH": os.pathsep.join(
                                       [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
        if done.returncode:
            raise RuntimeError(f"block {name!r}: `{shown(block)}` exited {done.returncode}:\n"
                               + done.stderr[-3000:])
        if figures:
            for produced, target in block.figures:
                shutil.copyfile(out / produced, ROOT / target)
    shows = done.stdout
    if block.keep:
        found = re.search(block.keep, shows, re.S | re.M)
        if not found:
            raise RuntimeError(f"block {name!r}: `{shown(block)}` printed no "
                               f"{block.keep!r}:\n" + shows[-3000:])
        shows = found.group(0)
    text = shows.rstrip("\n") + "\n"
    if block.fenced:
        text = "```\n" + text + "```\n"
    if not block.fast:
        text += (f"\n(Generated by `python scripts/doc_outputs.py {name}` on "
                 f"{datetime.date.today().isoformat()} at commit {commit()}.)\n")
    return text


def commit() -> str:
    """HEAD's short hash, with ``+changes`` when tracked files other than the docs this script
    writes (Markdown, ``docs/images``) differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!*.md",
                ":!docs/images")
    return git("rev-parse", "--short=12", "HEAD") + ("+changes" if dirty else "")


def shipped(doc: str) -> Dict[str, str]:
    """The text between the markers of every block in ``doc``, by name."""
    return {m.group(2): m.group(3) for m in MARKERS.finditer((ROOT / doc).read_text())}


def write(name: str, text: str) -> None:
    """Replaces the text between block ``name``'s markers in its file with ``text``;
    ValueError naming the block when its file has no such markers."""
    path = ROOT / BLOCKS[name].doc
    old = path.read_text()
    new = MARKERS.sub(
        lambda m: m.group(1) + text + m.group(4) if m.group(2) == name else m.group(0), old)
    if not any(m.group(2) == name for m in MARKERS.finditer(old)):
        raise ValueError(f"block {name!r}: {BLOCKS[name].doc} has no "
                         f"`<!-- output: {name} -->` ... `<!-- /output -->` markers")
    path.write_text(new)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/doc_outputs.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"blocks to write (default: all): "
                        f"{', '.join(BLOCKS)}")
    parser.add_argument("--fast", action="store_true", help="the fast blocks only")
    parser.add_argument("--list", action="store_true", help="list the blocks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, block in BLOCKS.items():
            print(f"{name:<24}{'fast' if block.fast else 'slow':<6}{block.doc:<20}{shown(block)}")
        return 0
    unknown = [n for n in args.names if n not in BLOCKS]
    if unknown:
        parser.error(f"names: unknown block(s) {', '.join(unknown)}; known: {', '.join(BLOCKS)}")
    names = args.names or [n for n, b in BLOCKS.items() if b.fast or not args.fast]
    for name in names:
        print(f"{name}: {shown(BLOCKS[name])}", file=sys.stderr, flush=True)
        write(name, run(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
