"""Every shipped table file is a valid table: its columns are configuration files and
configurations in both settings, checked without running; the command lists them."""

from __future__ import annotations

import pytest

from fastfair import cli
from fastfair.reproduce.table import TABLES_DIR, load_table, replace_seeds, table_names

TINY = """
[table]
title = "t"
paper = "p"
source = "Table 1"
metric = "acc_weighted_mean"
metric_label = "accuracy"
baseline = "fedavg"

[run]
rules = ["fedavg", "fairavg"]
rounds = 2

[[column]]
name = "c"
paper = {fedavg = 1.0, fairavg = 2.0}
"""


def test_tables_are_shipped_at_least_three_seeds_each():
    names = table_names()
    assert {"fairavg-table2", "fedcvar-mnist"} <= set(names)
    for name in names:
        spec = load_table(name)
        assert len(spec.seeds) >= 3, name
        assert spec.source and spec.reduced, name


@pytest.mark.parametrize("name", table_names())
def test_every_shipped_table_validates_without_running(name):
    spec = load_table(name)  # checks every column, shipped and --full
    for column in spec.columns:
        for full in (False, True):
            config = spec.config(column, full, ".")
            assert config.rounds >= 1
    assert (TABLES_DIR / f"{name}.toml").is_file()


def test_list_names_every_table(capsys):
    assert cli.main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in table_names():
        assert f"{name}: " in out


def test_unknown_table_suggests_the_closest(capsys):
    assert cli.main(["reproduce", "fairavg-tabel2"]) == 2
    assert "did you mean fairavg-table2" in capsys.readouterr().err


def test_a_table_file_path_runs_as_a_name(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(TINY)
    spec = load_table(path)
    assert spec.name == "mine" and spec.seeds == [0, 1, 2]
    assert spec.options(spec.columns[0], full=False)["rounds"] == 2


def test_the_full_setting_unsets_the_options_it_lists(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(TINY.replace("rounds = 2", "rounds = 2\nlocal_steps = 5")
                    + '\n[full]\nunset = ["local_steps"]\nepochs = 3\n')
    spec = load_table(path)
    assert spec.options(spec.columns[0], full=False)["local_steps"] == 5
    full = spec.options(spec.columns[0], full=True)
    assert "local_steps" not in full and "unset" not in full and full["epochs"] == 3
    path.write_text(TINY + '\n[full]\nunset = "local_steps"\n')
    with pytest.raises(ValueError, match="unset must be a list of option names"):
        load_table(path)


@pytest.mark.parametrize("change, message", [
    (('baseline = "fedavg"', 'baseline = "term"'), "baseline 'term' is not among its rules"),
    (("fairavg = 2.0", "qfedavg = 2.0"), "paper gives numbers for ['qfedavg']"),
    (("rounds = 2", "roundz = 2"), "did you mean 'rounds'"),
    (('name = "c"', 'name = "c"\nprepare = {split = "nope"}'), "prepare 'nope' is not a split"),
    (('metric_label = "accuracy"\n', ""), "needs metric_label"),
])
def test_a_broken_table_file_is_refused_naming_what(tmp_path, change, message):
    path = tmp_path / "bad.toml"
    path.write_text(TINY.replace(*change))
    with pytest.raises(ValueError, match=None) as info:
        load_table(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_seeds_replaced_must_be_distinct(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(TINY)
    spec = load_table(path)
    assert replace_seeds(spec, [4, 5]).seeds == [4, 5]
    with pytest.raises(ValueError, match="--seeds must be distinct"):
        replace_seeds(spec, [1, 1])


def test_every_shipped_table_is_shown_in_the_fidelity_page_with_its_command():
    from tests.helpers import ROOT

    page = (ROOT / "docs" / "fidelity.md").read_text()
    section = page[page.index("## The papers' tables on their data"):]
    for name in table_names():
        spec = load_table(name)
        assert f"### {spec.title}\n" in section, name
        assert f"Command: `fastfair reproduce {name} " in section, name
