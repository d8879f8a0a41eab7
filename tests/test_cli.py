"""The command line's options of configuration fields come from the fields themselves: every
field of SimulationConfig is an option of ``simulate`` and ``sweep`` with the field's default,
reaches the configuration, is documented once, and a new field needs no change to the CLI. The
CLI reads run folders only through ``fastfair.sim.experiments``."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
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
    parser = parser or cli.build_parser()
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
    args = cli.build_parser().parse_args([command])
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
        choice = next(c for c in f.metadata["choices"] if c != default)
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
        args = cli.build_parser().parse_args([command, *words])
        got = config_values(args, SimulationConfig)[f.name]
        assert got == value and type(got) is type(value), (f.name, got, value)


def test_a_new_field_is_an_option_of_both_commands_without_touching_the_cli(monkeypatch):
    @dataclasses.dataclass
    class Extended(SimulationConfig):
        new_knob: int = dataclasses.field(default=3, metadata=doc(DATA, "a knob added later"))
        new_options: typing.Dict[str, typing.Any] = dataclasses.field(
            default_factory=dict, metadata=doc(DATA, "a new option (repeatable)"))

    monkeypatch.setattr(config_module, "SimulationConfig", Extended)
    commands = _commands(cli.build_parser())
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


def _help_lines(command):
    """{option: its help as --help prints it} of every option of ``command``."""
    parser = _commands()[command]
    formatter = parser._get_formatter()
    return {action.option_strings[-1]: formatter._expand_help(action)
            for action in parser._actions if action.option_strings and action.help}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_that_takes_a_value_shows_its_default(command):
    # Flags (off by default) and repeatable options (none by default) aside, every option says
    # what it is when not given, once: "(default: none)" when it is nothing.
    parser = _commands()[command]
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 \
                or isinstance(action, argparse._AppendAction):
            continue
        text = _help_lines(command)[action.option_strings[-1]]
        assert "default" in text, (action.option_strings, text)
        assert text.count("(default") <= 1, (action.option_strings, text)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_section_and_option_is_shown_once(command):
    parser = _commands()[command]
    titles = [g.title for g in parser._action_groups if g._group_actions]
    assert len(titles) == len(set(titles)), titles
    body = parser.format_help().split("\n\n", 2)[-1]  # after the usage and the description
    firsts = [line.split()[0].rstrip(",") for line in body.splitlines()
              if line.startswith("  -")]
    for action in parser._actions:
        listed = [word for word in firsts if word in action.option_strings]
        assert len(listed) == 1, (action.option_strings, listed)


@pytest.mark.parametrize("command", [None, *COMMANDS, "rules", "reproduce"])
def test_help_is_plain_text(command):
    parser = cli.build_parser() if command is None else _commands()[command]
    text = parser.format_help()
    assert "%%" not in text and "``" not in text
    assert not re.search(r":(class|func|mod|meth|data|attr):", text), text


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
    args = cli.build_parser().parse_args(["simulate", "--resume", str(tmp_path)])
    assert cli._device(args) == "cpu"
    with pytest.raises(ValueError, match="holds no config.json: it is not a fastfair run folder"):
        saved_config(tmp_path / "absent")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="not a valid run configuration"):
        saved_config(tmp_path)
    assert cli._device(cli.build_parser().parse_args(["simulate", "--resume",
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
    (["--dataset", "grouped", "--group-shift", "inf"], "group_shift (--group-shift) must be"),
    (["--synthetic-alpha", "nan"], "synthetic_alpha (--synthetic-alpha) must be finite"),
    (["--seed", str(2 ** 64)], "seed (--seed) must be in [0, 2**63)"),
    # every range check names the option, not only the field
    (["--per-round", "0"], "per_round (--per-round) must be >= 1; got 0"),
    (["--per-round", "50"], "per_round (50, --per-round) cannot exceed clients"),
    (["--lr", "-1"], "lr (--lr) must be > 0; got -1.0"),
    (["--lr-decay", "2"], "lr_decay (--lr-decay) must be in (0, 1]; got 2.0"),
    (["--validation", "0.9"], "validation (--validation) must be in [0, 0.5]"),
    (["--local-steps", "0"], "local_steps (--local-steps) must be >= 1 or None"),
    (["--dataset", "grouped", "--group-shift", "-1"], "group_shift (--group-shift) must be >= 0"),
    (["--max-update-norm", "-1"], "max_update_norm (--max-update-norm) must be finite and in"),
    (["--max-samples-per-client", "0"], "max_samples_per_client (--max-samples-per-client) must"),
    (["--threads", "1000000"], "threads (--threads) must be an integer in [1, 4096]"),
    (["--threads", "0"], "threads (--threads) must be an integer in [1, 4096]"),
])
def test_hostile_values_are_refused_naming_the_option(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["simulate", "--rule", "fedavg", *TINY_RUN, *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err


def _missing(module):
    import importlib.util

    return importlib.util.find_spec(module) is None


def _no_gpu():
    import torch

    return not torch.cuda.is_available()


@pytest.mark.parametrize("seeds", [["--seed", "0"], ["--seeds", "0,1"]], ids=["one", "sweep"])
@pytest.mark.parametrize("argv, message, applies", [
    (["--device", "tpu"], "device (--device) must be cpu, cuda or cuda:N; got 'tpu'", None),
    (["--device", "cuda"], "sees no CUDA GPU", _no_gpu),
    (["--dataset", "mnist", "--data-dir", "{tmp}", "--download"], "torchvision",
     lambda: _missing("torchvision")),
    (["--availability", "bernoulli", "--availability-option", "prob=2"], "prob must be in", None),
    (["--availability", "ram", "--availability-option", "p=1"], "has no option 'p'", None),
    (["--log", "wandb"], "needs the wandb package", lambda: _missing("wandb")),
    (["--log", "csv,nope"], "unknown logger 'nope'", None),
    (["--model", "femnist-cnn"], "cannot take synthetic's samples", None),
    (["--objective", "cvar"], "objective 'cvar' trains a threshold t beside the model", None),
    (["--objective-option", "mu=0.1"], "objective options need an objective", None),
    (["--objective", "proximal", "--objective-option", "mu=-1"], "objective 'proximal': mu must",
     None),
    (["--server-optimizer", "fedadam", "--server-option", "lr=0.3"],
     "must not set lr (--server-option lr=0.3): the server learning rate is server_lr; give "
     "--server-lr 0.3", None),
    (["--lr-schedule", "step:gamma=2"],
     "lr_schedule (--lr-schedule): step's gamma must be in (0, 1]; got 2.0", None),
])
def test_a_refused_run_is_one_error_line_and_no_folder(argv, message, applies, seeds, tmp_path,
                                                        capsys):
    if applies is not None and not applies():
        pytest.skip("this machine has what the refusal is about")
    out = tmp_path / "run"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(["simulate", "--compare", "fedavg,fairavg", *seeds, *TINY_RUN, *argv,
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_sizes_beyond_the_memory_are_one_error_line(monkeypatch, capsys):
    # e.g. --dataset grouped --groups 100000000000 asks NumPy for 745 GiB: a traceback before.
    def huge(args):
        raise MemoryError("Unable to allocate 745. GiB for an array with shape (100000000000,) "
                          "and data type float64")

    monkeypatch.setattr(cli, "simulate", huge)
    assert cli.main(["simulate", "--rule", "fedavg"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastfair simulate: error: Unable to allocate")


def test_a_memory_limit_without_a_message_still_says_what_happened(monkeypatch, capsys):
    def limited(args):
        raise MemoryError()   # what CPython raises when ulimit -v is reached

    monkeypatch.setattr(cli, "simulate", limited)
    assert cli.main(["simulate", "--rule", "fedavg"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fastfair simulate: error: out of memory (MemoryError: the machine's memory "
                   "or a limit such as ulimit -v was reached); lower clients, per_round or "
                   "batch_size, or raise the limit"]


# ---------------------------------------------------------------------------------------------
# --config FILE: TOML, YAML or JSON holding SimulationConfig's names and the run's; a run folder's
# config.json / sweep.json is such a file and runs that run again, bit for bit.

def _rows(path, drop=("seconds",)):
    """A CSV file's rows without the wall-time column."""
    import csv

    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def _file_run(argv):
    """(rules, seeds, config) of ``argv`` with its --config file applied, as simulate makes
    them."""
    args = cli.build_parser().parse_args(argv)
    args.typed = cli._typed(argv)
    cli_options.apply_file(args, args.config, args.typed, SimulationConfig)
    rules, seeds = cli._rules(args), cli._seeds(args)
    return rules, seeds, cli._config(args, rules, seeds[0]), args


