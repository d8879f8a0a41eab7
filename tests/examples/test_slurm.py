"""examples/slurm: the Slurm job is valid bash and passes fastfair simulate only options it
has."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

JOB = ROOT / "examples" / "slurm" / "simulate.sbatch"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_job_is_valid_bash():
    subprocess.run(["bash", "-n", str(JOB)], check=True)


def test_the_job_passes_options_fastfair_simulate_has():
    from fastfair.cli_parser import build_parser

    command = JOB.read_text().split("-m fastfair simulate", 1)[1]
    options = re.findall(r"(--[a-z-]+)", command)
    assert options, "the job runs no fastfair simulate"
    known = {o for action in build_parser()._subparsers._group_actions[0].choices[
        "simulate"]._actions for o in action.option_strings}
    assert set(options) <= known, sorted(set(options) - known)
