"""The experiment layer: the Python API writes what the command line writes, every option is
honoured or refused before anything is written, and resume refuses what it cannot continue."""

from __future__ import annotations

import json

import pytest

from fastfair.cli import main
from fastfair.sim import Experiment, SimulationConfig

TINY = ["--clients", "40", "--per-round", "5", "--rounds", "4", "--eval-every", "2", "--quiet"]


def _without_times(metrics):
    return {rule: [{k: v for k, v in r.items() if k != "seconds"} for r in hist]
            for rule, hist in metrics.items()}


def test_python_experiment_writes_what_the_cli_writes(tmp_path):
    assert main(["simulate", "--compare", "fedavg,aaggff-d", "--rule-option",
                 "aaggff-d:cdf=frechet", "--out", str(tmp_path / "cli"), *TINY]) == 0
    config = SimulationConfig(clients=40, per_round=5, rounds=4, eval_every=2)
    result = Experiment(config, ["fedavg", "aaggff-d"], {"aaggff-d": {"cdf": "frechet"}},
                        out=tmp_path / "py").run()
    cli, py = tmp_path / "cli", tmp_path / "py"
    assert sorted(p.name for p in cli.iterdir()) == sorted(p.name for p in py.iterdir())
    assert (cli / "final_accuracy.csv").read_text() == (py / "final_accuracy.csv").read_text()
    assert (cli / "config.json").read_text() == (py / "config.json").read_text()
    assert (_without_times(json.loads((cli / "metrics.json").read_text()))
            == _without_times(json.loads((py / "metrics.json").read_text())))
    assert "aaggff-d" in result.table() and set(result.finals) == {"fedavg", "aaggff-d"}


def test_experiment_in_memory_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = Experiment(SimulationConfig(clients=20, per_round=4, rounds=2, eval_every=1)).run()
    assert result.out is None and list(tmp_path.iterdir()) == []
    assert [r["round"] for r in result.histories["fedavg"]] == [1, 2]
    with pytest.raises(ValueError, match=r"checkpoint_every \(--checkpoint-every\) needs an "):
        Experiment(SimulationConfig(), checkpoint_every=2)


@pytest.mark.parametrize("argv,message", [
    (["--rule", "fedevg", "--lr", "0.5"], "does not use lr (--lr)"),
    (["--rule", "superfed-mm", "--server-option", "lr=0.5"], "server_options must not set lr"),
    (["--rule", "fedavg", "--hidden", "32"], "hidden = 32 has no effect"),
    (["--rule", "fedavg", "--dataset", "digits", "--max-samples", "90"], "max_samples = 90"),
    (["--rule", "fedavg", "--local-steps", "3", "--epochs", "2"], "epochs = 2 has no effect"),
    (["--rule", "term", "--rule-option", "tilt=\"x\""], "option 'tilt' takes float"),
    (["--rule", "fedavg", "--server-optimizer", "fedadam", "--server-option", "beta=0.5"],
     "server optimizer 'fedadam' has no option 'beta' (did you mean"),
    (["--rule", "fedavg", "--availability", "bernoulli", "--availability-option", "p=0.5"],
     "availability 'bernoulli' has no option 'p'"),
    (["--compare", "fedavg,fedmabba"], "unknown rule 'fedmabba' (did you mean 'fedmaba'?)"),
])
def test_every_option_is_honoured_or_refused_before_writing(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    assert main(["simulate", *argv, "--out", str(out), "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_resume_refuses_what_it_cannot_continue(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["simulate", "--rule", "fedavg", "--out", str(out), *TINY]) == 0
    assert main(["simulate", "--resume", str(out)]) == 2
    assert "saved no checkpoint" in capsys.readouterr().err
    assert main(["simulate", "--resume", str(tmp_path / "missing")]) == 2
    assert "not a fastfair run folder" in capsys.readouterr().err

    saved = tmp_path / "saved"
    assert main(["simulate", "--rule", "fedavg", "--out", str(saved), "--checkpoint-every", "2",
                 *TINY]) == 0
    assert main(["simulate", "--resume", str(saved), "--rounds", "8"]) == 2
    assert "saved options; drop --rounds" in capsys.readouterr().err
    config = json.loads((saved / "config.json").read_text())
    config["config"]["lr"] = 0.3
    (saved / "config.json").write_text(json.dumps(config))
    assert main(["simulate", "--resume", str(saved)]) == 2
    assert "changed since the checkpoint" in capsys.readouterr().err
    (saved / "checkpoint.pt").write_bytes(b"\x80\x02 not a checkpoint")
    assert main(["simulate", "--resume", str(saved)]) == 2
    assert "not a readable fastfair checkpoint" in capsys.readouterr().err


def test_rules_command_lists_rules_optimizers_and_methods(capsys):
    assert main(["rules"]) == 0
    printed = capsys.readouterr().out
    for name in ("aaggff-d", "fedcvar", "fedadagrad", "superfed-lm"):
        assert name in printed


def test_threads_and_heap_settings_last_only_while_a_run_does():
    import ctypes
    import subprocess
    import sys
    import textwrap

    import torch

    import fastfair
    from fastfair.sim.process import run_tuned

    before = torch.get_num_threads(), fastfair.get_num_threads()
    seen = run_tuned(1, lambda: (torch.get_num_threads(), fastfair.get_num_threads()))
    assert seen == (1, 1)
    assert (torch.get_num_threads(), fastfair.get_num_threads()) == before
    if not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"):
        pytest.skip("the heap setting applies to glibc's malloc only")

    # Measured in a fresh interpreter: in a long process glibc may have moved the main thread to
    # a secondary arena (after lock contention with other threads: Ray's, Flower's), whose heaps
    # cannot hold a 64 MB block, so the block is mapped whatever the setting. The interpreter
    # imports what a run imports first: with only torch loaded, the heap has no free holes for
    # the small allocations between the blocks, which then land above a freed block and keep it
    # from being reused for a few rounds.
    script = textwrap.dedent("""
        import resource, torch
        import fastfair.sim.experiments.experiment
        from fastfair.sim.process import kept_heap

        def faults_of_second_block():
            torch.empty(64 << 20, dtype=torch.uint8).fill_(1)  # above glibc's 32 MB map limit
            start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            torch.empty(64 << 20, dtype=torch.uint8).fill_(1)
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start

        with kept_heap():
            # The heap grows to hold both blocks; where a small allocation lands between
            # them, the freed block is not reused at once, and a further round settles it.
            faults_of_second_block()
            faults_of_second_block()
            kept = min(faults_of_second_block(), faults_of_second_block())
        print(kept, faults_of_second_block())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    kept, fresh = map(int, done.stdout.split())
    assert kept < 1000 < fresh  # 64 MB is 16,384 pages: freshly mapped, each faults once


def test_one_rule_may_be_given_as_a_string_and_unknown_ones_name_the_closest():
    config = SimulationConfig(clients=10, per_round=2, rounds=1)
    assert Experiment(config, rules="fedavg").rules == ["fedavg"]
    with pytest.raises(ValueError, match=r"unknown rule 'fedav' \(did you mean 'fedavg'\?\)"):
        Experiment(config, rules=["fedavg", "fedav"])
    with pytest.raises(TypeError, match=r"rules must be a rule name or a list of rule names"):
        Experiment(config, rules=[1])
