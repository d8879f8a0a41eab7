r"""The client learning rate of each round: a schedule over rounds, given as ``KIND:KEY=VALUE,...``.

With :math:`\eta` the configuration's ``lr`` and rounds :math:`t = 1, 2, \dots`:

- no schedule, per-round factor ``lr_decay`` = d: :math:`\eta_t = \eta\, d^{\,t-1}`;
- ``step:gamma=G,every=N``: :math:`\eta_t = \eta\, G^{\lfloor (t-1)/N \rfloor}` (the AAggFF
  authors' decay, x0.999 every 2 rounds, is ``step:gamma=0.999,every=2``; ``every=1`` is the
  per-round factor);
- ``cosine:min=M[,rounds=T]``: :math:`\eta_t = M + \frac{\eta - M}{2}\left(1 +
  \cos\frac{\pi (t-1)}{T}\right)` for :math:`t \le T`, and M after (PyTorch's
  ``CosineAnnealingLR`` with ``T_max = T``, stepped once a round); T defaults to the run's
  ``rounds``.

:math:`\eta_t` is a function of the configuration and t alone, so a run resumed from a
checkpoint (which keeps its configuration) trains at the rates of the run uninterrupted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from fastfair._options import check_name

#: Each schedule's options: ``{name: (type, default)}`` (None: required).
SCHEDULES: Dict[str, Dict[str, Tuple[type, Optional[float]]]] = {
    "step": {"gamma": (float, None), "every": (int, 1)},
    "cosine": {"min": (float, 0.0), "rounds": (int, None)},
}


@dataclass(frozen=True)
class LRSchedule:
    """A parsed schedule: its ``kind`` (a key of :data:`SCHEDULES`) and its ``options``."""

    kind: str
    options: Dict[str, Any] = field(default_factory=dict)


def parse_lr_schedule(text: str, lr: float, rounds: int) -> LRSchedule:
    """The schedule ``text`` (``"step:gamma=0.999,every=2"``, ``"cosine:min=0.001"``), its
    options typed, checked and completed with their defaults (``cosine``'s ``rounds`` is
    ``rounds``).

    Parameters
    ----------
    text
        ``KIND`` or ``KIND:KEY=VALUE,KEY=VALUE``.
    lr
        The learning rate :math:`\\eta` of round 1 (``cosine``'s ``min`` may not exceed it).
    rounds
        The run's rounds (``cosine``'s default T).

    Returns
    -------
    LRSchedule

    Raises
    ------
    ValueError
        An unknown kind or option (with the valid ones), a malformed pair, an option given twice,
        a missing option, a value of the wrong type or out of range; each names
        ``lr_schedule (--lr-schedule)``.
    """
    where = "lr_schedule (--lr-schedule)"
    kind, _, rest = str(text).partition(":")
    try:
        check_name("learning-rate schedule", kind, list(SCHEDULES))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc} (e.g. step:gamma=0.999,every=2)") from None
    spec = SCHEDULES[kind]
    given: Dict[str, Any] = {}
    for pair in filter(None, rest.split(",")):
        key, eq, value = pair.partition("=")
        if not eq or key not in spec:
            takes = ", ".join(f"{k}=..." for k in spec)
            raise ValueError(f"{where}: {kind} takes {takes}; got {pair!r}")
        if key in given:
            raise ValueError(f"{where}: {kind}'s {key} is given twice ({text!r}); give it once")
        kind_of = spec[key][0]
        try:
            given[key] = kind_of(value)
        except ValueError:
            what = "an integer" if kind_of is int else "a number"
            raise ValueError(f"{where}: {kind}'s {key} must be {what}; got {value!r}") from None
    defaults = {"rounds": rounds} if kind == "cosine" else {}
    options: Dict[str, Any] = {k: given.get(k, defaults.get(k, default))
                               for k, (_, default) in spec.items()}
    missing = [k for k, v in options.items() if v is None]
    if missing:
        raise ValueError(f"{where}: {kind} needs {', '.join(f'{k}=...' for k in missing)}")
    for key, ok, what in (("gamma", 0 < options.get("gamma", 1) <= 1, "in (0, 1]"),
                          ("every", options.get("every", 1) >= 1, ">= 1"),
                          ("min", 0 <= options.get("min", 0) <= lr, f"in [0, lr = {lr:g}]"),
                          ("rounds", options.get("rounds", 1) >= 1, ">= 1")):
        if key in options and not (math.isfinite(options[key]) and ok):
            raise ValueError(f"{where}: {kind}'s {key} must be {what}; got {options[key]}")
    return LRSchedule(kind, options)


def round_lr(lr: float, t: int, lr_decay: float = 1.0,
             schedule: Optional[LRSchedule] = None) -> float:
    r"""The client learning rate :math:`\eta_t` of round ``t`` (1-based) by the formulas of this
    module: ``schedule`` when given, else the per-round factor ``lr_decay``.

    Parameters
    ----------
    lr
        :math:`\eta`, the rate of round 1.
    t
        The round, >= 1.
    lr_decay
        d of :math:`\eta d^{t-1}` (1: constant); unused with a schedule.
    schedule
        A :func:`parse_lr_schedule` result, or None.

    Returns
    -------
    float
    """
    if schedule is None:
        return lr * lr_decay ** (t - 1)
    o = schedule.options
    if schedule.kind == "step":
        return lr * o["gamma"] ** ((t - 1) // o["every"])
    if t - 1 >= o["rounds"]:
        return float(o["min"])
    return o["min"] + 0.5 * (lr - o["min"]) * (1.0 + math.cos(math.pi * (t - 1) / o["rounds"]))
