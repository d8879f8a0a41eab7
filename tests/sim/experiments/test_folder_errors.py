"""A run folder's files: a named pipe in place of the saved configuration is refused without
blocking, an --out that is a file is refused, and a full disk while writing an experiment's or a
sweep's outputs says so, naming the file."""

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


def _full_disk_for(monkeypatch, name):
    """Every write of the output file ``name`` (through fastfair's one atomic writer) fails
    with ENOSPC; other files are written."""
    import builtins

    from fastfair import _files

    def fake_open(file, mode="r", *args, **kwargs):
        if os.path.basename(file) == name + ".tmp":
            raise OSError(errno.ENOSPC, "No space left on device")
        return builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr(_files, "open", fake_open, raising=False)


def test_a_full_disk_names_the_sweep_file(tmp_path, monkeypatch):
    _full_disk_for(monkeypatch, "sweep_summary.csv")
    sweep = Sweep(SimulationConfig(rounds=2, clients=8, per_round=4), ["fedavg"], [0],
                  out=tmp_path / "s")
    with pytest.raises(OSError, match="no space left on device while writing .*sweep_summary.csv"):
        sweep.run()


@pytest.mark.parametrize("name", ["models.pt", "metrics.json", "summary.json"])
def test_a_full_disk_under_an_experiment_is_the_command_line_error(tmp_path, monkeypatch,
                                                                      capsys, name):
    """Every output of an experiment goes through the one writer: the command line reports a
    full disk as an error naming the file (exit 2), whichever file it was."""
    _full_disk_for(monkeypatch, name)
    out = tmp_path / "e"
    assert main(["simulate", "--rule", "fedavg", *TINY, "--out", str(out)]) == 2
    assert f"no space left on device while writing {out / name}" in capsys.readouterr().err
    assert not (out / (name + ".tmp")).exists()
