"""The options of ``fastfair simulate`` and ``fastfair sweep`` that set a
:class:`~fastfair.sim.config.SimulationConfig` field, made from the fields themselves: each
field's name, type and default, and the help, section, choices and value name of its metadata
(:func:`fastfair.sim.config.doc`). A new field is a new option of both commands, with nothing
to change here or in :mod:`fastfair.cli`.

A field ``some_name`` is the option ``--some-name``: a flag for a bool, ``KEY=VALUE``
(repeatable) for a dict (``server_options`` is ``--server-option``), a value of the field's
type otherwise (``Optional[int]``: an int). The command line writes by hand only the options of
:data:`HAND_WRITTEN` fields and those that are not fields at all (rules, seeds, grid, output,
logging, checkpoints)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import typing
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

#: The fields the command line sets by hand: the rules (``--rule``, ``--compare``,
#: ``--rule-option``) and the seed (``--seed``, ``--seeds``).
HAND_WRITTEN = ("rule", "rule_options", "seed")


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default once: appended to its help unless the help already speaks
    of it or there is none to show (None, False, an empty list or text)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default is argparse.SUPPRESS or default is None \
                or default is False or default == [] or default == "":
            return text
        return text + " (default: %(default)s)"


def parse_value(text: str) -> Any:
    """``text`` as JSON (numbers, true/false, null, lists, ...), or as itself when it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def key_values(pairs: Sequence[str], flag: str) -> Dict[str, Any]:
    """``["KEY=VALUE", ...]`` -> {key: value}; ValueError naming ``flag`` on a malformed pair."""
    out = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} expects KEY=VALUE; got {pair!r}")
        out[key] = parse_value(text)
    return out


def config_fields(cls: type) -> List[dataclasses.Field]:
    """The fields of the configuration class ``cls`` that are options of their own."""
    return [f for f in dataclasses.fields(cls) if f.name not in HAND_WRITTEN]


def flag(f: dataclasses.Field) -> str:
    """The option of field ``f``: ``--some-name``; ``--some-option`` for a dict ``some_options``."""
    name = f.name[:-1] if _is_dict(f) and f.name.endswith("s") else f.name
    return "--" + name.replace("_", "-")


def dest(f: dataclasses.Field) -> str:
    """The attribute of the parsed arguments that holds field ``f``'s option."""
    return flag(f)[2:].replace("-", "_")


def add_config_options(group: Callable[[str], Any], cls: type,
                       inferred: Optional[Mapping[str, str]] = None) -> None:
    """Adds an option per field of ``cls`` (but :data:`HAND_WRITTEN`) to ``group(section)``,
    the argument group of the field's section. A field of ``inferred`` defaults to None, which
    the caller resolves; its text there follows the field's help."""
    hints, inferred = typing.get_type_hints(cls), inferred or {}
    for f in config_fields(cls):
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
                kwargs["choices"] = _choices(meta["choices"])
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
    return f.default_factory is dict  # type: ignore[comparison-overlap]


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def _plain_type(annotation: Any) -> Any:
    """``Optional[X]`` -> X; anything else as it is (a non-type, e.g. ``Any``: str)."""
    if typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation if isinstance(annotation, type) else str


def _choices(choices: Any) -> List[Any]:
    """A field's choices: a sequence, or ``"module:NAME"``, the keys of that registry."""
    if isinstance(choices, str):
        module, _, name = choices.partition(":")
        choices = getattr(importlib.import_module(module), name)
    return list(choices)
