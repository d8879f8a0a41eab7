"""``python -m bench check BASE_REF [-k EXPR]``: did my change make it slower?

One command for a developer's question. It checks out ``BASE_REF`` (a commit, a branch, a tag)
in a scratch git worktree (``build/bench-check/<commit>``, kept between calls, so that a second
check against the same base builds nothing), builds its compiled core there with CMake, as
``.ci/gpu`` builds one, then runs the chosen benchmarks of the base and of the working tree
interleaved, base, work, base, work (``--repeats`` pairs): a machine that grows busier partway
slows both sides alike, and each side keeps its per-case minimum (noise only adds time). Both
sides run the same ``-k`` selection, so nothing is "missing"; a case that exists in one tree
only is listed apart and decides nothing.

The verdict compares ``--metric`` (default ``seconds``, which carries no machine difference
here: both sides ran on this machine, minutes apart) against ``--band``; the copy-floor ratios
(``ratio_to_floor``: a case's time over the time of copying its bytes, measured in the same
run) are printed beside it, since they also hold when the machine's memory got slower between
the two sides. Exit status: 0 no case slower than the band, 1 one is (or a benchmark failed),
2 the base could not be checked out or built.

The working tree's core must be built from its sources (``bench run`` refuses a stale one);
the base's is built here with ``-DFASTFAIR_CUDA`` as ``--cuda`` says (``OFF`` by default: build
the working tree the same way).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from bench.provenance import ROOT
from bench.tracking import DEFAULT_BAND, METRICS, compare, load, parse_band

#: Where the base commits are checked out and built (git-ignored: under build/).
SCRATCH = ROOT / "build" / "bench-check"


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def resolve(ref: str) -> str:
    """The full commit id ``ref`` names; ValueError naming it when it names none."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise ValueError(f"BASE_REF {ref!r} names no commit of this repository (try a branch, "
                         "a tag or `git log --oneline`)") from None


def checkout(commit: str, scratch: Path = SCRATCH) -> Path:
    """A worktree of ``commit`` under ``scratch`` (made once, detached, reused after)."""
    tree = scratch / commit[:12]
    if not (tree / ".git").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        _git("worktree", "add", "--detach", "--force", str(tree), commit)
    return tree


def build(tree: Path, cuda: str, jobs: int, log: Path) -> None:
    """Builds the compiled core of ``tree`` into ``tree/fastfair`` (CMake and Ninja, ccache
    when installed, with the tree as its base folder so that objects of the same sources hit
    whatever folder built them); RuntimeError with the log's tail when the build fails."""
    import pybind11

    configure = ["cmake", "-S", str(tree), "-B", str(tree / "build" / "check"), "-G", "Ninja",
                 f"-DFASTFAIR_CUDA={cuda}",
                 f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={tree / 'fastfair'}",
                 f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                 f"-DPython_EXECUTABLE={sys.executable}"]
    if shutil.which("ccache"):
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    env = {**os.environ, "CCACHE_BASEDIR": str(tree)}
    with open(log, "w") as f:
        for command in (configure, ["cmake", "--build", str(tree / "build" / "check"),
                                    "--parallel", str(jobs)]):
            done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env)
            if done.returncode:
                tail = log.read_text().splitlines()[-30:]
                raise RuntimeError(f"building {tree} failed ({' '.join(command[:2])}); the "
                                   f"end of {log}:\n" + "\n".join(tail))


