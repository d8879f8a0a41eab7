"""Interrupted runs: SIGINT or SIGTERM stops a run at a round boundary with a whole checkpoint
and no ``*.tmp`` left, says where it stopped and how to resume (exit 130 or 143), and the
resumed run is the uninterrupted one bit for bit; a run folder is held by one process at a
time, a second one refused naming the folder and the holder's pid."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from fastfair.sim import checkpoint as checkpoint_module
from fastfair.sim.experiments.stopping import FolderLock
from tests.helpers import ROOT

TINY = ["--clients", "60", "--per-round", "6", "--eval-every", "2", "--quiet"]
ARGS = ["--rule", "fedmaba", "--rounds", "40", "--checkpoint-every", "5", *TINY]


def _simulate(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "fastfair", "simulate", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc):
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err.decode()


def _without_times(history):
    return [{k: v for k, v in rec.items() if k != "seconds"} for rec in history]


def _stop(out, signum):
    """A run of ``ARGS`` into ``out`` sent ``signum`` once its first checkpoint is written;
    returns its exit code and standard error."""
    proc = _simulate(*ARGS, "--out", str(out))
    deadline = time.time() + 120
    while not (out / "checkpoint.pt").exists() and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.002)
    proc.send_signal(signum)
    return _finish(proc)


def test_sigint_stops_at_a_round_boundary_and_the_run_resumes_exactly(tmp_path):
    straight = _simulate(*ARGS, "--out", str(tmp_path / "straight"))
    out = tmp_path / "stopped"
    code, err = _stop(out, signal.SIGINT)
    assert code == 130, err
    assert "fastfair simulate: SIGINT: stopped after round " in err and "of fedmaba" in err
    assert f"its checkpoint is saved in {out}. Resume with: fastfair simulate --resume {out}" \
        in err
    assert "Traceback" not in err and not list(out.glob("*.tmp"))
    assert _finish(straight)[0] == 0
    code, err = _finish(_simulate("--resume", str(out), "--quiet"))
    assert code == 0, err
    a = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    b = json.loads((out / "metrics.json").read_text())
    assert ({k: _without_times(v) for k, v in a.items()}
            == {k: _without_times(v) for k, v in b.items()})
    assert ((tmp_path / "straight" / "final_accuracy.csv").read_text()
            == (out / "final_accuracy.csv").read_text())


def test_sigterm_stops_with_exit_143_and_a_whole_checkpoint(tmp_path):
    out = tmp_path / "stopped"
    code, err = _stop(out, signal.SIGTERM)
    assert code == 143, err
    assert "fastfair simulate: SIGTERM: stopped after round " in err
    assert f"Resume with: fastfair simulate --resume {out}" in err
    assert not list(out.glob("*.tmp"))
    state = checkpoint_module.load(out / "checkpoint.pt")
    assert state["current_rule"] == "fedmaba"


def test_a_folder_held_by_another_process_is_refused_naming_it_and_the_pid(tmp_path, capsys):
    from fastfair.cli import main

    out = tmp_path / "run"
    assert main(["simulate", *ARGS[:2], "--rounds", "2", "--checkpoint-every", "1", *TINY,
                 "--out", str(out)]) == 0
    lock = FolderLock(out)
    lock.acquire()  # held as a run writing the folder holds it (another descriptor: refused)
    try:
        assert main(["simulate", "--resume", str(out), "--quiet"]) == 2
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert f"run folder {out} is in use by another fastfair process (pid {os.getpid()})" in err
    assert main(["simulate", "--resume", str(out), "--quiet"]) == 0  # released: it resumes


class _SignalAt:
    """Sends this process ``signum`` once, after round ``at`` of the first run whose name
    starts with ``run`` (as Ctrl-C would, between two rounds' work; a second signal would end
    the process at once)."""

    def __init__(self, run, at, signum=signal.SIGINT):
        self.run, self.at, self.signum, self.sent = run, at, signum, False

    def on_run_start(self, run, config):
        pass

    def on_round(self, run, record):
        if run.startswith(self.run) and record["round"] == self.at and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)

    def on_run_end(self, run, summary):
        pass

    def close(self):
        pass


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-at-a-time"])
def test_a_stopped_sweep_saves_the_round_it_stopped_at_and_resumes_exactly(tmp_path, batched):
    from fastfair.sim import SimulationConfig, Sweep
    from fastfair.sim.experiments.stopping import Interrupted, graceful_signals

    config = SimulationConfig(clients=30, per_round=6, rounds=6, eval_every=2)
    rules, kwargs = ["fedavg", "aaggff-d"], dict(seeds=[0, 1], batched=batched)
    whole = Sweep(config, rules, **kwargs, out=tmp_path / "whole").run()
    out = tmp_path / "stopped"
    with graceful_signals(), pytest.raises(Interrupted) as stop:
        Sweep(config, rules, **kwargs, out=out, checkpoint_every=4,
              callbacks=[_SignalAt("aaggff-d" if not batched else "fedavg", 3)]).run()
    assert stop.value.round == 3 and stop.value.saved and stop.value.out == out
    assert stop.value.exit_code == 130 and not list(out.glob("*.tmp"))
    assert "Resume with: fastfair sweep --resume" in stop.value.describe("sweep")
    resumed = Sweep.resume(out).run()
    for a, b in zip(whole.runs, resumed.runs):
        assert _without_times(a.history) == _without_times(b.history)
        assert (a.final == b.final).all()


def _worker_of_rank(parent, rank):
    """The process id of torchrun ``parent``'s worker of ``rank`` (read from ``/proc``)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if ppid == parent and f"RANK={rank}".encode() in environ:
            return int(entry)
    return None


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds torchrun's workers in /proc")
def test_sigterm_to_one_of_two_processes_stops_both_at_one_round_with_a_whole_checkpoint(
        tmp_path):
    out = tmp_path / "stopped"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    args = ["--rule", "fedmaba", "--rounds", "100000", "--checkpoint-every", "3", *TINY,
            "--eval-every", "1000", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node", "2", "-m", "fastfair", "simulate", *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not (out / "checkpoint.pt").exists() and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.01)
    worker = None
    while worker is None and proc.poll() is None and time.time() < deadline:
        worker = _worker_of_rank(proc.pid, 1)
    assert worker is not None, "no worker of rank 1"
    os.kill(worker, signal.SIGTERM)
    code, err = _finish(proc)
    rounds = [int(r) for r in re.findall(r"SIGTERM: stopped after round (\d+)", err)]
    assert len(rounds) == 2 and rounds[0] == rounds[1], err[-3000:]  # every rank, one round
    assert err.count(f"its checkpoint is saved in {out}. Resume with") == 2, err[-3000:]
    assert "nothing was saved" not in err and "Connection reset" not in err
    assert not list(out.glob("*.tmp"))
    state = checkpoint_module.load(out / "checkpoint.pt")
    assert state["current"]["round"] == rounds[0]
