"""Table files: one TOML file per table or figure of a seed paper, shipped in
``fastfair/reproduce/tables``.

.. code-block:: toml

    [table]
    title = "FairAvg vs FedAvg: accuracy of the aggregate model at the final round"
    paper = "Michieli and Ozay, Are All Users Treated Fairly in Federated Learning Systems?"
    source = "Table 2"                 # the exact table or figure the numbers come from
    metric = "acc_weighted_mean"       # the run metric compared (shown in %; a variance in %²)
    metric_label = "accuracy (%) on the pooled test samples of every client"
    baseline = "fedavg"                # differences are paired on seeds against this rule
    seeds = [0, 1, 2]
    tie = 0.5                          # |paper difference| below this: the paper finds none
                                       # (and the drift the convergence check tolerates)
    reduced = "what the shipped setting changes from the paper's, and why"
    unstated = ["what the paper leaves open: what was chosen"]
    also = {acc_mean = "mean client accuracy (%)"}   # more metrics shown, without a verdict

    [run]                              # every column's options, in the format of
    rules = ["fedavg", "fairavg"]      # fastfair simulate --config (docs/simulator.md)
    rounds = 50

    [full]                             # replaced with --full: the paper's setting
    rounds = 200
    unset = ["local_steps"]            # options [run] sets that take their defaults again

    [[column]]
    name = "Synthetic, K' = 2"
    paper = {fedavg = 75.9, fairavg = 76.4}   # the paper's number per rule, in %
    claim = {fairavg = 1}              # without numbers: the sign the paper claims vs baseline
    run = {per_round = 2}              # this column's options over [run] (and full = {...})
    data = "mnist"                     # optional: the folder under --data-dir it reads
    prepare = {split = "mnist-powerlaw"}      # optional: a split of fastfair.reproduce.prepare

A table's runs should evaluate at least 3 times (``eval_every``): a column gets a verdict only
where its runs have converged on the metric (:func:`fastfair.reproduce.run.convergence`: the
drift over the last quarter of the evaluations within the larger of the spread across seeds
and ``tie``), and fewer evaluations leave that unchecked. ``tie`` is then also the smallest
drift the check tolerates, so a metric coarser than 0.5 points (a client of few test rows)
takes a larger one.

A column's options are ``[run]``, then its ``run``, then (with ``--full``) ``[full]`` and its
``full``; each is checked as a configuration file is (:func:`~fastfair.sim.experiments.
config_file.parse_run_file`) and as a :class:`~fastfair.sim.config.SimulationConfig`, without
running anything (:func:`check_table`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from fastfair._options import OptionSpec, check_options
from fastfair.sim.config import SimulationConfig
from fastfair.sim.experiments.config_file import RunFile, parse_run_file, read_file

#: The folder of the shipped table files.
TABLES_DIR = Path(__file__).with_name("tables")

_TABLE_KEYS = {
    "title": OptionSpec("title", str, None), "paper": OptionSpec("paper", str, None),
    "source": OptionSpec("source", str, None), "metric": OptionSpec("metric", str, None),
    "metric_label": OptionSpec("metric_label", str, None),
    "baseline": OptionSpec("baseline", str, None),
    "seeds": OptionSpec("seeds", List[int], [0, 1, 2]),
    "tie": OptionSpec("tie", float, 0.5), "reduced": OptionSpec("reduced", str, ""),
    "unstated": OptionSpec("unstated", List[str], []), "notes": OptionSpec("notes", List[str], []),
    "also": OptionSpec("also", Dict[str, str], {}),
}
_COLUMN_KEYS = {
    "name": OptionSpec("name", str, None), "paper": OptionSpec("paper", Dict[str, float], {}),
    "paper_note": OptionSpec("paper_note", str, ""),
    "claim": OptionSpec("claim", Dict[str, int], {}),
    "run": OptionSpec("run", Dict[str, Any], {}), "full": OptionSpec("full", Dict[str, Any], {}),
    "data": OptionSpec("data", Optional[str], None),
    "prepare": OptionSpec("prepare", Optional[Dict[str, Any]], None),
}
_REQUIRED = ("title", "paper", "source", "metric", "metric_label", "baseline")


@dataclass(frozen=True)
class Column:
    """One column of a table: its ``name``, the paper's number per rule (``paper``, in %, with
    ``paper_note`` saying how it was read; ``claim``: where the paper gives no number, the
    sign of the difference to the baseline it claims, +1 or -1), its options over the
    table's (``run``, and ``full`` with ``--full``), the folder under ``--data-dir`` it reads
    (``data``) and the split of :mod:`fastfair.reproduce.prepare` its clients come from
    (``prepare``: ``split`` and that split's options)."""

    name: str
    paper: Dict[str, float] = field(default_factory=dict)
    paper_note: str = ""
    claim: Dict[str, int] = field(default_factory=dict)
    run: Dict[str, Any] = field(default_factory=dict)
    full: Dict[str, Any] = field(default_factory=dict)
    data: Optional[str] = None
    prepare: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class TableSpec:
    """A table file (the module's format): what it compares and every column's settings
    (``also``: further metrics by label, shown beside the compared one without a verdict)."""

    name: str
    path: Path
    title: str
    paper: str
    source: str
    metric: str
    metric_label: str
    baseline: str
    seeds: List[int]
    tie: float
    reduced: str
    unstated: List[str]
    notes: List[str]
    also: Dict[str, str]
    run: Dict[str, Any]
    full: Dict[str, Any]
    columns: List[Column]

    def options(self, column: Column, full: bool) -> Dict[str, Any]:
        """The configuration-file mapping of ``column``: ``[run]``, its ``run``, then with
        ``full`` ``[full]`` and its ``full`` (later ones replace earlier keys; the options
        their ``unset`` lists are dropped, so that they take their defaults).

        Raises
        ------
        ValueError
            ``unset`` that is not a list of option names.
        """
        merged = {**self.run, **column.run}
        if full:
            unset = ["unset"]
            for where, part in (("[full]", self.full), (f"column {column.name!r} full",
                                                         column.full)):
                names = part.get("unset", [])
                if not isinstance(names, list) or not all(isinstance(k, str) for k in names):
                    raise ValueError(f"table file {self.path} {where}: unset must be a list of "
                                     f"option names (e.g. [\"local_steps\"]); got {names!r}")
                merged.update(part)
                unset += names
            for key in unset:
                merged.pop(key, None)
        return merged

    def run_file(self, column: Column, full: bool) -> RunFile:
        """The column's options checked as a configuration file (ValueError or TypeError
        naming the table file and the column)."""
        where = f"{self.path} (column {column.name!r}{', --full' if full else ''})"
        return parse_run_file(self.options(column, full), where)

    def config(self, column: Column, full: bool, data_dir: Optional[str]) -> SimulationConfig:
        """The column's :class:`~fastfair.sim.config.SimulationConfig` (its first rule and
        seed), with ``data_dir`` as its data folder when it reads one."""
        run = self.run_file(column, full)
        values = dict(run.config)
        if column.data is not None:
            values["data_dir"] = data_dir
        try:
            return SimulationConfig(**values, seed=self.seeds[0])
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"{self.path} (column {column.name!r}): {exc}") from None


