"""Packages that import their public names on first use (``fastfair._lazy``) list each name once,
in their stub ``__init__.pyi``: the interpreter and type checkers read the same list."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastfair._lazy import stub_exports
from tests.helpers import ROOT

_PACKAGE = {
    "__init__.py": """
        from fastfair._lazy import lazy_exports

        VERSION = "1"
        __getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
        """,
    "__init__.pyi": """
        '''What lazypkg exports.'''

        from . import sub as sub
        from lazypkg.heavy import THING as THING

        VERSION: str
        """,
    "heavy.py": "THING: int = 42\n",
    "sub.py": "NAME = 'sub'\n",
}


def _write_package(root: Path) -> None:
    (root / "lazypkg").mkdir()
    for name, text in _PACKAGE.items():
        (root / "lazypkg" / name).write_text(textwrap.dedent(text))


def test_a_name_listed_once_in_the_stub_is_exported_lazily(tmp_path, monkeypatch):
    _write_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        pkg = importlib.import_module("lazypkg")
        assert pkg.__all__ == ["sub", "THING", "VERSION"]
        assert {"sub", "THING", "VERSION"} <= set(dir(pkg))
        assert "lazypkg.heavy" not in sys.modules
        assert pkg.THING == 42
        assert "lazypkg.heavy" in sys.modules and vars(pkg)["THING"] == 42
        from lazypkg import sub
        assert sub.NAME == "sub"
        with pytest.raises(AttributeError, match="has no attribute 'missing'"):
            pkg.missing  # noqa: B018
    finally:
        for name in [m for m in sys.modules if m.partition(".")[0] == "lazypkg"]:
            del sys.modules[name]


def test_type_checkers_read_the_same_stub(tmp_path):
    pytest.importorskip("mypy")
    _write_package(tmp_path)
    (tmp_path / "good.py").write_text(
        "import lazypkg\nfrom lazypkg import THING, sub\n\n"
        "x: int = THING\ny: str = lazypkg.VERSION + sub.NAME\n")
    (tmp_path / "bad.py").write_text("import lazypkg\n\nz = lazypkg.missing\n")

    def mypy(path):
        return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", path],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)

    good = mypy("good.py")
    assert good.returncode == 0, good.stdout
    bad = mypy("bad.py")
    assert bad.returncode == 1 and 'has no attribute "missing"' in bad.stdout, bad.stdout


def test_a_stub_holds_re_exports_and_declarations_only():
    where, names = stub_exports("p", "'''doc'''\nfrom . import a as a\nfrom p.m import B as B\n"
                                     "V: str\n")
    assert where == {"a": ("p.a", None), "B": ("p.m", "B")} and names == ["a", "B", "V"]
    with pytest.raises(ValueError, match="line 1"):
        stub_exports("p", "X = 1\n")


@pytest.mark.parametrize("stub", sorted(p.relative_to(ROOT).as_posix()
                                        for p in (ROOT / "fastfair").rglob("__init__.pyi")))
def test_every_lazy_package_exports_what_its_stub_lists(stub):
    package = importlib.import_module(str(Path(stub).parent).replace("/", "."))
    assert package.__all__
    for name in package.__all__:
        assert getattr(package, name) is not None, name
