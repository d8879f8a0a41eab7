"""Running a check under every CPU instruction-set copy of the kernels."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Set

ISA_LEVELS = ("base", "avx2", "avx512")


def run_under_every_isa(code: str) -> Set[str]:
    """Runs the Python ``code`` once per ISA level, each in its own process (the copy is chosen
    once per process; ``FASTFAIR_CPU_ISA`` caps it), asserting that each run succeeds, and
    returns what the runs printed (``code`` prints the level in use: a level the CPU lacks runs
    the next one down)."""
    seen = set()
    for isa in ISA_LEVELS:
        env = dict(os.environ, FASTFAIR_CPU_ISA=isa)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        seen.add(done.stdout.strip())
    return seen
