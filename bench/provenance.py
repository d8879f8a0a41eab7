"""Where a benchmark figure comes from: the git commit and whether the tree was dirty, the build id
of the compiled core (and whether it is this tree's), and the machine (CPU model, GPU), whose key
picks the baseline that ``python -m bench compare`` compares with."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
# The files the build id hashes: cmake/FastfairSourceHash.cmake says the same in CMake.
SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")


def source_files(root: Path) -> List[str]:
    """The files the compiled core is built from, as CMake lists them for its build id:
    CMakeLists.txt, cmake/*.cmake and every C++/CUDA source or header under csrc/, relative
    POSIX paths in byte order."""
    root = Path(root)
    files = ["CMakeLists.txt"]
    cmake_dir = root / "cmake"
    if cmake_dir.is_dir():
        files += [f"cmake/{p.name}" for p in cmake_dir.iterdir()
                  if p.is_file() and p.name.endswith(".cmake")]
    csrc = root / "csrc"
    if csrc.is_dir():
        files += [p.relative_to(root).as_posix() for p in csrc.rglob("*")
                  if p.is_file() and p.name.endswith(SOURCE_SUFFIXES)]
    return sorted(files, key=lambda name: name.encode())


def source_build_id(root: Path = ROOT) -> str:
    """The build id a core compiled from ``root``'s sources reports (``build_info()["build_id"]``):
    the first 16 hex digits of the SHA-256 of one line ``"<path> <sha256 of the file>\\n"`` per
    source file (:func:`source_files`)."""
    root = Path(root)
    text = "".join(f"{name} {hashlib.sha256((root / name).read_bytes()).hexdigest()}\n"
                   for name in source_files(root))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_state(root: Path = ROOT) -> Dict[str, Any]:
    """``commit`` (HEAD's hash) and ``dirty`` (tracked files changed, staged or not) of the git
    tree at ``root``; both None outside a git checkout or without git."""
    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def core_mismatch(root: Path, build_info: Dict[str, Any], package_dir: Path) -> Optional[str]:
    """Why the imported fastfair does not belong to the tree at ``root`` (its compiled core built
    from other sources, or its Python package imported from elsewhere), or None when it does."""
    expected = source_build_id(root)
    problems = []
    built = build_info.get("build_id")
    if built != expected:
        problems.append(f"its compiled core was built from other sources (build id {built!r}; "
                        f"this tree's sources hash to {expected!r})")
    here = (Path(root) / "fastfair").resolve()
    if Path(package_dir).resolve() != here:
        problems.append(f"it is imported from {package_dir}, not from {here}")
    if not problems:
        return None
    return ("the fastfair this benchmark would measure is not this tree's: " + "; ".join(problems)
            + ". Rebuild it from this tree (pip install -c constraints.txt -e \".[bench]\", which "
            "recompiles only what changed), or pass --allow-other-build to measure it anyway.")


def _memory_gib() -> Optional[float]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    return None


def machine_key(machine: Dict[str, Any]) -> str:
    """What a baseline must share with a run for their seconds to compare: the CPU model and the
    GPU (none for a CPU-only run)."""
    return f"cpu={machine.get('cpu')} | gpu={machine.get('gpu') or 'none'}"


def baseline_name(machine: Dict[str, Any]) -> str:
    """The file name a baseline of ``machine`` is stored under in bench/baselines."""
    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")

    name = "cpu-" + slug(str(machine.get("cpu")))
    if machine.get("gpu"):
        name += "--gpu-" + slug(str(machine["gpu"]))
    return name + ".json"


def machine(threads: int, records: Sequence[dict]) -> dict:
    """What the figures were measured on (imports torch and fastfair: call after the run)."""
    import numpy
    import torch

    import fastfair
    from fastfair._machine import cpu_model

    info = fastfair.build_info()
    cpu_bandwidths = sorted(r["copy_bandwidth"] for r in records if r["device"] == "cpu")
    desc = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "fastfair": info.get("version"),
        "cpu_isa": info.get("cpu_isa"),
        "openmp": info.get("openmp"),
        "cuda_build": info.get("cuda"),
        "threads": threads,
        "median_copy_bandwidth_gbs": (round(cpu_bandwidths[len(cpu_bandwidths) // 2] / 1e9, 2)
                                      if cpu_bandwidths else None),
    }
    if torch.cuda.is_available():
        desc["gpu"] = torch.cuda.get_device_name()
    desc["key"] = machine_key(desc)
    return desc
