"""Named options of rules, server optimisers and methods: their listing and the checks every
caller (Python, the command line, Flower) runs before anything is built, run or written."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
from typing import Any, Callable, Dict, Mapping, NamedTuple, Sequence, Tuple, Union


class OptionSpec(NamedTuple):
    """One option: its name, the type it takes (a ``typing`` annotation) and its default."""

    name: str
    annotation: Any
    default: Any

    def describe(self) -> str:
        return f"{self.name}={self.default!r}"


def signature_options(func: Callable[..., Any],
                      skip: Tuple[str, ...] = ()) -> Dict[str, OptionSpec]:
    """The keyword options of ``func`` (e.g. a class's ``__init__``), less ``self`` and ``skip``."""
    hints = typing.get_type_hints(func)
    out = {}
    for p in inspect.signature(func).parameters.values():
        if p.name == "self" or p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = None if p.default is inspect.Parameter.empty else p.default
        out[p.name] = OptionSpec(p.name, hints.get(p.name, Any), default)
    return out


def dataclass_options(cls: type) -> Dict[str, OptionSpec]:
    """The fields of an options dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: OptionSpec(f.name, hints.get(f.name, Any), f.default)
            for f in dataclasses.fields(cls)}


def _accepts(annotation: Any, value: Any) -> bool:
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is Union:
        return any(_accepts(a, value) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    value = plain(value)   # NumPy scalars: checked as the Python numbers they hold
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return True  # arrays, sequences: the constructor checks them


def plain(value: Any) -> Any:
    """``value`` with NumPy scalars (``np.int64(3)``, ``np.float32(0.5)``, ``np.bool_``) as the
    Python numbers they hold, inside lists, tuples and dicts too: what an option accepts as an
    int or a float is stored, compared and written to JSON as one."""
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return value.item()   # a NumPy scalar, told apart without importing NumPy
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is Union:
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def check_name(kind: str, name: Any, names: Sequence[str]) -> None:
    """Raises ValueError unless ``name`` is one of ``names``: the message lists them and
    suggests the closest (``kind`` says what is named, e.g. ``"rule"``)."""
    if name not in names:
        close = difflib.get_close_matches(str(name), list(names), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown {kind} {name!r}{hint}; choose from {', '.join(names)}")


def check_options(owner: str, options: Mapping[str, Any], spec: Mapping[str, OptionSpec]) -> None:
    """Raises unless every key of ``options`` is an option of ``spec`` with a value of its type.

    ``owner`` names what takes the options (``"rule 'fedmaba'"``). An unknown key raises
    ``ValueError`` listing the valid options and suggesting the closest; a value of the wrong
    type raises ``TypeError`` naming the option, the type it takes and the value given.
    """
    for key, value in options.items():
        if key not in spec:
            close = difflib.get_close_matches(key, list(spec), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            valid = ", ".join(s.describe() for s in spec.values()) or "none"
            raise ValueError(f"{owner} has no option {key!r}{hint}; its options are: {valid}")
        if not _accepts(spec[key].annotation, value):
            raise TypeError(f"{owner}: option {key!r} takes {_type_name(spec[key].annotation)}; "
                            f"got {value!r} ({type(value).__name__})")
