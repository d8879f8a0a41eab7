"""Run configurations in files: TOML, YAML or JSON holding the names of
:class:`~fastfair.sim.config.SimulationConfig`'s fields and the run options an
:class:`~fastfair.sim.experiments.experiment.Experiment` or
:class:`~fastfair.sim.experiments.sweep.Sweep` takes (:data:`RUN_KEYS`). ``fastfair simulate
--config FILE`` and ``fastfair sweep --config FILE`` read them (options typed on the command line
override the file), and a run folder's ``config.json`` or ``sweep.json`` is such a file: it runs
the same run again.

.. code-block:: toml

    rules = ["fedavg", "term"]        # or compare = "fedavg,term", or rule = "term"
    seeds = [0, 1, 2]
    rounds = 100
    validation = 0.2

    [grid.term]
    tilt = [0.1, 1.0, 10.0]

The fields may also sit in a ``config`` table, as run folders write them; there ``rule``,
``rule_options`` and ``seed`` are the run's only when the file gives no ``rules`` (``rule``,
``compare``) or ``seeds`` (``seed``) of its own. Files are read only when they are regular files;
YAML with ``yaml.safe_load`` (PyYAML), TOML with ``tomllib`` (``tomli`` before Python 3.11).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from fastfair._files import read_regular_file
from fastfair._limits import check_tree
from fastfair._options import OptionSpec, check_options, dataclass_options
from fastfair.sim.config import SimulationConfig

#: Longest configuration file read (a configuration is a few kilobytes).
MAX_FILE_BYTES = 16 * 2**20
#: File name endings and the format each is read as.
FORMATS = {".toml": "TOML", ".yaml": "YAML", ".yml": "YAML", ".json": "JSON"}
#: The keys of a configuration file besides the configuration's fields (and the ``config``
#: table that may hold those): what an experiment or a sweep takes beside its configuration.
RUN_KEYS = {
    "rules": OptionSpec("rules", Union[str, List[str]], None),
    "compare": OptionSpec("compare", Union[str, List[str]], None),
    "seeds": OptionSpec("seeds", Union[str, List[int]], None),
    "rule_options": OptionSpec("rule_options", Dict[str, Dict[str, Any]], {}),
    "grid": OptionSpec("grid", Dict[str, Dict[str, List[Any]]], {}),
    "baseline": OptionSpec("baseline", Optional[str], "fedavg"),
    "select": OptionSpec("select", str, "acc_mean"),
    "metrics": OptionSpec("metrics", List[str], None),
    "checkpoint_every": OptionSpec("checkpoint_every", int, 0),
    "batched": OptionSpec("batched", bool, True),
}
#: Fields that say which runs there are: the file's ``rules`` and ``seeds`` take their place.
RUN_FIELDS = ("rule", "rule_options", "seed")
#: A number in exponent form without a dot (``1e-3``): YAML 1.2 reads it as a number, PyYAML's
#: YAML 1.1 as text.
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


@dataclass
class RunFile:
    """What a configuration file gives.

    ``config``: the configuration fields it sets (but :data:`RUN_FIELDS`); ``rules``,
    ``seeds``: the runs it names (None: not given); ``run``: the other :data:`RUN_KEYS` it
    sets (``rule_options`` and ``grid`` by rule, ``baseline`` None for none); ``base_seed``:
    the ``config`` table's ``seed`` when ``seeds`` are given beside it, as in a sweep's
    ``sweep.json`` (its base configuration's seed, which each run's seed replaces: kept so that
    the file a rerun writes is the same file)."""

    path: Path
    config: Dict[str, Any] = field(default_factory=dict)
    rules: Optional[List[str]] = None
    seeds: Optional[List[int]] = None
    run: Dict[str, Any] = field(default_factory=dict)
    base_seed: Optional[int] = None


def read_file(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """The mapping in the TOML, YAML or JSON file ``path`` (its format by its ending:
    :data:`FORMATS`).

    The parsed document is bounded before anything walks it (:func:`fastfair._limits.check_tree`:
    at most 100000 values with YAML aliases expanded, 32 levels deep, counted without expanding
    them), and the file to :data:`MAX_FILE_BYTES`.

    Raises
    ------
    ValueError
        Naming the file: another ending, not a regular file, longer than
        :data:`MAX_FILE_BYTES`, not valid text of its format, too large or deep once parsed, not
        a mapping at the top, or the reader of its format is not installed.
    """
    where = os.fspath(path)
    kind = FORMATS.get(Path(where).suffix.lower())
    if kind is None:
        raise ValueError(f"--config {where}: the file must end in .toml, .yaml, .yml or .json "
                         "(its format); rename it")
    data = read_regular_file(where, "configuration file", MAX_FILE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where} is not UTF-8 text (byte {exc.start})") from None
    try:
        value = _PARSERS[kind](text, where)
    except RecursionError:
        raise ValueError(f"{where} is not valid {kind}: nested too deeply") from None
    check_tree(value, where)
    if kind == "YAML":
        value = _numbers(value)
    if not isinstance(value, dict):
        raise ValueError(f"{where} must hold a mapping of option names to values at the top; "
                         f"got {type(value).__name__}")
    return value


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where} is not valid JSON ({exc})") from None


def _toml(text: str, where: str) -> Any:
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        try:
            import tomli as tomllib  # type: ignore[no-redef]  # the same API before 3.11
        except ImportError:
            raise ValueError(f"{where}: reading TOML before Python 3.11 needs the tomli "
                             "package (pip install tomli), or give the file as YAML or JSON") \
                from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where} is not valid TOML ({exc})") from None


def _yaml(text: str, where: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise ValueError(f"{where}: reading YAML needs the PyYAML package (pip install pyyaml), "
                         "or give the file as TOML or JSON") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where} is not valid YAML ({exc})") from None


def _numbers(value: Any) -> Any:
    """``value`` with every text in exponent form without a dot (``1e-3``) as the number it is
    in YAML 1.2 and TOML (PyYAML reads it as text)."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, str) and _EXPONENT.fullmatch(value):
        return float(value)
    return value


