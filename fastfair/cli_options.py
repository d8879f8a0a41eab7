"""The options of ``fastfair simulate`` and ``fastfair sweep`` that set a
:class:`~fastfair.sim.config.SimulationConfig` field, made from the fields themselves: each
field's name, type and default, and the help, section, choices and value name of its metadata
(:func:`fastfair.sim.settings.doc`). A new field is a new option of both commands, with nothing
to change here or in :mod:`fastfair.cli`.

A field ``some_name`` is the option ``--some-name``: a flag for a bool, ``KEY=VALUE``
(repeatable) for a dict (``server_options`` is ``--server-option``), a value of the field's
type otherwise (``Optional[int]``: an int). The command line writes by hand only the options of
:data:`HAND_WRITTEN` fields and those that are not fields at all (rules, seeds, grid, output,
logging, checkpoints).

``--config FILE`` (:func:`apply_file`) gives any of them from a TOML, YAML or JSON file
(:mod:`fastfair.sim.experiments.config_file`); what the command line types overrides it."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import typing
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set

#: The fields the command line sets by hand: the rules (``--rule``, ``--compare``,
#: ``--rule-option``) and the seed (``--seed``, ``--seeds``).
HAND_WRITTEN = ("rule", "rule_options", "seed")


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default once: appended to its help unless the help already speaks
    of it. An option that takes one value and has none by default (None, empty text) says
    ``(default: none)``; flags (off by default) and repeatable options (none by default) say
    nothing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default is argparse.SUPPRESS or default is False \
                or default == [] or isinstance(action, argparse._AppendAction):
            return text
        if default is None or default == "":
            return text + " (default: none)" if action.nargs != 0 else text
        return text + " (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser (and its commands', which take its class) whose errors suggest the
    closest name, as a configuration file's unknown keys and a rule's unknown options do: an
    unknown option (``--rouns``: did you mean ``--rounds``?) and a value outside an option's
    choices (``--dataset synthtic``: did you mean ``'synthetic'``?)."""

    def parse_args(self, args: Optional[Sequence[str]] = None,  # type: ignore[override]
                   namespace: Optional[argparse.Namespace] = None) -> argparse.Namespace:
        """As argparse's, but an unknown option is reported by the command it was given to,
        with the closest of that command's options: ``unrecognized arguments: --rouns (did you
        mean --rounds?) 3``."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command(getattr(parsed, "command", None))
            names = [s for a in command._actions for s in a.option_strings]
            hints = [f"{word} (did you mean {close[0]}?)" if close else word
                     for word in extras
                     for close in [difflib.get_close_matches(word.split("=")[0], names, n=1)
                                   if word.startswith("-") else []]]
            command.error(f"unrecognized arguments: {' '.join(hints)}")
        return parsed

    def _command(self, name: Optional[str]) -> argparse.ArgumentParser:
        """The parser of command ``name`` (this one when it has no such command)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                return action.choices[name]
        return self

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint}; choose "
                                                 f"from {', '.join(choices)}")


def parse_value(text: str) -> Any:
    """``text`` as JSON (numbers, true/false, null, lists, ...), or as itself when it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def key_values(pairs: Sequence[Any], flag: str) -> Dict[str, Any]:
    """``["KEY=VALUE", ...]`` -> {key: value}; ValueError naming ``flag`` on a malformed pair.
    A mapping among ``pairs`` (a configuration file's) gives its keys in its place."""
    out: Dict[str, Any] = {}
    for pair in pairs:
        if isinstance(pair, Mapping):
            out.update(pair)
            continue
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} expects KEY=VALUE; got {pair!r}")
        out[key] = parse_value(text)
    return out


def config_fields(cls: type) -> List[dataclasses.Field]:
    """The fields of the configuration class ``cls`` that are options of their own."""
    from fastfair.sim.settings import ordered_fields

    return [f for f in ordered_fields(cls) if f.name not in HAND_WRITTEN]


def flag(f: dataclasses.Field) -> str:
    """The option of field ``f``: ``--some-name``; ``--some-option`` for a dict ``some_options``."""
    name = f.name[:-1] if _is_dict(f) and f.name.endswith("s") else f.name
    return "--" + name.replace("_", "-")


def dest(f: dataclasses.Field) -> str:
    """The attribute of the parsed arguments that holds field ``f``'s option."""
    return flag(f)[2:].replace("-", "_")


