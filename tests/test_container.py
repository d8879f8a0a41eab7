"""The Dockerfile and the devcontainer parse, and run the README's commands (docker itself is
not run here: building the image needs the network and a docker daemon)."""

from __future__ import annotations

import json
import re
import shlex

from tests.helpers import ROOT

#: The instructions a Dockerfile may hold (Docker's reference).
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
                "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK",
                "SHELL", "MAINTAINER"}


def parse_dockerfile(text: str) -> list:
    """``(INSTRUCTION, arguments)`` per instruction of ``text``: comments and blank lines
    dropped, backslash continuations joined; ValueError naming the line of an unknown
    instruction or of a continuation left open at the end."""
    instructions, pending, start = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        start = start or number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole, pending = (pending + stripped).strip(), ""
        keyword, _, arguments = whole.partition(" ")
        if keyword.upper() not in INSTRUCTIONS:
            raise ValueError(f"line {start}: unknown instruction {keyword!r}")
        instructions.append((keyword.upper(), " ".join(arguments.split())))
        start = 0
    if pending:
        raise ValueError(f"line {start}: a continuation is left open at the end")
    return instructions


def readme_commands() -> list:
    """The commands of the README's "Two commands" section, in order."""
    section = (ROOT / "README.md").read_text().split("## Two commands", 1)[1]
    return re.findall(r"```bash\n(.*?)\n```", section.split("\n## ", 1)[0], re.S)


def test_the_parser_refuses_what_docker_refuses():
    assert parse_dockerfile("FROM a\nRUN x \\\n  # note\n  && y\n") == [("FROM", "a"),
                                                                        ("RUN", "x && y")]
    for text, message in (("FROM a\nRUNN x\n", "line 2: unknown instruction 'RUNN'"),
                          ("FROM a\nRUN x \\\n", "line 2: a continuation is left open")):
        try:
            parse_dockerfile(text)
        except ValueError as exc:
            assert message in str(exc)
        else:
            raise AssertionError(f"{text!r} was accepted")


def test_the_dockerfile_builds_the_package_and_runs_the_main_job_as_the_readme_says():
    test_install, main_job = readme_commands()
    install, run = main_job.split(" && ")
    instructions = parse_dockerfile((ROOT / "Dockerfile").read_text())
    assert instructions[0][0] == "FROM" and instructions[0][1].startswith("python:3.11")
    assert ("RUN", install) in instructions                 # the README's install, verbatim
    assert [i for i in instructions if i[0] == "CMD"] == [("CMD", json.dumps(shlex.split(run)))]
    copies = [i for i in instructions if i[0] == "COPY"]
    assert copies and instructions.index(copies[0]) < instructions.index(("RUN", install))
    assert "pip install -c constraints.txt" in test_install


def test_the_image_builds_from_the_sources_alone():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"build/", "**/*.so", ".git"} <= set(ignored)     # no compiled core from this tree


def test_the_devcontainer_builds_the_dockerfile_and_runs_the_readme_commands():
    config = json.loads((ROOT / ".devcontainer" / "devcontainer.json").read_text())
    assert config["build"] == {"dockerfile": "../Dockerfile", "context": ".."}
    test_install, main_job = readme_commands()
    install = test_install.split(" && ")[0]
    run = main_job.split(" && ")[1]
    assert config["postCreateCommand"] == f"{install} && {run}"