def test_an_experiments_config_json_runs_it_again_bit_for_bit(tmp_path):
    one, other = tmp_path / "one", tmp_path / "other"
    assert cli.main(["simulate", "--compare", "fedavg,aaggff-d", "--seed", "3",
                     "--rule-option", "aaggff-d:cdf=weibull", "--lr", "0.05", *TINY_RUN,
                     "--out", str(one)]) == 0
    assert cli.main(["simulate", "--config", str(one / "config.json"), "--quiet",
                     "--out", str(other)]) == 0
    assert json.loads((other / "config.json").read_text()) == \
        json.loads((one / "config.json").read_text())
    for name in ("final_accuracy.csv", "metrics.csv"):
        assert _rows(other / name) == _rows(one / name), name


def test_a_sweeps_sweep_json_runs_it_again_bit_for_bit(tmp_path):
    one, other = tmp_path / "one", tmp_path / "other"
    assert cli.main(["sweep", "--compare", "fedavg,term", "--seeds", "0,1", "--validation", "0.2",
                     "--grid", "term:tilt=0.1,1", "--select", "acc_worst10", "--threads", "1",
                     *TINY_RUN, "--out", str(one)]) == 0
    assert cli.main(["sweep", "--config", str(one / "sweep.json"), "--quiet", "--threads", "1",
                     "--out", str(other)]) == 0
    assert json.loads((other / "sweep.json").read_text()) == \
        json.loads((one / "sweep.json").read_text())
    for name in ("sweep_runs.csv", "metrics.csv", "sweep_summary.csv"):
        assert _rows(other / name) == _rows(one / name), name


