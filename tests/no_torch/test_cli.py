"""The command line's front door with NumPy alone: ``fastfair --help``, ``--version``,
``fastfair rules`` and the check of a ``--config`` file run without the simulator's packages, and
a command that needs them names the extra to install.

Each command runs in a fresh interpreter where importing torch (and the rest of the ``sim``
extra) fails as on a machine without them, so a regression that imports one fails here even where
torch is installed (the normal suite) and not only in the no-torch CI leg.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fastfair
from fastfair.cli import SIM_PACKAGES

#: Runs the CLI with every package of the sim extra unimportable, then checks none was imported.
_RUN = """
import sys
for name in {packages!r}:
    sys.modules[name] = None
from fastfair.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
print("loaded:", sorted(m for m in sys.modules if m.partition(".")[0] in {packages!r}
                        and sys.modules[m] is not None))
sys.exit(code)
"""


def _cli(*argv: str) -> subprocess.CompletedProcess:
    root = str(Path(fastfair.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    code = _RUN.format(packages=SIM_PACKAGES, argv=list(argv))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv, says", [
    (["--help"], "fastfair simulate runs federated simulations"),
    (["simulate", "--help"], "--dataset"),
    (["sweep", "--help"], "--grid"),
    (["--version"], f"fastfair {fastfair.__version__}"),
    (["rules"], "aaggff-d"),
])
def test_help_version_and_rules_need_numpy_alone(argv, says):
    done = _cli(*argv)
    assert done.returncode == 0, done.stderr
    assert says in done.stdout
    assert "loaded: []" in done.stdout


def test_a_config_file_is_checked_with_numpy_alone(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('dataset = "synthtic"\n')
    done = _cli("simulate", "--config", str(bad))
    assert done.returncode == 2
    assert "unknown dataset 'synthtic' (did you mean 'synthetic'?)" in done.stderr
    out_of_range = tmp_path / "range.toml"
    out_of_range.write_text("rounds = 0\n")
    done = _cli("simulate", "--config", str(out_of_range))
    assert done.returncode == 2
    assert "rounds (--rounds) must be >= 1; got 0" in done.stderr


def test_a_run_without_the_simulator_names_the_extra(tmp_path):
    good = tmp_path / "run.toml"
    good.write_text('rules = ["fedavg"]\nrounds = 3\n')
    done = _cli("simulate", "--config", str(good), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "pip install 'fastfair[sim]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_help_starts_without_numpy_the_rules_or_the_kernels():
    """``fastfair --help`` reads plain name tables (the rules', the data sets', the choices of
    every option): NumPy, the rules and the compiled kernels' wrappers stay unloaded, which is
    what keeps its start-up near the interpreter's own."""
    code = ("import sys\nfrom fastfair.cli import main\n"
            "try:\n    main(['simulate', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('loaded:', sorted(m for m in sys.modules if m == 'numpy' or m.startswith("
            "('fastfair.ops', 'fastfair.state', 'fastfair.sim.seeding')) or (m.startswith("
            "'fastfair.aggregators.') and m != 'fastfair.aggregators.names')))")
    root = str(Path(fastfair.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout, done.stdout[-400:]
