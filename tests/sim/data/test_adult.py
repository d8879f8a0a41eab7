"""UCI Adult read from small files in UCI's format: adult.test's first line and trailing '.',
missing values, one-hot and standardised features, and the partitions by column and label."""

from __future__ import annotations

import numpy as np
import pytest

from fastfair.sim.data.adult import AdultDataset, read_rows
from fastfair.sim.data.catalog import count_clients

ROW = ("{age}, {work}, 77516, {edu}, 13, Never-married, Adm-clerical, Not-in-family, White, "
       "{sex}, 0, 0, 40, United-States, {label}")


def _write(folder, train, test):
    folder.mkdir(exist_ok=True)
    (folder / "adult.data").write_text("\n".join(ROW.format(**r) for r in train) + "\n\n")
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(
        ROW.format(**{**r, "label": r["label"] + "."}) for r in test) + "\n")


def _rows(n, rng):
    return [{"age": int(rng.integers(17, 90)), "work": ["Private", "?", "State-gov"][i % 3],
             "edu": ["Doctorate", "Bachelors", "HS-grad"][i % 3 if i % 4 else 1],
             "sex": ["Male", "Female"][i % 2], "label": ["<=50K", ">50K"][i % 5 == 0]}
            for i in range(n)]


def test_uci_files_read_with_the_test_files_header_and_trailing_dots(tmp_path, rng):
    train, test = _rows(30, rng), _rows(12, rng)
    _write(tmp_path, train, test)
    rows, labels = read_rows(str(tmp_path / "adult.test"))
    assert len(rows) == 12 and rows[1][1] == "?"
    np.testing.assert_array_equal(labels, [r["label"] == ">50K" for r in test])
    data = AdultDataset(str(tmp_path), partition="column:education=Doctorate")
    x = data.client_data(np.arange(2), "train").x
    ages = np.array([r["age"] for r in train], dtype=np.float64)
    order = np.concatenate([np.flatnonzero([r["edu"] == "Doctorate" for r in train]),
                            np.flatnonzero([r["edu"] != "Doctorate" for r in train])])
    np.testing.assert_allclose(x[:, 0].numpy(), ((ages - ages.mean()) / ages.std())[order],
                               rtol=1e-5)
    work = [n for n in data.feature_names if n.startswith("workclass=")]
    assert work == ["workclass=?", "workclass=Private", "workclass=State-gov"]
    assert data.client_names == ["education in {Doctorate}", "the rest"]
    doctorate = sum(r["edu"] == "Doctorate" for r in train)
    assert data.num_samples(np.arange(2)).tolist() == [doctorate, 30 - doctorate]


def test_partitions_by_any_column_and_by_label(tmp_path, rng):
    _write(tmp_path, _rows(40, rng), _rows(10, rng))
    by_sex = AdultDataset(str(tmp_path), partition="column:sex")
    assert by_sex.client_names == ["sex = Female", "sex = Male"]
    assert count_clients("adult", str(tmp_path), "column:education") == 3
    iid = AdultDataset(str(tmp_path), 4, partition="iid")
    assert iid.num_samples(np.arange(4)).sum() == 40 and iid.client_names is None


def test_wrong_partitions_and_files_name_the_fix(tmp_path, rng):
    _write(tmp_path, _rows(12, rng), _rows(4, rng))
    with pytest.raises(ValueError, match="no column 'school'; choose from age, workclass"):
        AdultDataset(str(tmp_path), partition="column:school")
    with pytest.raises(ValueError, match="education = Masters; its values are Bachelors"):
        AdultDataset(str(tmp_path), partition="column:education=Masters")
    with pytest.raises(ValueError, match=r"makes 2 clients .* set it to 2"):
        AdultDataset(str(tmp_path), 5, partition="column:sex")
    (tmp_path / "adult.test").write_text("39, State-gov, 77516, Bachelors, 13, >50K\n")
    with pytest.raises(ValueError, match=r"adult.test, line 1: expected 14 values"):
        AdultDataset(str(tmp_path))
    (tmp_path / "adult.test").unlink()
    with pytest.raises(ValueError, match="no adult.test in"):
        AdultDataset(str(tmp_path))


def test_categorical_encoding_is_one_hot_of_the_categorical_columns_missing_all_zero(tmp_path,
                                                                                      rng):
    train, test = _rows(30, rng), _rows(12, rng)
    _write(tmp_path, train, test)
    data = AdultDataset(str(tmp_path), partition="column:education=Doctorate",
                        features="categorical")
    # ROW's categorical values: workclass (Private, State-gov; ? dropped), education (3),
    # and one value of each of marital-status, occupation, relationship, race, sex (2),
    # native-country: 2 + 3 + 1 + 1 + 1 + 1 + 2 + 1 = 12 columns, no numeric one.
    assert data.num_features == 12
    assert data.feature_names[:2] == ["workclass=Private", "workclass=State-gov"]
    assert not any(n in data.feature_names for n in ("age", "fnlwgt", "hours-per-week"))
    x = data.client_data(np.arange(2), "train").x.numpy()
    order = np.concatenate([np.flatnonzero([r["edu"] == "Doctorate" for r in train]),
                            np.flatnonzero([r["edu"] != "Doctorate" for r in train])])
    work = np.array([r["work"] for r in train])[order]
    np.testing.assert_array_equal(x[:, 0], work == "Private")
    np.testing.assert_array_equal(x[:, 1], work == "State-gov")
    # Each row has one 1 per categorical column but a missing workclass: 8 or 7.
    np.testing.assert_array_equal(x.sum(1), np.where(work == "?", 7, 8))
    assert set(np.unique(x)) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="adult_features .* all, categorical; got 'numeric'"):
        AdultDataset(str(tmp_path), features="numeric")


@pytest.mark.parametrize("cell", ["nan", "inf", "-inf", "1e308", "forty"])
def test_numeric_cells_that_break_standardising_are_refused(tmp_path, rng, cell):
    train = _rows(10, rng)
    train[3]["age"] = cell
    _write(tmp_path, train, _rows(4, rng))
    with pytest.raises(ValueError, match=rf"adult.data, line 4: age must be a finite number "
                                         rf".*got '{cell}'"):
        AdultDataset(str(tmp_path))