def add_config_options(group: Callable[[str], Any], cls: type,
                       inferred: Optional[Mapping[str, str]] = None,
                       only: Optional[Sequence[str]] = None) -> None:
    """Adds an option per field of ``cls`` (but :data:`HAND_WRITTEN`; of ``only``'s fields
    where given) to ``group(section)``, the argument group of the field's section. A field of
    ``inferred`` defaults to None, which the caller resolves; its text there follows the
    field's help."""
    hints, inferred = typing.get_type_hints(cls), inferred or {}
    for f in config_fields(cls):
        if only is not None and f.name not in only:
            continue
        meta = f.metadata
        text = meta.get("help", "").replace("%", "%%")
        kwargs: Dict[str, Any] = {"default": _default(f)}
        if "metavar" in meta:
            kwargs["metavar"] = meta["metavar"]
        kind = _plain_type(hints.get(f.name, str))
        if _is_dict(f):
            kwargs.update(action="append", default=[], metavar="KEY=VALUE")
        elif kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction if f.default else "store_true"
        else:
            kwargs["type"] = None if kind is str else kind
            if "choices" in meta:
                kwargs["choices"] = list(meta["choices"])
        if f.name in inferred:
            kwargs["default"] = None
            text = f"{text}; {inferred[f.name]}" if text else inferred[f.name]
        group(meta.get("group", "configuration")).add_argument(flag(f), help=text, **kwargs)


def config_values(args: argparse.Namespace, cls: type) -> Dict[str, Any]:
    """{field: value} of the options :func:`add_config_options` made, as ``args`` holds them
    (``KEY=VALUE`` lists as dicts; an inferred field's None as it is)."""
    return {f.name: key_values(getattr(args, dest(f)), flag(f)) if _is_dict(f)
            else getattr(args, dest(f)) for f in config_fields(cls)}


def _is_dict(f: dataclasses.Field) -> bool:
    return f.default_factory is dict


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def _plain_type(annotation: Any) -> Any:
    """``Optional[X]`` -> X; anything else as it is (a non-type, e.g. ``Any``: str)."""
    if typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation if isinstance(annotation, type) else str


def parse_grid(pairs: Sequence[str], rules: Sequence[str],
               given: Optional[Mapping[str, Mapping[str, List[Any]]]] = None
               ) -> Dict[str, Dict[str, List[Any]]]:
    """``--grid RULE:KEY=V1,V2,...`` -> {rule: {key: [values]}}, over the grid ``given`` by a
    configuration file (a rule's key typed here replaces the file's values of it)."""
    grid: Dict[str, Dict[str, List[Any]]] = {r: dict(o) for r, o in (given or {}).items()}
    typed: set = set()
    for pair in pairs:
        target, sep, assignment = pair.partition(":")
        key, eq, text = assignment.partition("=")
        if not sep or not eq or not target or not key or not text:
            raise ValueError(f"--grid expects RULE:KEY=V1,V2,...; got {pair!r}")
        if target not in rules:
            raise ValueError(f"--grid {pair!r} names rule {target!r}, which is not run")
        if (target, key) in typed:
            raise ValueError(f"--grid gives {target}:{key} twice")
        typed.add((target, key))
        grid.setdefault(target, {})[key] = [parse_value(v) for v in text.split(",")]
    return grid