#: Seeds feed int64 generators: each lies in [0, SEED_LIMIT).
SEED_LIMIT = 2 ** 63
#: The families of per-client metrics a run records (``acc_mean``, ``auroc_worst10``, ...).
_METRIC_FAMILIES = ("acc", "acc5", "auroc", "ece", "mce", "val_acc", "val_auroc")
#: The losses a run records.
_LOSSES = ("test_loss", "val_loss", "train_loss")


def metric_names() -> List[str]:
    """The metrics a run can record, but those numbered per group or class (``acc_group3``,
    ``acc_class7``): each family of :data:`_METRIC_FAMILIES` with each fairness statistic
    (:func:`~fastfair.sim.reporting.metrics.fairness_metrics`), ``pooled``, the group ones,
    and the losses."""
    import numpy as np

    from fastfair.sim.reporting.metrics import fairness_metrics

    stats = [*fairness_metrics(np.ones(2)), "pooled", "worst_group", "gini_groups"]
    return [f"{family}_{stat}" for family in _METRIC_FAMILIES for stat in stats] + list(_LOSSES)


def check_metric(metric: str, where: str) -> None:
    """Raises ValueError, naming ``where`` and suggesting the closest name, unless a run can
    record ``metric`` (:func:`metric_names`, or ``acc_group<g>`` / ``acc_class<c>``)."""
    if re.fullmatch(r"(val_)?acc_(group|class)\d+", metric) or metric in metric_names():
        return
    close = difflib.get_close_matches(metric, metric_names(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"{where}: {metric!r} is no metric a run records{hint}; e.g. "
                     "acc_weighted_mean, acc_worst10, auroc_mean, test_loss")


def check_seeds(seeds: Any, where: str) -> None:
    """Raises ValueError naming ``where`` unless ``seeds`` is a non-empty list of distinct
    integers in [0, :data:`SEED_LIMIT`)."""
    ok = isinstance(seeds, list) and bool(seeds) and all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s < SEED_LIMIT for s in seeds)
    if not ok or len(set(seeds)) != len(seeds):
        raise ValueError(f"{where} must be distinct integers in [0, 2**63), at least one; got "
                         f"{seeds!r}")


