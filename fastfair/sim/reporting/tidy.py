"""Results as tidy records, pandas data frames and notebook tables.

A tidy table has one row per observation: per run, round and metric (``kind="rounds"``), or per
run and evaluation client (``kind="clients"``). :func:`to_pandas` turns the records into a
``pandas.DataFrame`` (pandas is optional: it is imported only there). Every value is in the
unit the run recorded it in: accuracies as fractions in [0, 1], as everywhere in fastfair.
"""

from __future__ import annotations

import csv
import html
import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

import numpy as np

from fastfair._files import atomic

#: The tables :func:`round_records` and :func:`client_records` make.
KINDS = ("rounds", "clients")
#: Record entries that say which round it is, not what was measured.
_INDEX = ("round",)

#: One run: the columns that name it (``run``, ``rule``, ...), its round records and its final
#: per-client accuracy with the evaluation clients' ids.
Run = Tuple[Dict[str, Any], Sequence[Mapping[str, Any]], np.ndarray, np.ndarray]


def check_kind(kind: str) -> None:
    """Raises ValueError unless ``kind`` is one of :data:`KINDS`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}; got {kind!r}")


def round_records(runs: Iterable[Run]) -> List[Dict[str, Any]]:
    """One record per run x round x metric: the run's naming columns, ``round``, ``metric`` and
    ``value`` (a float; every entry of a round record but ``round``)."""
    rows: List[Dict[str, Any]] = []
    for names, history, _, _ in runs:
        for record in history:
            for metric, value in record.items():
                if metric in _INDEX or isinstance(value, (str, bool)) or value is None:
                    continue
                rows.append({**names, "round": int(record["round"]), "metric": metric,
                             "value": float(value)})
    return rows


def client_records(runs: Iterable[Run]) -> List[Dict[str, Any]]:
    """One record per run x evaluation client: the run's naming columns, ``client`` (its id)
    and ``accuracy`` (its final test accuracy, a fraction)."""
    return [{**names, "client": int(cid), "accuracy": float(acc)}
            for names, _, final, ids in runs for cid, acc in zip(ids, final)]


def records(runs: Sequence[Run], kind: str) -> List[Dict[str, Any]]:
    """:func:`round_records` (``kind="rounds"``) or :func:`client_records` (``"clients"``)."""
    check_kind(kind)
    return round_records(runs) if kind == "rounds" else client_records(runs)


def to_pandas(rows: List[Dict[str, Any]]) -> Any:
    """``rows`` (records of one shape) as a ``pandas.DataFrame``.

    Raises
    ------
    ModuleNotFoundError
        pandas is not installed; the message says how to install it.
    """
    try:
        import pandas  # type: ignore[import-untyped]
    except ModuleNotFoundError as exc:
        if exc.name != "pandas":
            raise
        raise ModuleNotFoundError(
            "to_pandas() needs pandas, which is not installed: pip install pandas (or use "
            "to_records(), the same rows as a list of dicts)", name="pandas") from exc
    return pandas.DataFrame(rows)


def html_table(header: Sequence[str], body: Sequence[Sequence[Any]], caption: str) -> str:
    """An HTML table (a notebook's display of a result): ``header``, the rows of ``body``
    (floats with 4 significant digits, NaN as empty) and a ``caption``."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.4g}"
        return html.escape(str(value))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                   for row in body)
    return (f"<table><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def write_client_accuracy(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Writes client records (:func:`client_records`) as a CSV file ``path`` (accuracy with 6
    significant digits); no rows: the header ``run, client, accuracy`` alone."""
    columns = list(rows[0]) if rows else ["run", "client", "accuracy"]
    with atomic(path, text=True) as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({**row, "accuracy": f"{row['accuracy']:.6g}"} for row in rows)