#: Runs ``python -m MODULE ARGS`` with the packages ``fastfair`` and ``bench`` (and their
#: submodules) imported from the folder ``TREE``, whatever else is installed: its finder goes
#: first on ``sys.meta_path``, ahead of the import hook an editable install
#: (``pip install -e .``) puts there, which ``PYTHONPATH`` alone does not beat. A module the
#: folder lacks (the compiled core of a working tree installed editable, kept in
#: site-packages) is found where it was before.
#: Usage: ``python -c TREE_FIRST TREE MODULE ARGS...``.
TREE_FIRST = """
import importlib.machinery, runpy, sys
tree, module = sys.argv[1], sys.argv[2]
class TreeFirst:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] not in ("fastfair", "bench"):
            return None
        return importlib.machinery.PathFinder.find_spec(name, [tree] if path is None else path)
sys.meta_path.insert(0, TreeFirst)
sys.path.insert(0, tree)
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def in_tree(tree: Path, module: str, args: Sequence[str]) -> List[str]:
    """The command that runs ``python -m module *args`` on the ``fastfair`` and ``bench`` of
    ``tree``, even where an editable install of another tree is on the path (:data:`TREE_FIRST`)."""
    return [sys.executable, "-c", TREE_FIRST, str(tree), module, *args]


def bench_run(tree: Path, out: Path, keyword: Optional[str], threads: int, smoke: bool,
              files: Sequence[str], allow_other_build: bool = False) -> int:
    """``python -m bench run`` of ``tree`` (its own benchmarks and its own core) into
    ``out``; its exit status."""
    command = in_tree(tree, "bench", ["run", "--out", str(out), "--threads", str(threads),
                                      *(["-k", keyword] if keyword else []),
                                      *(["--smoke"] if smoke else []),
                                      *(["--allow-other-build"] if allow_other_build else []),
                                      *files])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run(command, cwd=tree, env=env, stdout=subprocess.DEVNULL).returncode


def merged(documents: List[dict]) -> dict:
    """One document whose records are all of ``documents``' (compare keeps each case's
    minimum over them)."""
    return {**documents[0], "records": [r for d in documents for r in d["records"]],
            "tests": {"failed": [f for d in documents for f in d["tests"]["failed"]]}}


def check(ref: str, keyword: Optional[str], repeats: int, threads: int, smoke: bool,
          metric: str, band: float, cuda: str, jobs: int, files: Sequence[str],
          allow_other_build: bool = False) -> int:
    """The whole check (see the module docstring); prints as it goes, returns the exit
    status."""
    commit = resolve(ref)
    print(f"base: {ref} = {commit[:12]} ({_git('log', '-1', '--format=%s', commit)})")
    tree = checkout(commit)
    log = tree / "build" / "check.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"building the base in {tree} (log: {log})", flush=True)
    build(tree, cuda, jobs, log)
    runs: Dict[str, List[dict]] = {"base": [], "work": []}
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        for i in range(repeats):
            for side, root in (("base", tree), ("work", ROOT)):
                out = Path(tmp) / f"{side}-{i}.json"
                code = bench_run(root, out, keyword, threads, smoke, files, allow_other_build)
                if not out.exists():
                    print(f"bench check: `bench run` of the {side} tree ({root}) exited {code} "
                          "and wrote no figures (run it alone to see why)", file=sys.stderr)
                    return 2 if side == "base" else 1
                runs[side].append(load(out))
                print(f"  pair {i + 1}/{repeats}: {side} measured "
                      f"({len(runs[side][-1]['records'])} records)", flush=True)
    base = merged(runs["base"])
    lines, regressions, missing = compare(base, runs["work"], metric, band)
    print("\n".join(line for line in lines if line not in missing))
    if metric != "ratio_to_floor":
        floor_lines, _, _ = compare(base, runs["work"], "ratio_to_floor", band)
        print("\ncopy-floor ratios (time / time to copy the case's bytes), for reference:")
        print("\n".join(line for line in floor_lines if line not in missing
                        and not line.startswith("not compared")))
    only = [m for m in missing if not m.startswith("failed")]
    failed = [m for m in missing if m.startswith("failed")]
    if only:
        print("\nin one tree only (not compared):\n" + "\n".join(f"  {m}" for m in only))
    if failed:
        print("\n" + "\n".join(failed))
    if regressions:
        print(f"\nSLOWER: {len(regressions)} fastfair case(s) beyond {band:g}x of {ref}:")
        print("\n".join(f"  {r}" for r in regressions))
        return 1
    print(f"\nno fastfair case slower than {band:g}x of {ref} ({metric}, minimum of {repeats} "
          "interleaved runs per side)")
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench check",
        description="build BASE_REF in a scratch worktree, run the chosen benchmarks of it and "
                    "of the working tree interleaved, and say whether the working tree is "
                    "slower")
    parser.add_argument("base", metavar="BASE_REF", help="the commit to compare with")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression selecting cases "
                        "(default: every benchmark, about 34 minutes per run on 2 cores)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="base/work pairs run one after the other (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="threads of each run (default 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (checks that it runs)")
    parser.add_argument("--metric", choices=METRICS, default="seconds")
    parser.add_argument("--band", type=parse_band, default=DEFAULT_BAND,
                        help=f"slower means above this factor (default {DEFAULT_BAND})")
    parser.add_argument("--cuda", choices=("OFF", "ON", "AUTO"), default="OFF",
                        help="FASTFAIR_CUDA of the base's build (default OFF)")
    parser.add_argument("--jobs", type=int, default=2, help="build jobs (default 2)")
    parser.add_argument("--allow-other-build", action="store_true",
                        help="measure a core not built from its tree's sources (a stale build "
                             "of the working tree), saying so in every record")
    parser.add_argument("files", nargs="*", help="benchmark files (default: all of bench/)")
    args = parser.parse_intermixed_args(argv)  # files may follow the options
    for name in ("repeats", "threads", "jobs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1; got {getattr(args, name)}")
    try:
        return check(args.base, args.keyword, args.repeats, args.threads, args.smoke,
                     args.metric, args.band, args.cuda, args.jobs, args.files,
                     args.allow_other_build)
    except (ValueError, RuntimeError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else exc
        print(f"bench check: error: {detail}", file=sys.stderr)
        return 2
