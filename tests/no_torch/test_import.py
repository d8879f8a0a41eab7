"""The numpy-only core: ``import fastfair`` and its core subpackages pull in no torch, the package
declares NumPy as its only dependency, and the places that truly need torch say what to install.

These tests run in the no-torch CI leg (``.ci/no-torch``: a venv with NumPy and pytest only) and
in the normal suite; the import check runs in a fresh interpreter, so a torch imported by another
test of the same session cannot hide a regression.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fastfair

# Everything `import fastfair` reaches, and the core modules a NumPy-only user imports by name.
CORE = ["fastfair", "fastfair.ops", "fastfair.aggregators", "fastfair.aggregators.registry",
        "fastfair.aggregators.server_opt", "fastfair.aggregators.objectives",
        "fastfair.reference", "fastfair.reference.aggregators", "fastfair.reference.superfed",
        "fastfair.methods", "fastfair.methods.superfed", "fastfair.integrations",
        # the command line's front door: its options, names and config files
        "fastfair.cli", "fastfair.sim", "fastfair.sim.config", "fastfair.sim.names",
        "fastfair.sim.experiments.config_file"]

TORCH_HINT = r'needs PyTorch \(torch\).*pip install "fastfair\[torch\]"'


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    """Runs ``code`` in a new interpreter that imports this very fastfair (not another install)."""
    root = str(Path(fastfair.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


def test_core_imports_without_torch():
    """The core imports, and runs an op and a rule, with torch never imported (where torch is
    installed too: it must be imported lazily, not merely be absent)."""
    code = "\n".join([
        "import sys",
        *[f"import {name}" for name in CORE],
        "import numpy as np",
        "import fastfair",
        "fastfair.ops.weighted_average(np.ones((3, 4)), np.full(3, 1 / 3))",
        "fastfair.aggregators.build('aaggff-d', 10).weights([1, 4], [0.5, 1.0])",
        "fastfair.aggregators.OverGroups('fedmgda', [0, 1, 1, 0]).weights(",
        "    [0, 1, 2], [0.5, 1.0, 2.0], num_samples=[1, 2, 3], updates=np.ones((3, 2)))",
        "leaked = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))",
        "assert not leaked, f'torch imported by the numpy-only core: {leaked[:5]}'",
        "print('ok', fastfair.__file__)",
    ])
    done = _fresh_python(code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok ")
    assert Path(done.stdout.split(" ", 1)[1].strip()).resolve() == \
        Path(fastfair.__file__).resolve()


def test_package_declares_only_numpy():
    """The install requirements are NumPy alone (torch, Flower, ... are extras)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("no pyproject.toml beside the tests (an installed copy)")
    project = tomllib.loads(pyproject.read_text())["project"]
    names = [dep.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0]
             .split("~")[0].split("!")[0].strip().lower() for dep in project["dependencies"]]
    assert names == ["numpy"]
    assert any("torch" in dep for dep in project["optional-dependencies"]["torch"])


@pytest.fixture
def no_torch(monkeypatch):
    """``import torch`` fails as on a machine without it (sys.modules['torch'] = None), and the
    modules that import torch at import time are forgotten so they are imported anew."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "fastfair.methods.fedevg", raising=False)


def test_superfed_reference_names_torch_and_the_extra(no_torch):
    import numpy as np

    from fastfair.reference import superfed_gradients

    with pytest.raises(ModuleNotFoundError, match=TORCH_HINT) as info:
        superfed_gradients(np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(2), np.zeros((1, 1)),
                           np.array([0, 2]), np.array([True]), lambda x: x.sum(), mu=0.1, nu=0.1)
    assert info.value.name == "torch"


def test_fedevg_names_torch_and_the_extra(no_torch):
    with pytest.raises(ImportError, match=TORCH_HINT):
        importlib.import_module("fastfair.methods.fedevg")


def test_superfed_initial_model_names_torch_and_the_extra(no_torch):
    import numpy as np

    from fastfair import ops
    from fastfair.methods import superfed

    layout = ops.SegmentLayout.from_shapes([(2, 3)])
    with pytest.raises(ModuleNotFoundError, match=TORCH_HINT):
        superfed.initial_local_model([(2, 3)], layout, generator=None)
    # The options and the draws need no torch.
    lam = superfed.draw_lambdas(np.random.default_rng(0), 3, 2, "lm", True)
    assert lam.shape == (3, 2)


def test_import_torch_names_the_extra(no_torch):
    from fastfair._arrays import import_torch

    with pytest.raises(ModuleNotFoundError, match=r'the simulator needs PyTorch.*fastfair\[sim\]'):
        import_torch("the simulator", extra="sim")


class _BrokenTorch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A torch that is installed but fails to import for want of one of its own dependencies."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "torch" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ModuleNotFoundError("No module named 'sympy'", name="sympy")


def test_import_torch_passes_other_errors_through(monkeypatch):
    """Only a missing torch becomes the install hint; a broken install keeps its own error."""
    from fastfair._arrays import import_torch

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BrokenTorch(), *sys.meta_path])
    with pytest.raises(ModuleNotFoundError, match="sympy") as info:
        import_torch("anything")
    assert info.value.name == "sympy"
