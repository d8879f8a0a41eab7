"""Comparisons of two run folders, and runs played two ways that must agree."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import pytest


def assert_runs_match(one: Path, other: Path) -> None:
    """The runs written to ``one`` and ``other`` agree round by round to float tolerance."""
    a = json.loads((one / "metrics.json").read_text())
    b = json.loads((other / "metrics.json").read_text())
    for rule in a:
        for ra, rb in zip(a[rule], b[rule]):
            assert ra["participants"] == rb["participants"]
            for key in ("train_loss", "test_loss"):
                if key in ra:
                    assert rb[key] == pytest.approx(ra[key], rel=1e-4, abs=1e-6), (rule, key)
            # The all-reduce sums in another order: a test sample on the decision boundary may
            # flip, moving a client's accuracy by one sample and the mean by under 1e-2.
            for key in ("acc_mean", "acc_worst10"):
                if key in ra:
                    assert rb[key] == pytest.approx(ra[key], abs=1e-2), (rule, key)


def assert_two_processes_match_one(tmp_path: Path, args: Sequence[str]) -> None:
    """``fastfair simulate ARGS`` in one process and under ``torchrun`` on two agree."""
    from tests.helpers import ROOT

    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    one = subprocess.run([sys.executable, "-m", "fastfair", "simulate", *args, "--out",
                          str(tmp_path / "one")], cwd=ROOT, env=env, capture_output=True,
                         timeout=300)
    assert one.returncode == 0, one.stderr.decode()[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", "-m", "fastfair", "simulate", *args, "--out",
                          str(tmp_path / "two")], cwd=ROOT, env=env, capture_output=True,
                         timeout=300)
    assert two.returncode == 0, two.stderr.decode()[-2000:]
    assert_runs_match(tmp_path / "one", tmp_path / "two")


def assert_resume_matches(config: Any, straight: Any, before: int, after: int) -> Any:
    """A :class:`~fastfair.sim.Simulation` of ``config`` played ``before`` rounds, saved with
    ``torch.save``, loaded into a fresh one and played ``after`` more ends with the parameters
    of ``straight`` (the same config played ``before + after`` rounds at once); returns that
    resumed simulation, for checks of more of its state."""
    import torch

    from fastfair.sim import Simulation

    first = Simulation(config)
    for _ in range(before):
        first.step()
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = Simulation(config)
    resumed.load_state_dict(torch.load(buffer))
    for _ in range(after):
        resumed.step()
    assert torch.equal(resumed.params, straight.params)
    return resumed
