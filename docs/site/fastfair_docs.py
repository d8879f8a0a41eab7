"""The API reference's directives: each public module documented once, at its own path.

``.. fastfair-package:: fastfair.aggregators`` renders the package's docstring, a table of the
names it exports (``__all__``) linked to where each is documented, the members its
``__init__`` defines itself, and then every public plain submodule (no leading ``_``; a
sub-package has its own page) with the classes, functions and constants it defines. A name is
documented in the module that defines it, so a docstring's
``:class:`~fastfair.sim.rounds.engine.Simulation``` links, and a re-export is never documented
twice. A name exported by a package but defined in a private module (``fastfair._C``) is
documented on the package's page.

``.. fastfair-module:: fastfair.cli`` renders one module the same way; ``.. fastfair-help::``
the command line's ``--help`` text as it prints.

At the end of the build every public module of ``fastfair`` must have been rendered by one of
these directives: a new module without a page is a build error (the build runs with ``-W``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import os
import pkgutil
import re
from contextlib import redirect_stdout
from typing import List, Optional, Set, Tuple

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

LOG = logging.getLogger(__name__)
ROOT_PACKAGE = "fastfair"
# Run by ``python -m fastfair``; nothing to document.
SKIP_MODULES = {"fastfair.__main__"}


def _public(modname: str) -> bool:
    return not any(part.startswith("_") for part in modname.split("."))


def public_modules(package: str = ROOT_PACKAGE) -> List[str]:
    """Every public module and package under ``package``, itself included, by name."""
    found = [package]
    mod = importlib.import_module(package)
    for info in pkgutil.iter_modules(getattr(mod, "__path__", [])):
        name = f"{package}.{info.name}"
        if not _public(name) or name in SKIP_MODULES:
            continue
        found += public_modules(name) if info.ispkg else [name]
    return found


def _assigned_names(module) -> Set[str]:
    """The names a module binds at its top level by assignment (its constants)."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return set()
    names = set()
    for node in ast.parse(source).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for target in targets:
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _documented_attributes(modname: str) -> Set[str]:
    """Module-level names with a ``#:`` comment or a docstring after their assignment."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        analyzer = ModuleAnalyzer.for_module(modname)
        analyzer.analyze()
    except Exception:  # a compiled module has no source: nothing documented
        return set()
    return {name for (scope, name) in analyzer.attr_docs if scope == ""}


def _exported_anywhere() -> Set[Tuple[str, str]]:
    """(defining module, name) of every name some public package exports in ``__all__``."""
    out = set()
    for modname in public_modules():
        mod = importlib.import_module(modname)
        for name in getattr(mod, "__all__", ()):
            home = home_of(mod, name)
            if home is not None:
                out.add((home[0], name))
    return out


def home_of(package, name: str) -> Optional[Tuple[str, str]]:
    """(module, role) where ``package.name`` is documented, or None for a module."""
    obj = getattr(package, name)
    if inspect.ismodule(obj):
        return None
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj) \
            or callable(obj) and hasattr(obj, "__module__") and hasattr(obj, "__qualname__"):
        modname = getattr(obj, "__module__", None) or package.__name__
        role = "class" if inspect.isclass(obj) else "func"
        if modname in SKIP_MODULES or not modname.startswith(ROOT_PACKAGE):
            modname = package.__name__
        return modname, role
    # A constant: the module that assigns it, searched from the package down.
    for modname in [package.__name__] + [m for m in public_modules(package.__name__)
                                         if m != package.__name__] \
            if hasattr(package, "__path__") else [package.__name__]:
        mod = importlib.import_module(modname)
        if name in _assigned_names(mod) and getattr(mod, name, None) is obj:
            return modname, "data"
    # Assigned elsewhere and imported (``THRESHOLD_KEY`` of fastfair.aggregators.objectives).
    for modname in public_modules():
        mod = importlib.import_module(modname)
        if name in _assigned_names(mod) and getattr(mod, name, None) is obj:
            return modname, "data"
    return package.__name__, "data"


def defined_members(modname: str) -> List[str]:
    """The public names ``modname`` itself defines, in source order: its classes and functions,
    and the constants that are documented (``#:``) or exported by some package."""
    mod = importlib.import_module(modname)
    explicit = getattr(mod, "__all__", None)
    attr_docs = _documented_attributes(modname)
    exported = EXPORTED.get()
    assigned = _assigned_names(mod)
    names = []
    for name, obj in vars(mod).items():
        if name.startswith("_") and not (explicit and name in explicit) or inspect.ismodule(obj):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if getattr(obj, "__module__", None) == modname:
                names.append(name)
        elif name in assigned and (name in attr_docs or (modname, name) in exported
                                   or explicit is not None and name in explicit):
            names.append(name)
    return names


class _Exported:
    value: Optional[Set[Tuple[str, str]]] = None

    def get(self) -> Set[Tuple[str, str]]:
        if self.value is None:
            self.value = _exported_anywhere()
        return self.value


EXPORTED = _Exported()


def _attribute_doc(modname: str, name: str) -> str:
    from sphinx.pycode import ModuleAnalyzer

    try:
        analyzer = ModuleAnalyzer.for_module(modname)
        analyzer.analyze()
    except Exception:  # no source
        return ""
    return "\n".join(analyzer.attr_docs.get(("", name), []))


def _summary(obj, home: Optional[Tuple[str, str]] = None, name: str = "") -> str:
    """The first paragraph of an object's docstring (of a constant's ``#:`` comment)."""
    if home is not None and home[1] == "data":
        doc = _attribute_doc(home[0], name)
    elif inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj):
        doc = inspect.getdoc(obj) or ""
    else:
        doc = ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ")
    # The table's cells are read in the package's context, not the object's: a role's short
    # target would not resolve there, so roles show as code (the name column holds the link).
    first = re.sub(r":[\w:]+:`~?(?:[^`<]*<)?([^`>]*)>?`",
                   lambda m: "``" + m.group(1).split(".")[-1] + "``"
                   if not m.group(0).startswith(":math:") else m.group(0), first)
    return first


