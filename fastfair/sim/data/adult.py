"""``adult``: UCI Adult (census income, >50K or not), read from UCI's ``adult.data`` (32,561
rows) and ``adult.test`` (16,281 rows, first line ``|1x3 Cross validator``, labels with a
trailing ``.``) in ``DIR``, as the standard train and test split.

Features, in the order of :data:`COLUMNS`, as ``features`` (``FEATURES``) chooses:

- ``"all"`` (108 on UCI's files): the 6 numeric columns standardised with the training rows'
  mean and standard deviation (``(v - mean) / std``), so that one learning rate suits them
  all; the 8 categorical columns one-hot, over the values of the training rows in name order.
  A missing value (UCI writes ``?``, in workclass, occupation and native-country) is a value of
  its own, so no row is dropped; a test value no training row holds (none in UCI's files)
  is all zeros.
- ``"categorical"`` (99 on UCI's files): the 8 categorical columns only, one-hot over the
  training rows' values other than ``?``; a missing value is all zeros of its column. This is
  the q-FFL authors' encoding of AFL's Adult (litian96/fair_flearn,
  ``data/adult/create_dataset.py``, ``prepare_data``: the numeric columns are left out "to be
  consistent with the google paper", and ``?`` matches none of the listed values).

The label is 1 for ``>50K`` and 0 for ``<=50K``. How the rows become clients is
``partition``:

- ``column:NAME=VALUE[,VALUE...]``: two clients, the rows whose column NAME holds one of the
  values (client 0), and the rest (client 1), in both splits.
  ``column:education=Doctorate`` is AFL's split (Mohri et al., 2019) that q-FFL (Li et al.,
  2020) reuses: doctorate (413 training rows) and the rest (32,148);
- ``column:NAME``: one client per value of column NAME in the training rows (in name order); test
  rows of a value no training row holds are left out (logged);
- ``iid``, ``dirichlet``, ``pathological``: the training rows split across ``clients`` by label
  as the vision data sets are (:class:`~fastfair.sim.data.vision.SplitArrays`).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from fastfair._files import read_regular_file
from fastfair.sim.data.settings import ADULT_FEATURES as FEATURES
from fastfair.sim.data.vision import SplitArrays

LOGGER = logging.getLogger("fastfair.sim.data")
#: UCI's columns in file order (adult.names), the label last.
COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
           "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
           "hours-per-week", "native-country")
NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
FILES = {"train": "adult.data", "test": "adult.test"}
#: How UCI writes a missing value.
MISSING = "?"
#: The positions of the numeric columns in a row.
NUMERIC_AT = tuple(COLUMNS.index(c) for c in NUMERIC)
#: The largest magnitude of a numeric cell: the squares a standard deviation sums stay finite.
MAX_NUMBER = 1e15
#: The prefix of a partition that makes the clients from a column's values.
COLUMN_PARTITION = "column:"


def find_files(data_dir: str) -> Dict[str, str]:
    """``{"train": .../adult.data, "test": .../adult.test}``, or ValueError naming the file
    missing from ``data_dir``."""
    paths = {split: os.path.join(data_dir, name) for split, name in FILES.items()}
    for split, path in paths.items():
        if not os.path.exists(path):   # exists, not isfile: a pipe is refused when read
            raise ValueError(f"adult: no {FILES[split]} in {data_dir}; it needs UCI's adult.data "
                             "and adult.test (see docs/data.md)")
    return paths


def _plain_number(text: str) -> bool:
    """Whether ``text`` is a finite number within ±:data:`MAX_NUMBER`."""
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and abs(value) <= MAX_NUMBER


def read_rows(path: str) -> Tuple[List[List[str]], np.ndarray]:
    """``(rows, labels [n] int64)`` of a UCI Adult file: each row's 14 values (stripped), its
    label 1 for ``>50K`` (with or without adult.test's trailing ``.``) and 0 for ``<=50K``.
    Blank lines and adult.test's ``|1x3 Cross validator`` line are skipped; any other line
    without 15 values, with another label, or with a numeric cell that is not a finite number
    within ±:data:`MAX_NUMBER` (``nan``, ``inf``, ``1e308``) is a ValueError naming the file,
    line and column."""
    text = read_regular_file(path, "UCI Adult file").decode("utf-8", "replace")
    rows: List[List[str]] = []
    labels: List[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("|"):
            continue
        values = [v.strip() for v in line.split(",")]
        label = values[-1].rstrip(".")
        if len(values) != len(COLUMNS) + 1 or label not in ("<=50K", ">50K"):
            raise ValueError(f"{path}, line {number}: expected {len(COLUMNS)} values and a label "
                             f"<=50K or >50K; got {line[:80]!r}")
        for j in NUMERIC_AT:
            if not _plain_number(values[j]):
                raise ValueError(f"{path}, line {number}: {COLUMNS[j]} must be a finite number "
                                 f"within ±{MAX_NUMBER:g}; got {values[j]!r}")
        rows.append(values[:-1])
        labels.append(int(label == ">50K"))
    if not rows:
        raise ValueError(f"{path} holds no rows of UCI Adult")
    return rows, np.array(labels, dtype=np.int64)


def encode(train: List[List[str]], test: List[List[str]], features: str = "all"
           ) -> Tuple[np.ndarray, np.ndarray, List[str]]:
    """``(x_train [n, F] float32, x_test [m, F] float32, feature names [F])`` in the encoding
    ``features`` (``FEATURES``, module docstring): with ``"all"`` numeric columns
    standardised by the training rows, :math:`(v - \\bar v) / s` (s the population standard
    deviation; 1 where it is 0), and categorical ones one-hot over the training rows' values
    (``?`` a value like any other); with ``"categorical"`` the categorical columns only,
    one-hot over the training rows' values but ``?`` (a ``?`` is all zeros)."""
    if features not in FEATURES:
        raise ValueError(f"adult_features (--adult-features) must be one of "
                         f"{', '.join(FEATURES)}; got {features!r}")
    blocks: Dict[str, List[np.ndarray]] = {"train": [], "test": []}
    names: List[str] = []
    for j, column in enumerate(COLUMNS):
        cols = {"train": [r[j] for r in train], "test": [r[j] for r in test]}
        if column in NUMERIC:
            if features == "categorical":
                continue
            try:
                values = {s: np.array(v, dtype=np.float64) for s, v in cols.items()}
            except ValueError:
                raise ValueError(f"UCI Adult: column {column} must hold numbers") from None
            mean, std = values["train"].mean(), values["train"].std()
            for s in blocks:
                blocks[s].append(((values[s] - mean) / (std or 1.0))[:, None])
            names.append(column)
        else:
            levels = sorted(set(cols["train"]) - ({MISSING} if features == "categorical"
                                                  else set()))
            index = {v: i for i, v in enumerate(levels)}
            for s in blocks:
                hot = np.zeros((len(cols[s]), len(levels)))
                at = np.array([index.get(v, -1) for v in cols[s]])
                hot[np.flatnonzero(at >= 0), at[at >= 0]] = 1.0
                blocks[s].append(hot)
            names += [f"{column}={v}" for v in levels]
    return (np.hstack(blocks["train"]).astype(np.float32),
            np.hstack(blocks["test"]).astype(np.float32), names)


def column_parts(partition: str, rows: Dict[str, List[List[str]]]
                 ) -> Tuple[Dict[str, List[np.ndarray]], List[str]]:
    """``({split: [K] row indices}, client names [K])`` of a ``column:NAME`` or
    ``column:NAME=VALUE[,VALUE...]`` partition (module docstring); ValueError naming the
    column or value that is not there."""
    spec = partition[len(COLUMN_PARTITION):]
    column, sep, wanted = spec.partition("=")
    column = column.strip().replace("_", "-")
    if column not in COLUMNS:
        raise ValueError(f"partition {partition!r}: adult has no column {column!r}; choose from "
                         f"{', '.join(COLUMNS)}")
    j = COLUMNS.index(column)
    values = {s: np.array([r[j] for r in rows[s]]) for s in rows}
    if sep:
        chosen = [v.strip() for v in wanted.split(",") if v.strip()]
        present = set(values["train"].tolist())
        missing = [v for v in chosen if v not in present]
        if not chosen or missing:
            raise ValueError(f"partition {partition!r}: no training row of adult has {column} = "
                             f"{', '.join(missing) or '(nothing given)'}; its values are "
                             f"{', '.join(sorted(present))}")
        inside = {s: np.isin(values[s], chosen) for s in values}
        parts = {s: [np.flatnonzero(inside[s]), np.flatnonzero(~inside[s])] for s in values}
        return parts, [f"{column} in {{{', '.join(chosen)}}}", "the rest"]
    levels = sorted(set(values["train"].tolist()))
    parts = {s: [np.flatnonzero(values[s] == v) for v in levels] for s in values}
    dropped = int((~np.isin(values["test"], levels)).sum())
    if dropped:
        LOGGER.warning("adult: %d test rows have a %s that no training row has and are left "
                       "out", dropped, column)
    return parts, [f"{column} = {v}" for v in levels]


class AdultDataset(SplitArrays):
    """UCI Adult from ``data_dir`` (``adult.data``, ``adult.test``), its clients made by
    ``partition`` (module docstring): ``column:...`` fixes their number (``clients`` None, or
    that number), the label partitions split across ``clients``; ``features`` chooses the
    encoding (``FEATURES``: ``"all"``, 108 features, or ``"categorical"``, the q-FFL
    authors' 99). ``feature_names [F]`` name the
    columns of ``x``; ``client_names [K]`` the clients of a column partition."""

    def __init__(self, data_dir: str, clients: Optional[int] = None, *,
                 partition: str = COLUMN_PARTITION + "education=Doctorate",
                 alpha: float = 0.3, classes_per_client: int = 2, seed: int = 0,
                 features: str = "all") -> None:
        rows: Dict[str, List[List[str]]] = {}
        labels: Dict[str, np.ndarray] = {}
        for split, path in find_files(data_dir).items():
            rows[split], labels[split] = read_rows(path)
        x_train, x_test, self.feature_names = encode(rows["train"], rows["test"],
                                                            features)
        images = {"train": x_train, "test": x_test}
        parts: Optional[Dict[str, List[np.ndarray]]] = None
        self.client_names: Optional[List[str]] = None
        if partition.startswith(COLUMN_PARTITION):
            parts, self.client_names = column_parts(partition, rows)
            if clients is not None and clients != len(parts["train"]):
                raise ValueError(f"partition {partition!r} makes {len(parts['train'])} clients "
                                 f"of adult; clients (--clients) is {clients}: leave it out or "
                                 f"set it to {len(parts['train'])}")
        super().__init__(images, labels, (x_train.shape[1],), 2, clients=clients,
                         partition=partition, alpha=alpha, classes_per_client=classes_per_client,
                         seed=seed, parts=parts, kind="float")

    def describe(self, k: int, split: str = "train") -> str:
        if self.client_names is None:
            return f"client {k}"
        return f"client {k} ({self.client_names[k]})"


def count_adult_clients(data_dir: str, partition: str) -> int:
    """The number of clients a ``column:...`` partition makes of the Adult files in
    ``data_dir``."""
    return AdultDataset(data_dir, partition=partition).num_clients
