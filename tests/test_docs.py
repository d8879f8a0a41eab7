"""The Python examples in README.md and docs/ run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [(doc.name, k, code) for doc in DOCS
          for k, code in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S))]


@pytest.mark.parametrize("name,index,code", BLOCKS, ids=[f"{n}-{k}" for n, k, _ in BLOCKS])
def test_example_runs(name, index, code):
    # Examples of optional integrations (Flower) need their extra installed;
    # the test extras have it.
    if re.search(r"^\s*(?:from|import) (?:flwr|fastfair\.integrations\.flwr)\b", code, re.M):
        pytest.importorskip("flwr")
    exec(compile(code, f"{name} example {index}", "exec"), {"__name__": "__doc_example__"})


def test_there_are_examples():
    assert {n for n, _, _ in BLOCKS} >= {"simulator.md", "data.md", "aggregators.md"}


# ---------------------------------------------------------------------------------------------
# Code, tests and docs cite numbered sections of the docs as "docs/algorithms.md §2.5.6" (several
# sections: "docs/algorithms.md §2.5.2-§2.5.7", "§2.4, §2.5"); inside docs/, "§2.5" alone refers
# to the same file. Every citation must name a heading that exists, e.g. "### 2.5.6 ...".

CITATION = re.compile(r"docs/([\w.-]+\.md)((?:\s*(?:,|-|–|and|or|to)?\s*§\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{1,6}[ \t]+(\d+(?:\.\d+)*)\.?[ \t]", re.M)
CITING_TREES = ("fastfair", "csrc", "bench", "tests", "examples")
CITING_SUFFIXES = {".py", ".h", ".cpp", ".cu", ".cuh", ".md", ".txt"}


def doc_sections(name: str, docs_dir: Path = ROOT / "docs") -> set:
    """The section numbers of the headings of ``docs_dir/name`` (empty if it does not exist)."""
    path = docs_dir / name
    return set(HEADING.findall(path.read_text())) if path.is_file() else set()


def unresolved_citations(text: str, docs_dir: Path = ROOT / "docs") -> list:
    """Every ``docs/<file>.md §N`` of ``text`` whose file or section heading is missing, as
    ``"docs/<file>.md §N"`` strings in order of appearance."""
    bad = []
    for match in CITATION.finditer(text):
        name = match.group(1)
        sections = doc_sections(name, docs_dir)
        bad += [f"docs/{name} §{num}" for num in SECTION.findall(match.group(2))
                if num not in sections]
    return bad


def citing_files():
    files = [ROOT / "README.md"]
    for tree in CITING_TREES:
        files += sorted(p for p in (ROOT / tree).rglob("*")
                        if p.suffix in CITING_SUFFIXES and p.is_file())
    return [p for p in files if p != Path(__file__).resolve()]


def test_code_citations_resolve():
    bad = []
    for path in citing_files():
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            bad += [f"{path.relative_to(ROOT)}:{lineno}: {c}" for c in unresolved_citations(line)]
    assert not bad, "citations of missing doc sections:\n" + "\n".join(bad)


LINK = re.compile(r"\[([^\]]*)\]\(([\w./-]*\.md)?(?:#[^)\s]*)?\)")


def test_docs_cross_references_resolve():
    # "[§2.5](algorithms.md#...)" names a section of the linked file; a bare "§2.5" one of the
    # same file.
    bad = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        bad += [f"{doc.name}: {c}" for c in unresolved_citations(text)]
        for label, target in LINK.findall(text):
            sections = doc_sections(target or doc.name, doc.parent)
            bad += [f"{doc.name}: [§{num}]({target})" for num in SECTION.findall(label)
                    if num not in sections]
        rest = LINK.sub("", CITATION.sub("", text))
        bad += [f"{doc.name}: §{num}" for num in SECTION.findall(rest)
                if num not in doc_sections(doc.name)]
    assert not bad, "references to missing sections:\n" + "\n".join(bad)


def test_section_numbers_are_unique():
    for doc in sorted((ROOT / "docs").glob("*.md")):
        numbers = HEADING.findall(doc.read_text())
        assert len(numbers) == len(set(numbers)), f"{doc.name}: a section number is repeated"


def test_algorithms_sections_exist():
    # The sections the code cites today; renumbering them breaks those citations.
    assert {"1.3", "2.2", "2.3", "2.4", "2.4.2", "2.5", "2.5.2", "2.5.6", "2.5.7", "2.6",
            "2.6.5", "3", "3.2", "3.4", "4", "4.2", "4.4", "5", "6"} <= doc_sections(
        "algorithms.md")


def test_unresolved_citations_are_found(tmp_path):
    (tmp_path / "algorithms.md").write_text("# Algorithms\n## 2 A\n### 2.5 B\n#### 2.5.6 C\n")
    cite = "docs/" + "algorithms.md"    # built here so that this file cites nothing itself
    assert unresolved_citations(f"see {cite} §2.5.6 and {cite} §2", tmp_path) == []
    assert unresolved_citations(f"{cite} §2.5.2-§2.5.6, §9.1", tmp_path) == [
        f"{cite} §2.5.2", f"{cite} §9.1"]
    assert unresolved_citations(f"({cite} §2.5.7)", tmp_path) == [f"{cite} §2.5.7"]
    missing = "docs/" + "missing.md"
    assert unresolved_citations(f"{missing} §1", tmp_path) == [f"{missing} §1"]
    # "§2.5" must not be read as a prefix of "§2.5.6", nor "2.5" of a heading "2.51".
    (tmp_path / "other.md").write_text("## 2.51 D\n")
    assert unresolved_citations("docs/" + "other.md §2.5", tmp_path) == ["docs/other.md §2.5"]
    # Plain mentions of docs without a section are not citations.
    assert unresolved_citations(f"see {cite}", tmp_path) == []


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than '-' and '_' dropped,
    spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_doc_anchors_resolve():
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([^)\s]+)\)", doc.read_text()):
            path = (doc.parent / target) if target else doc
            headings = re.findall(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", path.read_text(), re.M) \
                if path.is_file() else []
            if anchor not in {github_anchor(h) for h in headings}:
                bad.append(f"{doc.name}: {target}#{anchor}")
    assert not bad, "links to missing anchors:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# The other code blocks: every command line of the README and the guides that runs fastfair is
# one its parser takes, making the run it describes (built and checked, not run), and every TOML
# block is a configuration file that fastfair sweep takes.

COMMAND = re.compile(r"(?:^|\s)(?:python -m fastfair|fastfair)\s+(.*)")


def _shell_lines(code: str):
    """The commands of a shell block: backslash continuations joined, comments dropped."""
    import shlex

    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            yield " ".join(shlex.quote(w) for w in words)


COMMANDS = [(doc.name, line) for doc in DOCS
            for code in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", doc.read_text(), re.S)
            for line in _shell_lines(code) if COMMAND.search(line)]
TOMLS = [(doc.name, code) for doc in DOCS
         for code in re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S)]


def _built(argv):
    """The experiment or sweep the command line ``argv`` makes (nothing run or written)."""
    from fastfair import cli
    from fastfair.cli_options import apply_file
    from fastfair.sim.config import SimulationConfig
    from fastfair.sim.distributed import Distributed

    args = cli.build_parser().parse_args(argv)
    args.typed = cli._typed(argv)
    if args.command not in ("simulate", "sweep"):
        return None
    if getattr(args, "config", None) is not None:
        apply_file(args, args.config, args.typed, SimulationConfig)
    return cli._experiment(args, Distributed())


@pytest.mark.parametrize("name,line", COMMANDS, ids=[f"{n}: {c[:60]}" for n, c in COMMANDS])
def test_command_lines_make_their_runs(name, line, tmp_path):
    import shlex

    pytest.importorskip("torch")
    argv = shlex.split(COMMAND.search(line).group(1))
    if "--data-dir" in argv:  # a data set on disk the test does not have: the options parse
        argv[argv.index("--data-dir") + 1] = str(tmp_path)
        with pytest.raises(ValueError, match="femnist: no|train|not found|no .* in"):
            _built(argv)
        return
    if "--out" in argv:
        argv[argv.index("--out") + 1] = str(tmp_path / "out")
    _built(argv)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,text", TOMLS, ids=[f"{n}-{k}" for k, (n, _) in enumerate(TOMLS)])
def test_toml_blocks_are_configuration_files(name, text, tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "run.toml"
    path.write_text(text)
    built = _built(["sweep", "--config", str(path), "--out", str(tmp_path / "out")])
    assert built.rules and built.base.rounds >= 1


def test_there_are_command_lines_and_files():
    assert {n for n, _ in COMMANDS} >= {"README.md", "sweeps.md"} and TOMLS


def test_maths_renders_as_text_without_a_script():
    # docs/site/plain_math.py: the site's formulas as Unicode text, no MathJax from a CDN.
    import sys

    sys.path.insert(0, str(ROOT / "docs" / "site"))
    try:
        from plain_math import to_text
    finally:
        sys.path.pop(0)
    assert to_text(r"\sum_{i \in S} c_i X_i \le \lambda") == "∑_{i ∈ S} c_i X_i ≤ λ"
    assert to_text(r"\leq \leftarrow \mathrm{lr} \ell") == "≤ ← lr ℓ"
