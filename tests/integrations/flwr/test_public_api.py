"""The Flower strategy uses Flower's public API only: no private name of Flower's strategy
classes (``_check_and_log_replies``, ...) is read or overridden by fastfair's."""

from __future__ import annotations

import ast

import pytest

flwr = pytest.importorskip("flwr")

from fastfair.integrations.flwr import strategy  # noqa: E402
from tests.helpers import ROOT  # noqa: E402


def _private_names_of(cls) -> set:
    return {name for klass in cls.__mro__ if klass.__module__.startswith("flwr")
            for name in vars(klass) if name.startswith("_") and not name.startswith("__")}


def test_the_strategy_touches_no_private_name_of_flowers_classes():
    flower = _private_names_of(strategy.FastFairStrategy)
    used = set()
    for path in (ROOT / "fastfair" / "integrations" / "flwr").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                used.add(node.attr)
            elif isinstance(node, ast.FunctionDef):
                used.add(node.name)
    assert "_check_and_log_replies" in flower  # what the check looks for is there
    assert not used & flower, sorted(used & flower)
