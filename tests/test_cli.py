"""The command line's options of configuration fields come from the fields themselves: every
field of SimulationConfig is an option of ``simulate`` and ``sweep`` with the field's default,
reaches the configuration, is documented once, and a new field needs no change to the CLI. The
CLI reads run folders only through ``fastfair.sim.experiments``."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import typing

import pytest

import fastfair.sim.config as config_module
from fastfair import cli, cli_options
from fastfair.cli_options import HAND_WRITTEN, HelpFormatter, config_values, dest, flag
from fastfair.sim.config import DATA, SimulationConfig, doc
from fastfair.sim.experiments.run_folder import saved_config

COMMANDS = ("simulate", "sweep")
FIELDS = [f for f in dataclasses.fields(SimulationConfig) if f.name not in HAND_WRITTEN]
#: Fields whose option defaults to None: the CLI infers them (methods run on digits; a data set
#: with its own clients has them all).
INFERRED = {"dataset", "clients"}


def _commands(parser=None):
    parser = parser or cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def _option(command, option):
    return next((a for a in _commands()[command]._actions if option in a.option_strings), None)


def _default(f):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def test_only_the_rules_and_the_seed_are_written_by_hand():
    assert set(HAND_WRITTEN) == {"rule", "rule_options", "seed"}
    for command in COMMANDS:
        assert _option(command, "--compare") and _option(command, "--rule-option")
        assert _option(command, "--seeds")
    assert _option("simulate", "--rule") and _option("simulate", "--seed")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f.name)
def test_every_field_is_an_option_with_its_default(command, f):
    action = _option(command, flag(f))
    assert action is not None, f"{f.name} has no option {flag(f)} in fastfair {command}"
    assert action.dest == dest(f)
    expected = None if f.name in INFERRED else ([] if isinstance(_default(f), dict)
                                                 else _default(f))
    assert action.default == expected
    assert action.help and f.metadata["help"].replace("%", "%%") in action.help


@pytest.mark.parametrize("command", COMMANDS)
def test_no_options_make_the_default_configuration(command):
    args = cli._parser().parse_args([command])
    assert cli._config(args, ["fedavg"], 0) == SimulationConfig()
    assert cli._config(args, ["fedavg", "fedevg"], 0).dataset == "digits"


def _non_default(f, hints):
    """(command-line words, value the field gets) of a value other than the default."""
    default = _default(f)
    kind = hints[f.name]
    if isinstance(default, dict):
        return [flag(f), "a=1", flag(f), "b=x"], {"a": 1, "b": "x"}
    if kind is bool:
        return [flag(f)], True
    if "choices" in f.metadata:
        choice = next(c for c in cli_options._choices(f.metadata["choices"]) if c != default)
        return [flag(f), choice], choice
    if kind in (int, typing.Optional[int]):
        value = 7 if default is None else default + 1
    elif kind in (float, typing.Optional[float]):
        value = 0.25 if default != 0.25 else 0.5
    else:
        value = "elsewhere"
    return [flag(f), str(value)], value


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_reaches_its_field(command):
    hints = typing.get_type_hints(SimulationConfig)
    for f in FIELDS:
        words, value = _non_default(f, hints)
        args = cli._parser().parse_args([command, *words])
        got = config_values(args, SimulationConfig)[f.name]
        assert got == value and type(got) is type(value), (f.name, got, value)


def test_a_new_field_is_an_option_of_both_commands_without_touching_the_cli(monkeypatch):
    @dataclasses.dataclass
    class Extended(SimulationConfig):
        new_knob: int = dataclasses.field(default=3, metadata=doc(DATA, "a knob added later"))
        new_options: typing.Dict[str, typing.Any] = dataclasses.field(
            default_factory=dict, metadata=doc(DATA, "a new option (repeatable)"))

    monkeypatch.setattr(config_module, "SimulationConfig", Extended)
    commands = _commands(cli._parser())
    for command in COMMANDS:
        help_text = commands[command].format_help()
        assert "--new-knob" in help_text and "a knob added later (default: 3)" in help_text
        args = commands[command].parse_args(["--new-knob", "5", "--new-option", "k=2"])
        config = cli._config(args, ["fedavg"], 0)
        assert isinstance(config, Extended)
        assert (config.new_knob, config.new_options) == (5, {"k": 2})
        default = cli._config(commands[command].parse_args([]), ["fedavg"], 0)
        assert (default.new_knob, default.new_options) == (3, {})


@pytest.mark.parametrize("command", COMMANDS)
def test_each_default_is_shown_once(command):
    parser = _commands()[command]
    formatter = HelpFormatter(parser.prog)
    for action in parser._actions:
        if action.help:
            formatter._expand_help(action)  # as --help shows it (fails on a stray %)
            if formatter._get_help_string(action) != action.help:  # the default appended
                assert "default" not in action.help, action.option_strings


def test_key_value_options_are_checked():
    with pytest.raises(ValueError, match="--server-option expects KEY=VALUE"):
        cli_options.key_values(["momentum"], "--server-option")
    assert cli.main(["simulate", "--server-option", "momentum", "--quiet"]) == 2


def test_the_cli_reads_run_folders_only_through_the_experiments(tmp_path):
    source = inspect.getsource(cli)
    assert not any(word in source for word in ("json.load", "read_text", "open("))
    saved = {"rules": ["fedavg"], "config": SimulationConfig(rounds=3).to_dict(),
             "rule_options": {"fedavg": {}}, "checkpoint_every": 1}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert saved_config(tmp_path) == SimulationConfig(rounds=3)
    args = cli._parser().parse_args(["simulate", "--resume", str(tmp_path)])
    assert cli._device(args) == "cpu"
    with pytest.raises(ValueError, match="holds no config.json: it is not a fastfair run folder"):
        saved_config(tmp_path / "absent")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="not a valid run configuration"):
        saved_config(tmp_path)
    assert cli._device(cli._parser().parse_args(["simulate", "--resume",
                                                 str(tmp_path / "absent")])) == "cpu"


# ---------------------------------------------------------------------------------------------
# --resume: what the user typed, not what differs from a default; experiments and sweeps alike.

TINY_RUN = ["--rounds", "4", "--clients", "12", "--per-round", "4", "--eval-every", "2",
            "--quiet"]


def test_typed_options_are_what_the_user_gave_even_at_their_default():
    typed = cli._typed(["simulate", "--resume", "x", "--per-round", "10", "--quiet"])
    assert {"resume", "per_round", "quiet"} <= typed and "rounds" not in typed
    assert SimulationConfig().per_round == 10  # the case the old comparison let through


@pytest.mark.parametrize("extra", [["--per-round", "10"], ["--rounds", "4"], ["--seed", "0"]])
def test_resume_refuses_any_typed_run_option(tmp_path, extra, capsys):
    out = tmp_path / "run"
    assert cli.main(["simulate", "--rule", "fedavg", *TINY_RUN, "--checkpoint-every", "2",
                     "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["simulate", "--resume", str(out), *extra]) == 2
    assert "drop --" + extra[0][2:] in capsys.readouterr().err


def test_sweep_checkpoints_and_resumes_from_the_command_line(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", "--compare", "fedavg,aaggff-d", "--seeds", "0,1", *TINY_RUN]
    assert cli.main([*args, "--checkpoint-every", "2", "--out", str(out)]) == 0
    assert (out / "checkpoint.pt").is_file() and (out / "sweep.json").is_file()
    before = (out / "sweep_summary.csv").read_text()
    (out / "sweep_summary.csv").unlink()
    for command in ("sweep", "simulate"):  # either command continues a sweep's folder
        assert cli.main([command, "--resume", str(out), "--quiet"]) == 0
        assert (out / "sweep_summary.csv").read_text() == before
    assert saved_config(out).clients == 12


def test_version_and_build_in_help(capsys):
    import fastfair

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == \
        f"fastfair {fastfair.__version__}"
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert fastfair.build_info()["cpu_isa"] in text and ":class:" not in text


def test_an_option_for_every_rule_that_some_lack_suggests_the_rules_that_take_it(capsys):
    argv = ["simulate", "--rounds", "2", "--quiet", "--rule-option", "cdf=weibull"]
    assert cli.main(argv) == 2  # the default comparison: only aaggff-d takes cdf
    err = capsys.readouterr().err
    assert "'fedavg', 'fairavg', 'fedmaba' have no option 'cdf'" in err
    assert "did you mean aaggff-d:cdf=weibull?" in err


@pytest.mark.parametrize("argv, message", [
    (["--lr", "1e308"], "training diverged: the global model's loss on client"),
    (["--dataset", "grouped", "--group-shift", "inf"], "group_shift (--group-shift) must be"),
    (["--synthetic-alpha", "nan"], "synthetic_alpha (--synthetic-alpha) must be finite"),
    (["--seed", str(2 ** 64)], "seed (--seed) must be in [0, 2**63)"),
])
def test_hostile_values_are_refused_naming_the_option(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["simulate", "--rule", "fedavg", *TINY_RUN, *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
