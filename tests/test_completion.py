"""Shell completion of the ``fastfair`` command line (argcomplete's protocol, as the shell's
``register-python-argcomplete fastfair`` hook drives it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fastfair.cli_parser import comma_list_completer
from tests.helpers import ROOT


def test_a_comma_list_completes_its_last_item_without_repeats():
    complete = comma_list_completer(["fedavg", "fairavg", "aaggff-d", "aaggff-s"])
    assert complete("f") == ["fedavg", "fairavg"]
    assert complete("fedavg,aa") == ["fedavg,aaggff-d", "fedavg,aaggff-s"]
    assert complete("fedavg,") == ["fedavg,fairavg", "fedavg,aaggff-d", "fedavg,aaggff-s"]
    assert complete("x") == []


def _completions(line, tmp_path):
    out = tmp_path / "completions"
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
           "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-m", "fastfair"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return sorted(out.read_text().split())


@pytest.mark.parametrize("line, expected", [
    ("fastfair sw", ["sweep"]),
    ("fastfair simulate --datas", ["--dataset"]),
    ("fastfair simulate --dataset fe", ["femnist"]),
    ("fastfair sweep --compare fedavg,aag", ["fedavg,aaggff-d", "fedavg,aaggff-s"]),
])
def test_the_shell_gets_commands_options_and_rule_names(line, expected, tmp_path):
    pytest.importorskip("argcomplete")
    assert _completions(line, tmp_path) == expected


def test_without_a_completion_request_nothing_is_completed(capsys):
    from fastfair.cli import build_parser, complete

    complete(build_parser())            # no _ARGCOMPLETE: returns, prints nothing
    assert capsys.readouterr() == ("", "")