class _ApiDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def _record(self, modname: str) -> None:
        documented = self.env.__dict__.setdefault("fastfair_documented", {})
        documented.setdefault(self.env.docname, set()).add(modname)

    def _module_lines(self, modname: str, heading: Optional[str]) -> List[str]:
        self._record(modname)
        lines = []
        if heading:
            lines += [heading, "-" * len(heading), ""]
        members = defined_members(modname)
        lines += [f".. automodule:: {modname}"]
        if members:
            lines += [f"   :members: {', '.join(members)}", "   :undoc-members:",
                      "   :show-inheritance:", "   :member-order: bysource"]
        return lines + [""]

    def _render(self, lines: List[str]) -> List[nodes.Node]:
        node = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=self.get_source_info()[0]),
                                 node)
        return node.children


class FastfairPackage(_ApiDirective):
    option_spec = {"exclude": directives.unchanged}

    def run(self) -> List[nodes.Node]:
        package = self.arguments[0]
        exclude = set((self.options.get("exclude") or "").split())
        mod = importlib.import_module(package)
        lines = self._module_lines(package, None)
        exports = list(getattr(mod, "__all__", ()))
        private_homes = []
        own = defined_members(package)
        if exports:
            lines += [".. rubric:: Exported names", "",
                      ".. list-table::", "   :widths: 30 70", ""]
            for name in exports:
                home = home_of(mod, name)
                if home is None:
                    target = f":mod:`{getattr(mod, name).__name__}`"
                else:
                    where, role = home
                    if not _public(where) or where == package and name not in own:
                        where, private_homes = package, private_homes + [(name, role)]
                    role = "data" if role == "data" else role
                    target = f":py:{role}:`{name} <{where}.{name}>`"
                summary = _summary(getattr(mod, name), home, name)
                lines += [f"   * - {target}", f"     - {summary}" if summary else "     -"]
            lines.append("")
        directive = {"class": "autoclass", "func": "autofunction", "data": "autodata"}
        for name, role in private_homes:
            lines += [f".. {directive[role]}:: {package}.{name}", ""]
        if hasattr(mod, "__path__"):
            for info in pkgutil.iter_modules(mod.__path__):
                sub = f"{package}.{info.name}"
                if info.ispkg or not _public(sub) or sub in SKIP_MODULES or info.name in exclude:
                    continue
                lines += self._module_lines(sub, f"``{sub}``")
        return self._render(lines)


