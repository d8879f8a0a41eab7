"""The package's shape: rules are known by declarations, not classes, outside the aggregators; no
import cycle. Modules are split by concern, not by length (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fastfair import aggregators
from tests.helpers import ROOT

PACKAGE = ROOT / "fastfair"


def _modules():
    return [p for p in sorted(PACKAGE.rglob("*.py"))]


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_code_outside_the_aggregators_tests_a_rule_class():
    concrete = {cls.__name__ for cls in aggregators.RULES.values()}
    concrete |= {cls.__name__ for cls in aggregators.SERVER_OPTIMIZERS.values()}
    found = []
    for path in _modules():
        if "aggregators" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for call in re.findall(r"isinstance\([^,]+,\s*([^)]+)\)", line):
                names = set(re.findall(r"\w+", call))
                if names & concrete:
                    found.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def _classes_by_module():
    """{class name: the module that defines it} over the whole package."""
    owners = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                owners.setdefault(node.name, set()).add(path)
    return owners


def _exact_type_tests(source: str, classes=None):
    """``(line, class name)`` of every comparison that decides on a concrete class by identity
    or equality, ``type(x) is C``, ``cls is C``, ``runner_class(name) is not C``, ``C == type(z)``
    (either side). ``classes``: the class names to look for (None: any name compared with a
    ``type(...)`` call)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in node.ops):
            continue
        sides = [node.left, *node.comparators]
        names = [s for s in sides if isinstance(s, ast.Name)]
        if classes is None:
            if any(isinstance(s, ast.Call) and isinstance(s.func, ast.Name)
                   and s.func.id == "type" for s in sides):
                found += [(node.lineno, s.id) for s in names]
        else:
            found += [(node.lineno, s.id) for s in names if s.id in classes]
    return found


def test_exact_type_tests_live_with_the_class():
    """``type(x) is C`` or ``cls is C`` decides on a concrete class: only C's own module may ask
    it (the class answers others through a method or attribute, e.g.
    ``FlatModel.is_softmax_regression``, ``Runner.plays_batched``)."""
    owners = _classes_by_module()
    found = [f"{path.relative_to(PACKAGE)}:{line}: ... is {name}"
             for path in _modules() for line, name in _exact_type_tests(path.read_text(), owners)
             if path not in owners[name]]
    assert not found, "\n".join(found)


def test_the_type_test_finder_sees_every_form():
    src = ("a = type(x) is Foo\nb = type(y) is not Foo\nc = Bar == type(z)\n"
           "d = type(w) != Baz\ne = x is Foo\nf = runner_class(r) is Foo\ng = x is None\n"
           "h = isinstance(x, Foo)\n")
    assert [n for _, n in _exact_type_tests(src)] == ["Foo", "Foo", "Bar", "Baz"]
    assert [n for _, n in _exact_type_tests(src, {"Foo", "Bar", "Baz"})] == [
        "Foo", "Foo", "Bar", "Baz", "Foo", "Foo"]


def _run_time_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports a type checker
    reads and the interpreter never runs)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_run_time_nodes(child)])
            continue
        yield node
        yield from _run_time_nodes(node)


def test_the_import_walk_skips_type_checking_blocks():
    tree = ast.parse("import a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
                     "def f():\n    import d\n")
    assert [a.name for n in _run_time_nodes(tree) if isinstance(n, ast.Import)
            for a in n.names] == ["a", "c", "d"]


def _assert_no_import_cycle(nodes, stubs=False):
    """Raises naming the first cycle of the graph of ``nodes(tree)``'s imports over the
    package (and its packages' stubs ``__init__.pyi`` with ``stubs``)."""
    graph = {}
    for path in _modules() + (sorted(PACKAGE.rglob("__init__.pyi")) if stubs else []):
        me = _name(path)
        deps = set()
        for node in nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            deps |= {n for n in names if n.startswith("fastfair")}
        graph.setdefault(me, set()).update(deps)
    known = set(graph)
    # A module depends on the modules it names (a package's __init__ included, except its own).
    edges = {m: {d for d in deps if d in known and d != m and not m.startswith(d + ".")}
             for m, deps in graph.items()}
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for d in edges[m]:
            if state.get(d) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack + [m, d]))
            if d not in state:
                visit(d, stack + [m])
        state[m] = "done"

    for m in edges:
        if m not in state:
            visit(m, [])


def test_no_import_cycle():
    _assert_no_import_cycle(_run_time_nodes)


def test_no_import_cycle_for_type_checkers_either():
    """The imports under ``if TYPE_CHECKING:``, inside functions and in the lazy packages'
    stubs count too: the layers depend one way whoever reads them (the name tables fill
    themselves by module name, :class:`fastfair._table.Table`)."""
    _assert_no_import_cycle(ast.walk, stubs=True)


def _private_bases_from_elsewhere(source: str):
    """``(line, class, base)`` of every class that inherits a private class (``_Name``) another
    module defines: imported by name (``from m import _Name``) or reached as ``m._Name``."""
    tree = ast.parse(source)
    imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for a in node.names if a.name.startswith("_") and not a.name.startswith("__")}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            name = (base.id if isinstance(base, ast.Name) and base.id in imported else
                    base.attr if isinstance(base, ast.Attribute) and base.attr.startswith("_")
                    and not base.attr.startswith("__") else None)
            if name is not None:
                found.append((node.lineno, node.name, name))
    return found


def test_no_class_inherits_a_private_class_of_another_module():
    """A private class is its own module's detail: a class elsewhere that needs what it does
    owns a public object that does it (as ``FastFairStrategy`` owns its ``ReplyReader``)
    instead of inheriting it as a mixin."""
    found = [f"{path.relative_to(PACKAGE)}:{line}: class {cls}({base})"
             for path in _modules()
             for line, cls, base in _private_bases_from_elsewhere(path.read_text())]
    assert not found, "\n".join(found)


def test_a_private_mixin_from_another_module_is_found():
    source = ("from fastfair.integrations.flwr.replies import _Checks as _C, Public\n"
              "import fastfair.sim.engine as engine\n"
              "class _Own: ...\n"
              "class A(_C, Public): ...\n"
              "class B(engine._Runner): ...\n"
              "class C(_Own, engine.Runner): ...\n")
    assert _private_bases_from_elsewhere(source) == [(4, "A", "_C"), (5, "B", "_Runner")]