_PARSERS = {"JSON": _json, "TOML": _toml, "YAML": _yaml}


def load_run_file(path: Union[str, "os.PathLike[str]"]) -> RunFile:
    """The configuration file ``path`` (:func:`read_file`), its keys checked: an unknown key
    raises ValueError suggesting the closest name, a value of the wrong type TypeError naming
    the key, both naming the file.

    The configuration's fields may be given at the top or in a ``config`` table (not both for
    one field); ``rules`` (or ``compare``: a list of names, or them comma-separated, or
    ``rule``: one) and ``seeds`` (a list, or ``seed``: one) name the runs, else the ``config``
    table's ``rule`` (with its ``rule_options``) and ``seed`` do. ``rule_options`` at the top
    maps each rule to its options, and ``grid`` each rule to its options' values.
    """
    where = os.fspath(path)
    return parse_run_file(read_file(where), where)


def parse_run_file(raw: Dict[str, Any], where: str) -> RunFile:
    """:func:`load_run_file` of the mapping ``raw`` already read (from a file, or a table of a
    larger file), its errors naming ``where``."""
    fields = _fields()
    top = {**{k: s for k, s in fields.items() if k not in RUN_KEYS}, **RUN_KEYS,
           "config": OptionSpec("config", Dict[str, Any], {})}
    _check_keys(raw, top, f"configuration file {where}")
    section = raw.get("config", {})
    if not isinstance(section, dict):
        raise TypeError(f"{where}: config must be a table of configuration fields; got "
                        f"{section!r}")
    _check_keys(section, fields, f"configuration file {where} (table config)")
    both = sorted(set(section) & (set(raw) - set(RUN_KEYS)))
    if both:
        raise ValueError(f"{where} gives {', '.join(both)} both at the top and in its config "
                         "table; keep one")
    given = {**section, **{k: v for k, v in raw.items() if k in fields and k not in RUN_KEYS}}
    result = RunFile(Path(where), config={k: v for k, v in given.items()
                                          if k not in RUN_FIELDS})
    result.rules = _rules(raw, where)
    result.seeds = _seeds(raw, where)
    for key in ("rule_options", "grid"):
        if key in raw:
            result.run[key] = _by_rule(raw[key], key, where)
    if result.rules is None and "rule" in section:
        result.rules = [_text(section["rule"], "config.rule", where)]
        options = {result.rules[0]: dict(section.get("rule_options", {}))}
        result.run["rule_options"] = {**options, **result.run.get("rule_options", {})}
    if result.seeds is None and "seed" in section:
        result.seeds = [section["seed"]]
    elif "seed" in section:
        result.base_seed = section["seed"]
    for key in ("baseline", "select", "metrics", "checkpoint_every", "batched"):
        if key in raw:
            result.run[key] = raw[key]
    if result.run.get("baseline") == "":
        result.run["baseline"] = None
    if "metrics" in result.run:
        result.run["metrics"] = _names(result.run["metrics"], "metrics", where)
    for key in ("rule_options", "grid"):
        extra = sorted(set(result.run.get(key, {})) - set(result.rules or ()))
        if result.rules is not None and extra:
            raise ValueError(f"{where}: {key} names {', '.join(map(repr, extra))}, which is not "
                             f"among its rules {result.rules}; add it to rules or drop it")
    return result


