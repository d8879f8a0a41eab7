"""The checks a rule's ``load_state_dict`` runs before it installs anything (the contract's
State, in :mod:`fastfair.aggregators.base`): the header (format version, rule, population,
configuration) and every state value, by the checks the constructor and the rounds apply."""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar, Dict, Optional, Protocol

import numpy as np

from fastfair.aggregators._checks import StateSpec, check_count

#: Version of the ``state_dict`` format (2: ``"rule"`` holds the rule's public name; 3: a
#: per-client vector is stored sparse, as the ids, values and fill of
#: :mod:`fastfair.aggregators._client_vector`, where 1 and 2 held it dense ``[K]``).
FORMAT_VERSION = 3


class _Rule(Protocol):
    """What :class:`StateChecks` reads of the rule it is mixed into."""

    name: ClassVar[str]
    num_clients: int
    options_before: ClassVar[Dict[str, Any]]
    _num_samples: Optional[np.ndarray]

    def _config(self) -> Dict[str, Any]: ...

    def _state_specs(self) -> Dict[str, StateSpec]: ...

    def _counts_spec(self) -> StateSpec: ...

    def _check_state(self, state: Dict[str, Any]) -> None: ...

    def _check_header(self, state_dict: Dict[str, Any]) -> None: ...

    def _upgrade_state(self, given: Dict[str, Any]) -> Dict[str, Any]: ...


class StateChecks:
    """Mixin of :class:`~fastfair.aggregators.base.Aggregator`: checks a ``state_dict`` against
    this rule. It reads the rule's ``name``, ``num_clients``, ``options_before``,
    ``_num_samples`` and its declarations ``_config()``, ``_state_specs()``, ``_counts_spec()``
    and ``_check_state()``."""

    def _check_header(self: _Rule, state_dict: Dict[str, Any]) -> None:
        """Raises unless ``state_dict`` has this format version, rule, population and config
        (where a hyperparameter it lacks, being older, must be at its default here)."""
        if not isinstance(state_dict, dict):
            raise TypeError("state_dict must be a dict returned by state_dict()")
        version = state_dict.get("format_version")
        if version not in (1, 2, FORMAT_VERSION):
            raise ValueError(f"state_dict has format_version {version!r}; this fastfair reads "
                             f"versions 1 to {FORMAT_VERSION}")
        # Version 1 named the rule by its class.
        rule = type(self).__name__ if version == 1 else self.name
        if state_dict.get("rule") != rule:
            raise ValueError(f"state_dict is for rule {state_dict.get('rule')!r}, not {rule!r}")
        if state_dict.get("num_clients") != self.num_clients:
            raise ValueError(f"state_dict has num_clients {state_dict.get('num_clients')!r}; "
                             f"this aggregator has {self.num_clients}")
        config = state_dict.get("config", {})
        if isinstance(config, dict):
            config = {**self.options_before, **config}
        mine = self._config()
        # An option added after the state_dict was written is absent from it: fine at its default.
        defaults = {p.name: p.default
                    for p in inspect.signature(type(self).__init__).parameters.values()}
        for key in sorted(set(config) | set(mine)):
            if key not in config and key in defaults and _same(mine[key], defaults[key]):
                continue
            if key not in config or key not in mine or not _same(config[key], mine[key]):
                raise ValueError(f"state_dict config[{key!r}] = {config.get(key)!r} differs from "
                                 f"this aggregator's {mine.get(key)!r}; construct it with the "
                                 "same hyperparameters")

    def _checked_state(self: _Rule, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        """The values of ``state_dict["state"]``, each checked as ``load_state_dict`` describes
        (the header, the keys, the round counter, the static counts, each key's
        :class:`~fastfair.aggregators._checks.StateSpec`, then ``_check_state``), ready to
        install; changes nothing."""
        self._check_header(state_dict)
        given = state_dict.get("state")
        if not isinstance(given, dict):
            raise TypeError("state_dict['state'] must be a dict returned by state_dict()")
        if state_dict["format_version"] < FORMAT_VERSION:
            given = self._upgrade_state(given)
        specs = dict(self._state_specs())
        if self._num_samples is not None:
            specs["num_samples"] = self._counts_spec()
        expected = {"round", *specs}
        if set(given) != expected:
            raise ValueError(f"state_dict state has keys {sorted(given)}; expected "
                             f"{sorted(expected)}")
        new = {key: spec.check(given[key], f"state[{key!r}]") for key, spec in specs.items()}
        new["round"] = check_count(given["round"], "state['round']")
        self._check_state(new)
        return new

    def _upgrade_state(self, given: Dict[str, Any]) -> Dict[str, Any]:
        """A version 1 or 2 ``state`` in this version's keys (a new dict; ``given`` unchanged).
        Rules with per-client vectors convert their dense ``[K]`` arrays
        (:func:`fastfair.aggregators._client_vector.upgrade`); the others' keys are the same."""
        return given


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b
