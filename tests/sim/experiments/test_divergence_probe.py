"""scripts/cifar_divergence_probe.py reads a run's streamed ``rounds.csv`` and says whether the
run diverged, and in which round, however the run ended."""

from __future__ import annotations

import importlib.util

from tests.helpers import ROOT


def _probe():
    spec = importlib.util.spec_from_file_location(
        "cifar_divergence_probe", ROOT / "scripts" / "cifar_divergence_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path, losses, acc_at=()):
    lines = ["run,round,metric,value"]
    for t, loss in enumerate(losses, 1):
        lines += [f"fedavg,{t},participants,10", f"fedavg,{t},train_loss,{loss}"]
        if t in acc_at:
            lines.append(f"fedavg,{t},acc_mean,0.5")
    path.write_text("\n".join(lines) + "\n")


def test_rounds_are_read_back_one_dict_per_round_in_order(tmp_path):
    probe = _probe()
    _write(tmp_path / "rounds.csv", [2.3, 2.1, 1.9, 1.7], acc_at=(2, 4))
    rows = probe.read_rounds(tmp_path / "rounds.csv")
    assert [r["round"] for r in rows] == ["1", "2", "3", "4"]
    assert rows[1]["acc_mean"] == "0.5" and "acc_mean" not in rows[0]
    assert probe.read_rounds(tmp_path / "missing.csv") == []


def test_blocks_average_their_rounds_and_the_verdict_names_the_first_bad_round(tmp_path):
    probe = _probe()
    _write(tmp_path / "rounds.csv", [2.0, 4.0, 1.0, 3.0], acc_at=(2, 4))
    lines, verdict = probe.summary("run", probe.read_rounds(tmp_path / "rounds.csv"), "", 2, 4,
                                   0)
    assert "round     2  train loss mean   3.0000 max    4.0000  acc_mean 0.5000" in lines[0]
    assert "round     4  train loss mean   2.0000 max    3.0000" in lines[1]
    assert verdict == "ok, 4 rounds, no divergence"
    _write(tmp_path / "rounds.csv", [2.0, 1.5, "nan", "nan"])
    rows = probe.read_rounds(tmp_path / "rounds.csv")
    assert probe.summary("run", rows, "", 2, 4, 0)[1] == "DIVERGED at round 3"
    # The engine refused the round after the last one it wrote.
    _write(tmp_path / "rounds.csv", [2.0, 1.5])
    rows = probe.read_rounds(tmp_path / "rounds.csv")
    message = "ValueError: training diverged: the global model's loss on client 7 is nan"
    assert probe.summary("run", rows, message, 2, 4, 1)[1] == "DIVERGED at round 3"
    assert probe.summary("run", rows, "", 2, 4, -9)[1] == \
        "stopped at round 2 (exit -9), no divergence so far"