def test_a_python_sweeps_sweep_json_runs_it_again_bit_for_bit(tmp_path):
    # Made in Python, the sweep's base configuration may keep a seed of its own (here 0) beside
    # its runs' seeds: the rerun keeps it too, so its sweep.json is the same file.
    from fastfair.sim import Sweep

    one, other = tmp_path / "one", tmp_path / "other"
    base = SimulationConfig(rounds=3, clients=12, per_round=4, eval_every=1, validation=0.2)
    Sweep(base, ["fedavg", "term"], [2, 3], grid={"term": {"tilt": [0.5, 2.0]}}, baseline=None,
          select="acc_worst10", metrics=["acc_mean", "acc_variance"], batched=False,
          out=one).run()
    assert cli.main(["sweep", "--config", str(one / "sweep.json"), "--quiet", "--threads", "1",
                     "--out", str(other)]) == 0
    assert (other / "sweep.json").read_text() == (one / "sweep.json").read_text()
    for name in ("sweep_runs.csv", "metrics.csv", "sweep_summary.csv"):
        assert _rows(other / name) == _rows(one / name), name


TOML = """
rules = ["fedavg", "term"]
seeds = [4, 5]
rounds = 7
lr = 1e-2
validation = 0.2
server_options = {momentum = 0.5}

[rule_options.term]
tilt = 0.5

[grid.term]
tilt = [0.1, 1.0]
"""
YAML = """
compare: fedavg,term
seeds: [4, 5]
rounds: 7
lr: 1e-2              # PyYAML reads 1e-2 as text; YAML 1.2 (and the file) as a number
validation: 0.2
server_options: {momentum: 0.5}
rule_options:
  term: {tilt: 0.5}
grid:
  term: {tilt: [0.1, 1.0]}
"""
JSON = json.dumps({"config": {"rounds": 7, "lr": 0.01, "validation": 0.2,
                              "server_options": {"momentum": 0.5}},
                   "rules": ["fedavg", "term"], "seeds": "4,5",
                   "rule_options": {"term": {"tilt": 0.5}}, "grid": {"term": {"tilt": [0.1, 1.0]}}})


@pytest.mark.parametrize("name, text", [("run.toml", TOML), ("run.yaml", YAML),
                                        ("run.yml", YAML), ("run.json", JSON)])
