"""A run folder's files: a named pipe in place of the saved configuration is refused without
blocking, an --out that is a file is refused, and a full disk while writing a sweep's outputs says
so, naming the file."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from fastfair.cli import main
from fastfair.sim import SimulationConfig, Sweep
from fastfair.sim.experiments import run_folder

TINY = ["--rounds", "2", "--clients", "8", "--per-round", "4", "--quiet"]


def _in_thread(fn, seconds=30):
    """fn()'s result (or its exception, raised here), failing instead of hanging if it blocks."""
    box = {}

    def call():
        try:
            box["result"] = fn()
        except Exception as exc:  # handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_a_named_pipe_as_the_saved_configuration_is_refused(tmp_path, capsys):
    os.mkfifo(tmp_path / "config.json")
    assert _in_thread(lambda: main(["simulate", "--resume", str(tmp_path)])) == 2
    assert "config.json is not a regular file (a named pipe)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="config.json is not a regular file"):
        _in_thread(lambda: run_folder.saved_config(tmp_path))


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("x")
    assert main(["simulate", "--rule", "fedavg", *TINY, "--out", str(path)]) == 2
    assert f"out {path} is a file, not a folder" in capsys.readouterr().err
    assert path.read_text() == "x"


def test_a_full_disk_names_the_sweep_file(tmp_path, monkeypatch):
    import fastfair.sim.reporting.sweep_report as sweep_report

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sweep_report, "open", full, raising=False)  # the module's files only
    sweep = Sweep(SimulationConfig(rounds=2, clients=8, per_round=4), ["fedavg"], [0],
                  out=tmp_path / "s")
    with pytest.raises(OSError, match="no space left on device while writing .*sweep_summary.csv"):
        sweep.run()
