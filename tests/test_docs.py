"""The Python examples in README.md and docs/ run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [(doc.name, k, code) for doc in DOCS
          for k, code in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S))]


@pytest.mark.parametrize("name,index,code", BLOCKS, ids=[f"{n}-{k}" for n, k, _ in BLOCKS])
def test_example_runs(name, index, code):
    # Examples of optional integrations (Flower) need their extra installed; the test extras have it.
    for module in re.findall(r"^\s*(?:from|import) (flwr)\b", code, re.M):
        pytest.importorskip(module)
    exec(compile(code, f"{name} example {index}", "exec"), {"__name__": "__doc_example__"})


def test_there_are_examples():
    assert {n for n, _, _ in BLOCKS} >= {"README.md", "aggregators.md"}