def column_folder(name: str) -> str:
    """The folder under a table's ``--out`` that holds column ``name``'s sweep: its letters and
    digits in lower case, runs of anything else as one ``-``."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "column"


def table_names() -> List[str]:
    """The names of the shipped tables (their files' names without ``.toml``), sorted."""
    return sorted(p.stem for p in TABLES_DIR.glob("*.toml"))


def load_table(name: Union[str, "os.PathLike[str]"]) -> TableSpec:
    """The shipped table ``name`` (:func:`table_names`), or the table file at that path,
    checked (:func:`check_table`).

    Raises
    ------
    ValueError
        An unknown name (the closest names suggested), or a file that is not a table file
        (naming the file and the key).
    """
    text = os.fspath(name)
    path = Path(text) if text.endswith(".toml") else TABLES_DIR / f"{text}.toml"
    if not path.is_file():
        close = difflib.get_close_matches(text, table_names(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"no table {text!r}{hint}; fastfair reproduce --list names them")
    raw = read_file(path)
    check_options(f"table file {path}", raw, {
        "table": OptionSpec("table", Dict[str, Any], {}),
        "run": OptionSpec("run", Dict[str, Any], {}),
        "full": OptionSpec("full", Dict[str, Any], {}),
        "column": OptionSpec("column", List[Dict[str, Any]], [])})
    head = raw.get("table", {})
    check_options(f"table file {path} [table]", head, _TABLE_KEYS)
    missing = [k for k in _REQUIRED if k not in head]
    if missing:
        raise ValueError(f"table file {path} [table] needs {', '.join(missing)}")
    columns = []
    for i, item in enumerate(raw.get("column", [])):
        check_options(f"table file {path} [[column]] {i + 1}", item, _COLUMN_KEYS)
        if "name" not in item:
            raise ValueError(f"table file {path}: [[column]] {i + 1} needs a name")
        columns.append(Column(**item))
    if not columns:
        raise ValueError(f"table file {path} has no [[column]]")
    values = {k: head.get(k, spec.default) for k, spec in _TABLE_KEYS.items()}
    spec = TableSpec(name=path.stem, path=path, run=raw.get("run", {}),
                     full=raw.get("full", {}), columns=columns, **values)
    check_table(spec)
    return spec


def check_table(spec: TableSpec) -> None:
    """Checks every column of ``spec``, in its shipped and its full setting, as a
    configuration file and a :class:`~fastfair.sim.config.SimulationConfig` (its data folder
    stood in for by the current folder: nothing is read or run), its rules against the
    baseline and the paper's numbers, and its split's options.

    Raises
    ------
    ValueError, TypeError
        Naming the table file, the column and the option.
    """
    from fastfair.reproduce.prepare import check_split

    where = f"table file {spec.path}"
    check_seeds(spec.seeds, f"{where} [table]: seeds")
    if not (math.isfinite(spec.tie) and spec.tie >= 0):
        raise ValueError(f"{where} [table]: tie must be a finite number >= 0 (points of the "
                         f"metric below which the paper finds no difference); got {spec.tie}")
    for metric, key in ((spec.metric, "metric"), *((m, "also") for m in spec.also)):
        check_metric(metric, f"{where} [table]: {key}")
    names = [c.name for c in spec.columns]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: column names must be distinct; got {names}")
    folders: Dict[str, str] = {}
    for name in names:
        other = folders.setdefault(column_folder(name), name)
        if other != name:
            raise ValueError(f"{where}: columns {other!r} and {name!r} would share the folder "
                             f"{column_folder(name)!r} of --out; rename one")
    for column in spec.columns:
        for full in (False, True):
            run = spec.run_file(column, full)
            rules = run.rules or []
            if spec.baseline not in rules:
                raise ValueError(f"{where} (column {column.name!r}): the baseline "
                                 f"{spec.baseline!r} is not among its rules {rules}")
            extra = sorted(set(column.paper) - set(rules))
            if extra:
                raise ValueError(f"{where} (column {column.name!r}): paper gives numbers for "
                                 f"{extra}, which are not among its rules {rules}")
            spec.config(column, full, os.curdir)
            bad = {r: v for r, v in column.claim.items() if r not in rules or v not in (-1, 1)}
            if bad:
                raise ValueError(f"{where} (column {column.name!r}): claim maps rules among "
                                 f"{rules} to +1 or -1; got {bad}")
        numbers = {r: v for r, v in column.paper.items()
                   if not isinstance(v, (int, float)) or isinstance(v, bool)}
        if numbers:
            raise TypeError(f"{where} (column {column.name!r}): paper maps rules to numbers "
                            f"(in %); got {numbers}")
        if column.prepare is not None:
            options = dict(column.prepare)
            split = options.pop("split", None)
            if not isinstance(split, str):
                raise ValueError(f"{where} (column {column.name!r}): prepare needs split, one "
                                 "of fastfair.reproduce.prepare's splits")
            try:
                check_split(split, options)
            except (ValueError, TypeError) as exc:
                raise type(exc)(f"{where} (column {column.name!r}): {exc}") from None
            if column.data is None:
                raise ValueError(f"{where} (column {column.name!r}): prepare reads files: "
                                 "give data, the folder under --data-dir")


def replace_seeds(spec: TableSpec, seeds: List[int]) -> TableSpec:
    """``spec`` run over ``seeds`` instead of its own (distinct integers in [0, 2**63))."""
    check_seeds(seeds, "--seeds")
    return dataclasses.replace(spec, seeds=list(seeds))


def check_data(spec: TableSpec, data_dir: Optional[str], full: bool) -> None:
    """Refuses, before ``--out`` is made or any column runs, a table whose columns cannot read
    their data under ``data_dir``: no such folder, or files a column's configuration does not
    fit (:func:`~fastfair.sim.data.catalog.check_files`: too few users for its ``clients``, a
    partition making another number of clients). Columns with a ``prepare`` split are left to
    the split, which reads the raw files.

    Raises
    ------
    ValueError, TypeError
        Naming the table file, the column and the option.
    """
    from fastfair.reproduce.prepare import data_folder
    from fastfair.sim.data.catalog import check_files

    needs = sorted({c.data for c in spec.columns if c.data is not None})
    if needs and (data_dir is None or not os.path.isdir(data_dir)):
        raise ValueError(f"table {spec.name} reads {', '.join(needs)}: --data-dir must be the "
                         f"folder holding them; got {data_dir!r}")
    for column in spec.columns:
        if column.data is None or column.prepare is not None:
            continue
        config = spec.config(column, full, data_folder(str(data_dir), column.data))
        try:
            check_files(config)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"table file {spec.path} (column {column.name!r}, its run's options "
                            f"in the table file): {exc}") from None
