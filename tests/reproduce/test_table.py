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
    (('baseline = "fedavg"', 'baseline = "fedavg"\ntie = nan'), "tie must be a finite number"),
    (('baseline = "fedavg"', 'baseline = "fedavg"\ntie = -0.5'), "tie must be a finite number"),
    (('metric = "acc_weighted_mean"', 'metric = "acc_wieghted_mean"'),
     "[table]: metric: 'acc_wieghted_mean' is no metric a run records (did you mean "
     "'acc_weighted_mean'?)"),
    (('baseline = "fedavg"', 'baseline = "fedavg"\nalso = {acc_best = "best"}'),
     "[table]: also: 'acc_best' is no metric a run records"),
    (('baseline = "fedavg"', 'baseline = "fedavg"\nseeds = [0, 18446744073709551615]'),
     "seeds must be distinct integers in [0, 2**63)"),
    (('baseline = "fedavg"', 'baseline = "fedavg"\nseeds = [1, true]'),
     "seeds must be distinct integers in [0, 2**63)"),
    (("[[column]]\nname = \"c\"", "[[column]]\nname = \"C!\"\n[[column]]\nname = \"c\""),
     "columns 'C!' and 'c' would share the folder 'c' of --out"),
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
    with pytest.raises(ValueError, match=r"--seeds must be distinct integers in \[0, 2\*\*63\)"):
        replace_seeds(spec, [1, 2 ** 63])


def test_bad_seeds_are_refused_before_out_is_made(tmp_path, capsys):
    path = tmp_path / "mine.toml"
    path.write_text(TINY)
    out = tmp_path / "out"
    assert cli.main(["reproduce", str(path), "--seeds", "0,99999999999999999999",
                     "--out", str(out)]) == 2
    assert "--seeds must be distinct integers" in capsys.readouterr().err
    assert not out.exists()


def test_a_column_whose_data_make_other_clients_names_the_table_and_column(tmp_path, capsys):
    import numpy as np

    from tests.sim.data.test_adult import _rows, _write

    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "adult", _rows(20, np.random.default_rng(0)),
           _rows(6, np.random.default_rng(1)))
    path = tmp_path / "adult.toml"
    path.write_text(TINY.replace("rounds = 2", 'rounds = 2\ndataset = "adult"\nclients = 5\n'
                                 'per_round = 2\npartition = "column:education=Doctorate"')
                    .replace('name = "c"', 'name = "c"\ndata = "adult"'))
    out = tmp_path / "out"
    assert cli.main(["reproduce", str(path), "--out", str(out)]) == 2
    assert "--data-dir must be the folder holding them" in capsys.readouterr().err
    assert not out.exists()
    assert cli.main(["reproduce", str(path), "--data-dir", str(tmp_path / "data"),
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"table file {path} (column 'c'" in err and "makes 2 clients of adult; clients " \
        "(--clients) is 5: set it to 2" in err, err
    assert not out.exists()


def test_every_shipped_table_is_shown_in_the_fidelity_page_with_its_command():
    from tests.helpers import ROOT

    page = (ROOT / "docs" / "fidelity.md").read_text()
    section = page[page.index("## The papers' tables on their data"):]
    for name in table_names():
        spec = load_table(name)
        assert f"### {spec.title}\n" in section, name
        assert f"Command: `fastfair reproduce {name} " in section, name


def test_a_metric_the_setting_does_not_compute_stops_the_table_naming_it(tmp_path, capsys):
    path = tmp_path / "groups.toml"
    path.write_text(TINY.replace('metric = "acc_weighted_mean"', 'metric = "acc_worst_group"')
                    .replace("rounds = 2", "rounds = 2\nclients = 6\nper_round = 2\nseeds = [0]")
                    + '\n[[column]]\nname = "d"\n')
    out = tmp_path / "out"
    assert cli.main(["reproduce", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"table file {path} (column 'c'): metrics: run fedavg seed 0 recorded no " \
           "'acc_worst_group'" in err, err
    assert not (out / "d").exists()
