"""Packages whose public names are imported on first use (PEP 562), so that importing a package
for one light module (its name tables, its options) does not import the heavy ones beside it
(torch, through the simulator's training code)."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, List, Mapping, Sequence, Tuple


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]],
                 subpackages: Tuple[str, ...] = ()) -> Tuple[
        Callable[[str], Any], Callable[[], List[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` whose public names live in
    its submodules: ``exports`` maps each submodule to the names it defines.

    ``package.NAME`` imports the submodule that defines ``NAME`` on first use and keeps the value
    in the package's namespace, so later uses cost a dictionary lookup; ``from package import
    NAME`` goes through the same hook. A name in no submodule raises ``AttributeError`` as a
    plain module does.

    Parameters
    ----------
    package
        The package's ``__name__``.
    exports
        Each module (absolute name) -> the public names it defines.
    subpackages
        The package's sub-packages that are public names themselves (``package.NAME`` imports
        ``package.NAME`` on first use).

    Returns
    -------
    (__getattr__, __dir__)
        To assign to the package's module-level ``__getattr__`` and ``__dir__``.
    """

    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in subpackages:
            return importlib.import_module(f"{package}.{name}")
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(where) | set(subpackages))

    return __getattr__, __dir__