class FastfairModule(_ApiDirective):
    def run(self) -> List[nodes.Node]:
        return self._render(self._module_lines(self.arguments[0], None))


class FastfairHelp(SphinxDirective):
    """The ``--help`` text of ``fastfair`` (no argument) or of one of its commands."""

    optional_arguments = 1

    def run(self) -> List[nodes.Node]:
        from fastfair import cli

        argv = ([self.arguments[0]] if self.arguments else []) + ["--help"]
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "100"
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                try:
                    cli.main(argv)
                except SystemExit:
                    pass
        finally:
            if old is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = old
        text = out.getvalue()
        if not text.strip():
            LOG.warning("fastfair %s printed no help", " ".join(argv), location=self.get_location())
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def _canonical(obj) -> Optional[str]:
    """The dotted name an object is documented under, or None."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if module and qualname and (inspect.isclass(obj) or inspect.isroutine(obj)):
        return f"{module}.{qualname}"
    return None


def _lookup(path: str):
    """The object a dotted path names, importing the longest module prefix; None if none."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # not a module: try a shorter prefix
            continue
        owner = None
        for part in parts[cut:]:
            if not hasattr(obj, part):
                return None
            owner, obj = obj, getattr(obj, part)
        return owner, parts[-1], obj
    return None


def _candidates(target: str, module: Optional[str], klass: Optional[str]) -> List[str]:
    """Canonical names a reference written as ``target`` may mean: a name a package re-exports
    (``fastfair.sim.Experiment``), a name imported into the docstring's module
    (``Experiment``), a member inherited from a base class (``on_round``)."""
    paths = [target]
    if klass and module:
        paths.append(f"{module}.{klass}.{target}")
    if module:
        # The docstring's module, then its packages (a module's docstring may name what its
        # package exports).
        parts = module.split(".")
        paths += [".".join(parts[:cut] + [target]) for cut in range(len(parts), 0, -1)]
    out = []
    for path in paths:
        found = _lookup(path)
        if found is None:
            continue
        owner, name, obj = found
        if inspect.isclass(owner):
            # A member: named on the class of the MRO that defines it.
            for base in owner.__mro__:
                if name in vars(base):
                    out.append(f"{base.__module__}.{base.__qualname__}.{name}")
                    break
            continue
        canonical = _canonical(obj)
        if canonical:
            out.append(canonical)
        elif inspect.ismodule(owner):
            home = home_of(owner, name) if not inspect.ismodule(obj) else None
            if home:
                out.append(f"{home[0]}.{name}")
    return out


def _resolve(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    domain = env.get_domain("py")
    for name in _candidates(target, node.get("py:module"), node.get("py:class")):
        if name == target:
            continue
        if not _public(name):
            return contnode  # a private name (documented nowhere): rendered as code
        for role in ("obj", node["reftype"]):
            ref = domain.resolve_xref(env, node["refdoc"], app.builder, role, name,
                                      node, contnode)
            if ref is not None:
                return ref
    return None


def _drop_type_docstring(app, what, name, obj, options, lines):
    """A constant without a ``#:`` comment shows no docstring, not its type's (``int([x])``)."""
    if what in ("data", "attribute") and not inspect.isclass(obj) and lines:
        own = type(obj).__doc__
        own = inspect.cleandoc(own) if isinstance(own, str) else ""
        if own and "\n".join(lines).strip() == own.strip():
            lines[:] = []


def _purge(app, env, docname):
    getattr(env, "fastfair_documented", {}).pop(docname, None)


def _merge(app, env, docnames, other):
    mine = env.__dict__.setdefault("fastfair_documented", {})
    mine.update(getattr(other, "fastfair_documented", {}))


def _check_coverage(app, env):
    documented = set().union(*getattr(env, "fastfair_documented", {}).values())
    missing = [m for m in public_modules() if m not in documented]
    for modname in missing:
        LOG.warning("public module %s is on no API page (docs/site/api/)", modname)


def setup(app):
    app.add_directive("fastfair-package", FastfairPackage)
    app.add_directive("fastfair-module", FastfairModule)
    app.add_directive("fastfair-help", FastfairHelp)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check_coverage)
    app.connect("missing-reference", _resolve)
    app.connect("autodoc-process-docstring", _drop_type_docstring)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True,
            "env_version": 1}
