"""One idiom for every kind of name (data sets, models, ...): a :class:`Table` that fills
itself on first lookup by importing the modules that register into it, named by string so that
making the table imports nothing. A table answers only once it is filled: whatever was imported
first, ``list(table)`` is every name."""

from __future__ import annotations

import importlib
from typing import Dict, Iterator, Mapping, Tuple, TypeVar

from fastfair._options import check_name

V = TypeVar("V")


class Table(Mapping[str, V]):
    """The names of one ``kind`` and their values, in registration order.

    Parameters
    ----------
    kind
        What a name names, for errors (``"data set"``).
    fill
        The modules (absolute names) that register every built-in entry; imported on the
        first lookup, not before.

    A module registers with :meth:`add` (directly or through a decorator), which does not fill
    the table; every read (``table[name]``, ``name in table``, iteration, ``len``) fills it
    first. :meth:`check` raises the ``ValueError`` that lists the names and suggests the
    closest.
    """

    def __init__(self, kind: str, fill: Tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._fill = fill
        self._filled = not fill
        self._entries: Dict[str, V] = {}

    def _ready(self) -> Dict[str, V]:
        if not self._filled:
            self._filled = True  # set first: the modules imported below register into this
            for module in self._fill:
                importlib.import_module(module)
        return self._entries

    def add(self, name: str, value: V) -> None:
        """Registers ``value`` under ``name`` (ValueError when the name is taken)."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice; give the second one "
                             "another name")
        self._entries[name] = value

    def check(self, name: str) -> None:
        """Raises ValueError unless ``name`` is in the table, listing the names."""
        check_name(self.kind, name, list(self._ready()))

    def __getitem__(self, name: str) -> V:
        return self._ready()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._ready()))

    def __len__(self) -> int:
        return len(self._ready())

    def __contains__(self, name: object) -> bool:
        return name in self._ready()

    def __repr__(self) -> str:
        return f"Table({self.kind!r}, {list(self._ready())!r})"
