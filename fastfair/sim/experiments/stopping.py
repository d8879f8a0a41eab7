"""Stopping a run cleanly, and one process per run folder.

A run played under :func:`graceful_signals` (the command line plays every run so) turns SIGINT
(Ctrl-C) and SIGTERM into a request to stop: the round being played finishes, a run with a
checkpoint saves one at that round boundary (under torchrun, a signal to any process stops every
process at the same boundary) (whole: no ``*.tmp`` is left), and
:class:`Interrupted` says where it stopped; the command line prints it with the command that
resumes the run and exits 130 (SIGINT) or 143 (SIGTERM). A second signal while stopping ends
the process at once, as signals do by default.

:class:`FolderLock` holds a run folder while a process writes it (an exclusive ``flock`` on the
folder itself, so the folder holds no extra file; the operating system releases it when the
process ends, even by ``kill -9``): a second process that would resume or write the same folder
is refused, naming the folder and the holder's process id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Callable, Iterator, List, Optional

if TYPE_CHECKING:
    from fastfair.sim.distributed import Distributed

#: The signal that asked the current run to stop (None: none did).
_requested: List[Optional[int]] = [None]


class Interrupted(Exception):
    """A run stopped at a round boundary by SIGINT or SIGTERM.

    Attributes: ``signum`` (the signal), ``run`` (the run being played), ``round`` (the last
    round played), ``saved`` (whether a checkpoint of that round was written) and ``out`` (the
    run folder, or None; the orchestration that played the run fills it in).
    """

    def __init__(self, signum: int, run: str, round: int, saved: bool) -> None:
        self.signum, self.run, self.round, self.saved = signum, run, round, saved
        self.out: Optional[Path] = None
        super().__init__(f"{signal.Signals(signum).name}: stopped after round {round} of {run}")

    def describe(self, command: str) -> str:
        """Where the run stopped and, when a checkpoint was saved, the command that resumes
        it (``command``: ``simulate`` or ``sweep``)."""
        if self.saved and self.out is not None:
            return (f"{self}; its checkpoint is saved in {self.out}. Resume with: "
                    f"fastfair {command} --resume {self.out}")
        return (f"{self}; nothing was saved to resume from (run with --out and "
                "--checkpoint-every N to make a run resumable)")

    @property
    def exit_code(self) -> int:
        """``128 + signum``, the shell's status of a process ended by that signal (130, 143)."""
        return 128 + self.signum


def requested() -> Optional[int]:
    """The signal that asked the current run to stop, or None."""
    return _requested[0]


def check(run: str, round: int, save: Optional[Callable[[], None]],
          dist: Optional[Distributed] = None, saves: Optional[bool] = None) -> None:
    """At a round boundary: when a stop was requested of this process or, under ``dist``
    (several processes), of any of them, every process stops at this same round: calls
    ``save()`` where given (the checkpoint of this round; rank 0 writes it), waits for every
    process (so the checkpoint is whole before any exits) and raises :class:`Interrupted`
    alike on each; else nothing. ``saves``: whether a checkpoint of this round is written by
    some process (None: whether ``save`` is given here), for the message.

    The request is reduced over the processes (the largest signal number) by one all-reduce
    of one integer, which every process makes at every round boundary."""
    signum = _requested[0] or 0
    if dist is not None:
        signum = dist.max_int(signum)
    if not signum:
        return
    if save is not None:
        save()
    if dist is not None:
        dist.barrier()
    raise Interrupted(signum, run, round, save is not None if saves is None else saves)


def remove_partial_files(out: Path) -> None:
    """Removes the ``*.tmp`` files an interrupted write left in the run folder ``out``."""
    for path in Path(out).glob("*.tmp"):
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def graceful_signals() -> Iterator[None]:
    """SIGINT and SIGTERM request a stop at the next round boundary (see the module) while the
    block runs; the earlier handlers come back after it. Outside the main thread (where Python
    cannot install handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request(signum: int, frame: Optional[FrameType]) -> None:
        if _requested[0] is not None:  # a second signal: stop now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        _requested[0] = signum

    before = {s: signal.signal(s, request) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        _requested[0] = None


class FolderLock:
    """An exclusive hold on the run folder ``out`` (see the module); ``acquire()`` refuses,
    naming the folder and the holder's process id, when another process holds it."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self._fd: Optional[int] = None

    def acquire(self) -> None:
        """Holds the folder (again: nothing); ValueError when another process holds it."""
        if self._fd is not None:
            return
        try:
            import fcntl
        except ImportError:  # no flock (Windows): folders are not locked
            return
        fd = os.open(self.out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            pid = _holder(self.out)
            raise ValueError(f"run folder {self.out} is in use by another fastfair process "
                             f"({'pid ' + str(pid) if pid else 'its pid unknown'}); wait for "
                             "it to end, or stop it, before resuming or writing this folder") \
                from None
        self._fd = fd

    def release(self) -> None:
        """Lets the folder go (nothing when not held)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases its flock
            self._fd = None


def _holder(out: Path) -> Optional[int]:
    """The process id holding a ``flock`` on the folder ``out``, from ``/proc/locks`` (Linux),
    or None where it cannot be told."""
    try:
        inode = os.stat(out).st_ino
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 fd:01:4567 0 EOF"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(inode):
            try:
                return int(parts[4])
            except ValueError:
                return None
    return None