def test_toml_yaml_and_json_files_give_the_same_run(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    rules, seeds, config, args = _file_run(["sweep", "--config", str(path)])
    assert rules == ["fedavg", "term"] and seeds == [4, 5]
    assert config == SimulationConfig(rounds=7, lr=0.01, validation=0.2, seed=4,
                                      server_options={"momentum": 0.5})
    assert cli_options.file_by_rule(args, "rule_options", rules) == {"term": {"tilt": 0.5}}
    assert cli_options.file_by_rule(args, "grid", rules) == {"term": {"tilt": [0.1, 1.0]}}


def test_options_typed_override_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(TOML)
    argv = ["sweep", "--config", str(path), "--rounds", "3", "--server-option", "nesterov=true",
            "--seeds", "9", "--compare", "term,qfedavg", "--rule-option", "term:tilt=2",
            "--grid", "term:tilt=5,6"]
    rules, seeds, config, args = _file_run(argv)
    assert (rules, seeds, config.rounds, config.lr) == (["term", "qfedavg"], [9], 3, 0.01)
    assert config.server_options == {"momentum": 0.5, "nesterov": True}  # keys merge
    options = cli_options.parse_rule_options(
        args.rule_option, rules, cli_options.file_by_rule(args, "rule_options", rules))
    assert options == {"term": {"tilt": 2}, "qfedavg": {}}
    grid = cli_options.parse_grid(args.grid, rules, cli_options.file_by_rule(args, "grid", rules))
    assert grid == {"term": {"tilt": [5, 6]}}   # the file's fedavg entries: not run, dropped


@pytest.mark.parametrize("name, text, error, message", [
    ("a.toml", "roundz = 3\n", ValueError,
     r"configuration file .*a\.toml has no option 'roundz' \(did you mean 'rounds'\?\)"),
    ("a.json", '{"config": {"lrr": 0.1}}', ValueError,
     r"a\.json \(table config\) has no option 'lrr' \(did you mean 'lr'\?\)"),
    ("a.toml", "server_options = 5\n", TypeError,
     r"a\.toml: option 'server_options' takes a table of names to values; got 5"),
    ("a.yaml", "1: 2\n", TypeError, r"a\.yaml: keys must be option names; got 1"),
    ("a.yaml", "compare: fedavg\nbaselin: fedavg\n", ValueError, r"did you mean 'baseline'\?"),
    ("a.toml", 'rounds = "x"\n', TypeError, r"a\.toml: option 'rounds' takes int; got 'x'"),
    ("a.toml", "rule_options = {tilt = 1.0}\n", TypeError,
     r"rule_options maps each rule to its options, e.g. rule_options = \{term = \{tilt = 1.0\}\}"),
    ("a.toml", 'rules = ["fedavg"]\n[rule_options.term]\ntilt = 1\n', ValueError,
     r"rule_options names 'term', which is not among its rules \['fedavg'\]"),
    ("a.toml", "rounds = 3\n[config]\nrounds = 4\n", ValueError,
     r"gives rounds both at the top and in its config table"),
    ("a.toml", 'rule = "term"\nrules = ["fedavg"]\n', ValueError, r"name the rules once"),
    ("a.toml", "rounds = 0\n", ValueError,
     r"rounds \(--rounds\) must be >= 1; got 0 \(options of .*a\.toml and the command "
     r"line\)"),
    ("a.toml", "rounds = [\n", ValueError, r"a\.toml is not valid TOML"),
    ("a.yaml", "- 1\n- 2\n", ValueError, r"must hold a mapping of option names to values"),
    ("a.cfg", "rounds = 3\n", ValueError, r"must end in \.toml, \.yaml, \.yml or \.json"),
    # A field's choices are checked as its option's are (a misspelt data set was a KeyError).
    ("a.toml", 'dataset = "synthtic"\n', ValueError,
     r"a\.toml: unknown dataset 'synthtic' \(did you mean 'synthetic'\?\); choose from"),
    ("a.yaml", "server_optimizer: fedadamm\n", ValueError,
     r"unknown server_optimizer 'fedadamm' \(did you mean 'fedadam'\?\)"),
])
def test_a_bad_file_is_refused_naming_it_and_the_key(tmp_path, name, text, error, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(error, match=message):
        _file_run(["simulate", "--config", str(path)])


@pytest.mark.parametrize("text, hint", [("epochz = 2\n", "did you mean 'epochs'?"),
                                        ('dataset = "synthtic"\n', "did you mean 'synthetic'?")])
def test_a_bad_file_is_one_error_line_and_no_folder(tmp_path, capsys, text, hint):
    path = tmp_path / "a.toml"
    path.write_text(text)
    out = tmp_path / "run"
    assert cli.main(["simulate", "--config", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert hint in err and len(err.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--rouns", "3"], "unrecognized arguments: --rouns (did you mean --rounds?) 3"),
    (["sweep", "--seedz=1"], "unrecognized arguments: --seedz=1 (did you mean --seeds?)"),
    (["simulate", "--dataset", "synthtic"],
     "argument --dataset: invalid choice: 'synthtic' (did you mean 'synthetic'?); choose from"),
    (["rulez"], "invalid choice: 'rulez' (did you mean 'rules'?)"),
])
def test_an_unknown_option_or_choice_suggests_the_closest(argv, message, capsys):
    # As a configuration file's unknown keys and a rule's unknown options do.
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_file_is_read_only_when_it_is_a_regular_file(tmp_path):
    import os

    fifo = tmp_path / "a.json"
    os.mkfifo(fifo)  # opened for reading, it would block forever
    with pytest.raises(ValueError, match=r"a\.json is not a regular file \(a named pipe\)"):
        _file_run(["simulate", "--config", str(fifo)])
    with pytest.raises(ValueError, match=r"absent\.toml does not exist"):
        _file_run(["simulate", "--config", str(tmp_path / "absent.toml")])


def test_a_missing_reader_names_the_package_to_install(tmp_path, monkeypatch):
    import sys

    (tmp_path / "a.toml").write_text("rounds = 3\n")
    (tmp_path / "a.yaml").write_text("rounds: 3\n")
    monkeypatch.setitem(sys.modules, "tomllib", None)  # Python 3.9 and 3.10, without tomli
    monkeypatch.setitem(sys.modules, "tomli", None)
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ValueError, match=r"needs the tomli package \(pip install tomli\)"):
        _file_run(["simulate", "--config", str(tmp_path / "a.toml")])
    with pytest.raises(ValueError, match=r"needs the PyYAML package \(pip install pyyaml\)"):
        _file_run(["simulate", "--config", str(tmp_path / "a.yaml")])


def test_a_config_table_names_one_rule_and_seed_and_the_python_api_reads_it(tmp_path):
    from fastfair.sim.experiments.config_file import config_from_file

    path = tmp_path / "a.json"
    path.write_text(json.dumps({"config": {"rule": "term", "rule_options": {"tilt": 2.0},
                                           "seed": 6, "rounds": 5}}))
    rules, seeds, config, args = _file_run(["simulate", "--config", str(path)])
    assert (rules, seeds, config.rounds) == (["term"], [6], 5)
    assert cli_options.file_by_rule(args, "rule_options", rules) == {"term": {"tilt": 2.0}}
    assert config_from_file(path) == SimulationConfig(rule="term", rule_options={"tilt": 2.0},
                                                      seed=6, rounds=5)


def test_resume_takes_no_config_file(tmp_path, capsys):
    (tmp_path / "a.toml").write_text("rounds = 3\n")
    assert cli.main(["simulate", "--resume", str(tmp_path), "--config",
                     str(tmp_path / "a.toml")]) == 2
    assert "drop --config" in capsys.readouterr().err


@pytest.mark.parametrize("select, hint", [("acc_meen", "did you mean 'acc_mean'?"),
                                          ("acc_worst_group", "choose from acc_mean")])
def test_a_select_metric_no_run_records_is_refused_before_the_sweep(select, hint, tmp_path,
                                                                      capsys):
    # A grid chooses its points by the metric's validation value: a name no run records on its
    # validation split failed only after every run, leaving a folder.
    out = tmp_path / "sweep"
    assert cli.main(["sweep", "--compare", "fedavg,term", "--grid", "term:tilt=0.1,1",
                     "--validation", "0.2", "--select", select, *TINY_RUN, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert hint in err and "select metric (--select)" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_a_cuda_device_without_a_cuda_build_is_refused_before_data_loads(command, tmp_path,
                                                                        monkeypatch, capsys):
    import fastfair

    built = fastfair.build_info()
    monkeypatch.setattr(fastfair, "build_info", lambda: {**built, "cuda": False})
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    # The data folder holds no MNIST: loading the data would fail with another message.
    argv = [command, "--device", "cuda", "--dataset", "mnist", "--data-dir", str(tmp_path),
            "--out", str(tmp_path / "run"), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "device (--device) 'cuda' needs fastfair's compiled core built with CUDA" in err
    assert "FASTFAIR_CUDA=ON pip install" in err
    assert not (tmp_path / "run").exists()