def parse_rule_options(pairs: Sequence[str], rules: Sequence[str],
                       given: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """The rules' options of ``--rule-option``, over those a configuration file gives.

    Parameters
    ----------
    pairs
        ``KEY=VALUE`` (an option of every rule) or ``RULE:KEY=VALUE`` (of one rule), in order;
        each value is read by :func:`parse_value`, and a later pair replaces an earlier key.
    rules
        The rules run.
    given
        ``{rule: {key: value}}`` of the configuration file (empty without one).

    Returns
    -------
    dict
        ``{rule: {key: value}}`` for every rule of ``rules`` (empty dicts included).

    Raises
    ------
    ValueError
        A malformed pair, a rule not run, or a ``KEY=VALUE`` for every rule that only some of
        them take: ``did you mean aaggff-d:cdf=weibull?`` names those that do.
    """
    options: Dict[str, Dict[str, Any]] = {r: dict(given.get(r, {})) for r in rules}
    for pair in pairs:
        scoped = ":" in pair.split("=", 1)[0]
        target, _, assignment = pair.rpartition(":") if scoped else ("", "", pair)
        key, sep, text = assignment.partition("=")
        if not sep or not key:
            raise ValueError(f"--rule-option expects KEY=VALUE or RULE:KEY=VALUE; got {pair!r}")
        if target and target not in options:
            raise ValueError(f"--rule-option {pair!r} names rule {target!r}, which is not run")
        if not target and len(rules) > 1:
            _check_taken_by_all(key, text, rules)
        for rule in ([target] if target else rules):
            options[rule][key] = parse_value(text)
    return options


def _check_taken_by_all(key: str, text: str, rules: Sequence[str]) -> None:
    """Raises ValueError when option ``key``, given to every rule, is not an option of each:
    naming the rules that lack it and suggesting ``RULE:KEY=VALUE`` for those that take it."""
    from fastfair.aggregators.registry import RULES, rule_options
    from fastfair.methods import METHODS, method_options

    known = [r for r in rules if r in RULES or r in METHODS]  # others: refused by name later
    takers = [r for r in known if key in (rule_options(r) if r in RULES else method_options(r))]
    if len(takers) == len(known) or not takers:
        return  # all take it, or none: the rules' own checks name the option and the valid ones
    lacking = [repr(r) for r in known if r not in takers]
    verb = "has" if len(lacking) == 1 else "have"
    hint = " or ".join(f"{r}:{key}={text}" for r in takers)
    raise ValueError(f"--rule-option {key}={text} goes to every rule, but {', '.join(lacking)} "
                     f"{verb} no option {key!r}; did you mean {hint}?")


def apply_file(args: argparse.Namespace, path: Any, typed: Set[str], cls: type) -> None:
    """Sets in ``args`` what the configuration file ``path`` gives (fields of ``cls`` and the
    run keys of :mod:`fastfair.sim.experiments.config_file`) and the command line did not
    type (``typed``, destinations): an option typed replaces the file's value; ``KEY=VALUE``
    options, ``--rule-option`` and ``--grid`` replace only the keys they give. Rules the file
    gives options or a grid for that the command line's ``--rule`` / ``--compare`` leave out
    are dropped. ``args.file`` keeps the rest (rule options, grid, metrics, batched)."""
    from fastfair._options import check_name
    from fastfair.sim.experiments.config_file import load_run_file

    run = load_run_file(path)
    for f in config_fields(cls):
        if f.name not in run.config:
            continue
        value = run.config[f.name]
        if "choices" in f.metadata and value is not None and not isinstance(value, dict):
            try:  # as the option's choices are checked: before any other use of the value
                check_name(f.name, value, [str(c) for c in f.metadata["choices"]])
            except ValueError as exc:
                raise ValueError(f"{run.path}: {exc}") from None
        if _is_dict(f):
            setattr(args, dest(f), [run.config[f.name], *getattr(args, dest(f))])
        elif dest(f) not in typed:
            setattr(args, dest(f), run.config[f.name])
    rules_typed = bool({"rule", "compare"} & typed)
    if run.rules is not None and not rules_typed:
        args.compare = ",".join(run.rules)
    if run.seeds is not None and not {"seed", "seeds"} & typed:
        args.seeds = ",".join(map(str, run.seeds))
    for key in ("baseline", "select", "checkpoint_every"):
        if key in run.run and key not in typed:
            setattr(args, key, run.run[key] if run.run[key] is not None else "")
    args.file = run
    args.file_drops_others = rules_typed


def file_by_rule(args: argparse.Namespace, key: str, rules: Sequence[str]) -> Dict[str, Any]:
    """The configuration file's ``key`` (``rule_options`` or ``grid``) for ``rules``: ValueError
    naming the file when it names a rule not run, unless the command line chose the rules."""
    run = getattr(args, "file", None)
    given = dict(run.run.get(key, {})) if run is not None else {}
    extra = sorted(set(given) - set(rules))
    if extra and not args.file_drops_others:
        assert run is not None  # the rules it names came from the file
        raise ValueError(f"{run.path}: {key} names {', '.join(map(repr, extra))}, which is not "
                         f"run (rules: {', '.join(rules)}); add it to the rules or drop it")
    return {r: o for r, o in given.items() if r in rules}