def _check_keys(table: Dict[Any, Any], spec: Dict[str, OptionSpec], owner: str) -> None:
    """:func:`~fastfair._options.check_options` of ``table``, whose keys must be names and
    whose dict options (``server_options``, ...) tables."""
    for key, value in table.items():
        if not isinstance(key, str):
            raise TypeError(f"{owner}: keys must be option names; got {key!r}")
        if isinstance(spec.get(key, OptionSpec(key, Any, None)).default, dict) \
                and not isinstance(value, dict):
            raise TypeError(f"{owner}: option {key!r} takes a table of names to values; got "
                            f"{value!r}")
    check_options(owner, table, spec)


def _fields() -> Dict[str, OptionSpec]:
    """The configuration's fields as options, with their defaults (a dict's: empty)."""
    return {f.name: spec._replace(default={} if spec.default is dataclasses.MISSING
                                  else spec.default)
            for f, spec in zip(dataclasses.fields(SimulationConfig),
                               dataclass_options(SimulationConfig).values())}


def _rules(raw: Dict[str, Any], where: str) -> Optional[List[str]]:
    given = [k for k in ("rules", "compare", "rule") if k in raw]
    if len(given) > 1:
        raise ValueError(f"{where} gives {' and '.join(given)}; name the rules once")
    if not given:
        return None
    key = given[0]
    if key == "rule":
        return [_text(raw[key], key, where)]
    rules = _names(raw[key], key, where)
    if not rules or len(set(rules)) != len(rules):
        raise ValueError(f"{where}: {key} must name distinct rules, at least one; got "
                         f"{raw[key]!r}")
    return rules


def _seeds(raw: Dict[str, Any], where: str) -> Optional[List[int]]:
    if "seed" in raw and "seeds" in raw:
        raise ValueError(f"{where} gives seed and seeds; give one")
    if "seed" in raw:
        return [raw["seed"]]
    if "seeds" not in raw:
        return None
    value = raw["seeds"]
    if isinstance(value, str):
        try:
            value = [int(t) for t in value.split(",") if t.strip()]
        except ValueError:
            raise ValueError(f"{where}: seeds must be integers (a list, or comma-separated); "
                             f"got {raw['seeds']!r}") from None
    if not isinstance(value, list) or not value or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in value):
        raise TypeError(f"{where}: seeds must be a list of integers, at least one; got "
                        f"{raw['seeds']!r}")
    return value


def _names(value: Any, key: str, where: str) -> List[str]:
    """A list of names, or them comma-separated in one text."""
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{where}: {key} must be a list of names (or them comma-separated); "
                        f"got {value!r}")
    return list(value)


def _text(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where}: {key} must be a rule's name; got {value!r}")
    return value


def _by_rule(value: Any, key: str, where: str) -> Dict[str, Dict[str, Any]]:
    """``rule_options`` or ``grid``: {rule: {option: value (grid: a list of values)}}."""
    example = ("rule_options = {term = {tilt = 1.0}}" if key == "rule_options"
               else "grid = {term = {tilt = [0.1, 1.0]}}")
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise TypeError(f"{where}: {key} maps each rule to its options, e.g. {example}; got "
                        f"{value!r}")
    if key == "grid":
        for rule, options in value.items():
            for name, values in options.items():
                if not isinstance(values, list) or not values:
                    raise TypeError(f"{where}: grid.{rule}.{name} must be a list of values, "
                                    f"at least one; got {values!r}")
    return {rule: dict(options) for rule, options in value.items()}


def config_from_file(path: Union[str, "os.PathLike[str]"]) -> SimulationConfig:
    """The :class:`~fastfair.sim.config.SimulationConfig` of configuration file ``path``: its
    fields, with ``rule``, ``rule_options`` and ``seed`` of its first rule and seed (see
    :func:`load_run_file`); ValueError or TypeError naming the file and the field."""
    run = load_run_file(path)
    values = dict(run.config)
    if run.rules:
        values["rule"] = run.rules[0]
        values["rule_options"] = run.run.get("rule_options", {}).get(run.rules[0], {})
    if run.seeds:
        values["seed"] = run.seeds[0]
    try:
        return SimulationConfig(**values)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"{os.fspath(path)}: {exc}") from None
