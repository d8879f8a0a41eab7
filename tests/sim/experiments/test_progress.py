"""The progress bar of experiments and sweeps: tqdm.auto, shown by default only where someone
watches (a terminal, a notebook)."""

from __future__ import annotations

import io
import sys

import pytest

from fastfair.sim import Experiment, SimulationConfig
from fastfair.sim.experiments import common


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_shown_by_default_in_a_terminal_and_not_in_a_log(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not common.interactive()
    assert common.progress_bar(3, 0, "x", None).disable
    assert not common.progress_bar(3, 0, "x", True).disable
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert common.interactive()
    bar = common.progress_bar(3, 0, "x", None)
    assert not bar.disable and common.progress_bar(3, 0, "x", False).disable
    from tqdm.auto import tqdm

    assert isinstance(bar, tqdm)


def test_progress_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match=r"progress must be True, False or None .*got 'yes'"):
        Experiment(SimulationConfig(clients=10, per_round=2, rounds=1), progress="yes")
