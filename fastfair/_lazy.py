"""Packages whose public names are imported on first use (PEP 562), so that importing a package
for one light module (its name tables, its options) does not import the heavy ones beside it
(torch, through the simulator's training code).

Such a package lists its public names once, in its stub ``__init__.pyi``, as the re-exports type
checkers read::

    from . import registry as registry                   # a sub-package or submodule
    from fastfair.aggregators.afl import AFL as AFL      # a name a submodule defines
    __version__: str                                     # a name the package defines itself

and its ``__init__.py`` says only::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)

:func:`lazy_exports` reads the stub when the package is imported (a few small files, parsed in
well under a millisecond each), so what type checkers see and what runs are the same list.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple


def stub_exports(package: str, stub: str) -> Tuple[Dict[str, Tuple[str, Optional[str]]],
                                                   List[str]]:
    """The names a package's stub exports, read from its source.

    Parameters
    ----------
    package
        The package's ``__name__`` (what ``from . import NAME`` is relative to).
    stub
        The text of the package's ``__init__.pyi``.

    Returns
    -------
    (where, names)
        ``where`` maps each imported name to ``(module, attribute)``: the module that holds it
        and its name there, or ``None`` where the name is that module itself (a sub-package).
        ``names`` is every public name in the stub's order, those the package defines itself
        (``NAME: type``) included.

    Raises
    ------
    ValueError
        If the stub holds a statement other than a docstring, a re-export
        (``from M import N as N``) or a declaration, or an import with a relative level above 1.
    """
    where: Dict[str, Tuple[str, Optional[str]]] = {}
    names: List[str] = []
    for node in ast.parse(stub).body:
        if isinstance(node, ast.ImportFrom) and node.level <= 1:
            if node.level == 1 and node.module is None:
                for alias in node.names:
                    where[alias.asname or alias.name] = (f"{package}.{alias.name}", None)
            else:
                module = f"{package}.{node.module}" if node.level else str(node.module)
                for alias in node.names:
                    where[alias.asname or alias.name] = (module, alias.name)
            names += [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            raise ValueError(f"the stub of {package} holds line {node.lineno}, which is neither "
                             "a re-export 'from M import N as N' nor a declaration 'N: type'")
    return where, names


def lazy_exports(package: str, init_file: str) -> Tuple[
        Callable[[str], Any], Callable[[], List[str]], List[str]]:
    """The module ``__getattr__``, ``__dir__`` and ``__all__`` of ``package``, whose public names
    are those its stub ``__init__.pyi`` (beside ``init_file``) re-exports.

    ``package.NAME`` imports the module that defines ``NAME`` on first use and keeps the value in
    the package's namespace, so later uses cost a dictionary lookup; ``from package import NAME``
    goes through the same hook. A name the stub does not import raises ``AttributeError`` as a
    plain module does.

    Parameters
    ----------
    package
        The package's ``__name__``.
    init_file
        The package's ``__file__`` (its ``__init__.py``); the stub is the ``.pyi`` beside it.

    Returns
    -------
    (__getattr__, __dir__, __all__)
        To assign to the package's module-level names of the same names.
    """
    where, names = stub_exports(package, Path(init_file).with_suffix(".pyi").read_text())

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = where[name]
        value = importlib.import_module(module)
        if attribute is not None:
            value = getattr(value, attribute)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, names
