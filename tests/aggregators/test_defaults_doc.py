"""docs/defaults.md lists every option of every registered rule and server optimiser with its
current default: a default changed in code but not in the table (or the reverse) fails here."""

from __future__ import annotations

import ast
import math
import re

import pytest

from fastfair.aggregators import registry
from fastfair.aggregators.server_opt import SERVER_OPTIMIZERS
from tests.helpers import ROOT

DOC = ROOT / "docs" / "defaults.md"
ROW = re.compile(r"^\| `(\w+)` \| `([^`]*)` \|", re.M)


def documented() -> dict:
    """``{name: {option: default}}`` from the ``### name`` tables of docs/defaults.md."""
    tables = {}
    for block in re.split(r"^### ", DOC.read_text(), flags=re.M)[1:]:
        name, body = block.split("\n", 1)
        tables[name.strip()] = {opt: math.inf if text == "inf" else ast.literal_eval(text)
                                for opt, text in ROW.findall(body)}
    return tables


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", sorted(registry.RULES) + sorted(SERVER_OPTIMIZERS))
def test_defaults_table_matches_the_registry(name):
    options = (registry.rule_options(name) if name in registry.RULES
               else registry.server_optimizer_options(name))
    table = documented().get(name)
    assert table is not None, f"docs/defaults.md has no section '### {name}'"
    assert list(table) == list(options), f"{name}: options differ from the registry's"
    for opt, spec in options.items():
        assert _same(table[opt], spec.default), (
            f"{name}.{opt}: docs/defaults.md says {table[opt]!r}, the code {spec.default!r}")


def test_every_section_is_a_registered_name():
    assert set(documented()) == set(registry.RULES) | set(SERVER_OPTIMIZERS)
