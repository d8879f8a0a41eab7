"""The name tables answer in full whatever was imported first: each fills itself on its first
lookup, in a fresh interpreter as in one where everything is loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastfair._table import Table


@pytest.mark.parametrize("code", [
    "from fastfair.sim import registry; print(registry.list_datasets()[:2], "
    "registry.list_models()[:1], registry.get_dataset('femnist').family)",
    "from fastfair.sim.registry import DATASETS, MODELS; print(list(DATASETS)[:2], "
    "list(MODELS)[:1], 'femnist' in DATASETS and 'leaf')",
    "from fastfair.sim.data.settings import DataSettings; "
    "from fastfair.sim.registry import list_datasets, list_models, get_dataset; "
    "print(list_datasets()[:2], list_models()[:1], get_dataset('femnist').family)",
])
def test_the_registries_answer_in_full_in_a_fresh_interpreter(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['synthetic',", "'grouped']", "['logreg']", "leaf"]


def test_a_table_fills_once_on_its_first_lookup_and_refuses_a_name_twice():
    table: Table[int] = Table("thing", fill=("json",))
    table.add("one", 1)
    assert table._filled is False
    assert list(table) == ["one"] and table._filled
    with pytest.raises(ValueError, match="thing 'one' is registered twice"):
        table.add("one", 2)
    with pytest.raises(ValueError, match="unknown thing 'onw' \\(did you mean 'one'\\?\\)"):
        table.check("onw")
