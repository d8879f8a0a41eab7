"""One idiom for every kind of name (data sets, models, rules, server optimisers, objectives,
availability processes, ...): a :class:`Table` that fills itself on first lookup, by importing
the modules that register into it or the ``"module:Name"`` targets it was given, named by string
so that making the table (and listing its names) imports nothing. A table answers only once it
is filled: whatever was imported first, ``list(table)`` is every name.

.. code-block:: python

    RULES = Table("rule", targets={"fedavg": "fastfair.aggregators.fedavg:FedAvg"})
    list(RULES)          # ['fedavg'], importing no rule
    RULES["fedavg"]      # the class, its module imported now
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple, TypeVar

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
    targets
        Entries given as ``"module:Name"`` (``Name`` may be dotted); each is imported on its
        own first lookup.

    A module registers with :meth:`add` (directly or through a decorator), which does not fill
    the table; every read (``table[name]``, ``name in table``, iteration, ``len``) fills it
    first. :meth:`check` raises the ``ValueError`` that lists the names and suggests the
    closest.
    """

    def __init__(self, kind: str, fill: Tuple[str, ...] = (),
                 targets: Optional[Mapping[str, str]] = None) -> None:
        self.kind = kind
        self._fill = fill
        self._filled = not fill
        self._entries: Dict[str, Any] = dict(targets or {})
        self._targets = set(self._entries)
        self._target_of: Dict[str, str] = dict(targets or {})

    def _ready(self) -> Dict[str, Any]:
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

    def target(self, name: str) -> str:
        """The ``"module:Name"`` that ``name`` was given as, imported or not (KeyError for a
        name registered with :meth:`add`): another table can key itself by it without
        importing anything."""
        return self._target_of[name]

    def check(self, name: str) -> None:
        """Raises ValueError unless ``name`` is in the table, listing the names."""
        check_name(self.kind, name, list(self._ready()))

    def __getitem__(self, name: str) -> V:
        value = self._ready()[name]
        if name in self._targets:
            module, _, attribute = value.partition(":")
            value = importlib.import_module(module)
            for part in attribute.split("."):
                value = getattr(value, part)
            self._entries[name] = value
            self._targets.discard(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._ready()))

    def __len__(self) -> int:
        return len(self._ready())

    def __contains__(self, name: object) -> bool:
        return name in self._ready()

    def __repr__(self) -> str:
        return f"Table({self.kind!r}, {list(self._ready())!r})"
