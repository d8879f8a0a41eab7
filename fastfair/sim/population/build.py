"""What a configuration builds of a device population (:mod:`fastfair.sim.population.devices`,
:mod:`fastfair.sim.population.selection`).

A configuration names a population (``population``: ``"devices"``, the documented tiers, or the
path of a CSV), its options (``population_options``), a selection policy (``policy``,
``over_select``, ``deadline``). The runner then samples its rounds through a
:class:`~fastfair.sim.population.selection.PopulationAvailability`, records the clock and the
tiers' participation in every round, checkpoints the clock, and, when the data set has no groups
of its own, takes the tiers as the clients' groups (per-group accuracy, ``--fair-over groups``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from fastfair._options import check_options, dataclass_options
from fastfair.sim.population.devices import (
    DEFAULT_TIERS,
    MAX_MODEL_BYTES,
    MAX_SECONDS,
    PROCESSES,
    Population,
    Tier,
    read_population_csv,
)
from fastfair.sim.population.selection import Policy, PopulationAvailability

__all__ = ["PopulationOptions", "build_population", "check_population", "time_to_accuracy",
           "with_population", "with_tiers"]

_PER_TIER = ("shares", "speeds", "downs", "ups", "dropouts")


@dataclasses.dataclass(frozen=True)
class PopulationOptions:
    """The options of a population (``population_options``): those of
    :class:`~fastfair.sim.population.devices.Population` (``spread``, ``process``,
    ``online_prob``, ``online_probs``, ``time_zones``, ``mean_on``, ``mean_off``); per-tier
    lists replacing the tiers' ``shares``, ``speeds``, ``downs``, ``ups``, ``dropouts`` (one
    number per tier); ``window`` ``[start, end]`` local hours of every tier's diurnal window;
    ``model_bytes`` sent each way (None: the model's parameters x 4); ``idle`` seconds a round
    with nobody online lasts; ``track_participation``: count every client's kept rounds;
    ``tier_by_group``: a client's tier is its data set's group (one tier per group)."""

    spread: float = 0.3
    process: str = "always"
    online_prob: float = 0.5
    online_probs: Optional[List[float]] = None
    time_zones: int = 24
    mean_on: float = 3600.0
    mean_off: float = 7200.0
    shares: Optional[List[float]] = None
    speeds: Optional[List[float]] = None
    downs: Optional[List[float]] = None
    ups: Optional[List[float]] = None
    dropouts: Optional[List[float]] = None
    window: Optional[List[float]] = None
    model_bytes: Optional[float] = None
    idle: float = 60.0
    track_participation: bool = False
    tier_by_group: bool = False


_SPEC = dataclass_options(PopulationOptions)


def check_population(source: Optional[str], options: Dict[str, Any]) -> None:
    """Raises unless ``source`` (``"devices"`` or an existing CSV file) and ``options`` make a
    population; None: no population, and then no options."""
    if source is None:
        if options:
            raise ValueError("population_options (--population-option) need a population "
                             "(--population devices, or --population FILE.csv)")
        return
    if source != "devices" and not os.path.isfile(source):
        raise ValueError(f"population (--population) must be 'devices' or a CSV file; got "
                         f"{source!r}, which is not a file")
    check_options("population", options, _SPEC)
    if "process" in options and options["process"] not in PROCESSES:
        raise ValueError(f"population option process must be one of {', '.join(PROCESSES)}; "
                         f"got {options['process']!r}")
    given = PopulationOptions(**options)
    for name, value, hi in (("model_bytes", given.model_bytes, MAX_MODEL_BYTES),
                            ("idle", given.idle, MAX_SECONDS)):
        if value is not None and not (math.isfinite(value) and 0 < value <= hi):
            raise ValueError(f"population option {name} must be in (0, {hi:g}]; got {value} "
                             "(leave model_bytes out for the model's parameters x 4)")


def build_population(source: str, num_clients: int, seed: int,
                     options: Dict[str, Any]) -> Population:
    """The population of ``source`` (``"devices"``: :data:`DEFAULT_TIERS`; else a CSV,
    :func:`~fastfair.sim.population.devices.read_population_csv`) with ``options``' overrides
    of the tiers and the availability process."""
    check_population(source, options)
    tiers, table = (list(DEFAULT_TIERS), None) if source == "devices" else \
        read_population_csv(source, num_clients)
    given = PopulationOptions(**options)
    for name, field in zip(_PER_TIER, ("share", "speed", "down", "up", "dropout")):
        values = getattr(given, name)
        if values is None:
            continue
        if not isinstance(values, list) or len(values) != len(tiers) \
                or not all(_is_number(v) for v in values):
            raise ValueError(f"population option {name} must list one number per tier "
                             f"({len(tiers)}: {', '.join(t.name for t in tiers)}); got {values!r}")
        tiers = [_replaced(t, field, float(v)) for t, v in zip(tiers, values)]
    window = given.window
    if window is not None:
        if not isinstance(window, list) or len(window) != 2 \
                or not all(_is_number(v) for v in window):
            raise ValueError(f"population option window must be [start, end] local hours; got "
                             f"{window!r}")
        tiers = [_replaced(_replaced(t, "window_start", float(window[0])), "window_end",
                           float(window[1])) for t in tiers]
    return Population(num_clients, seed, tiers, spread=given.spread, process=given.process,
                      online_prob=given.online_prob, time_zones=given.time_zones,
                      mean_on=given.mean_on, mean_off=given.mean_off,
                      online_probs=given.online_probs, table=table)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) \
        and not isinstance(value, (bool, np.bool_))


def _replaced(tier: Tier, field: str, value: float) -> Tier:
    changes: Dict[str, Any] = {field: value}
    return dataclasses.replace(tier, **changes)


def with_population(config: Any, dataset: Any, num_params: int,
                    inviter: Callable[[int], Any]) -> Tuple[PopulationAvailability, Any]:
    """A run's selection under its configuration's population (a
    :class:`~fastfair.sim.population.selection.PopulationAvailability` for ``dataset``'s
    training-sample counts and a model of ``num_params`` parameters), and its data set with
    the tiers as groups where the data set has none of its own (:func:`with_tiers`). With an
    availability model other than ``uniform``, ``inviter(n)`` (that model drawing n clients a
    round) invites the ``n = ceil(m (1 + f))``; the population then takes out those offline.
    The population, its options and its policy are each built once, here."""
    options = PopulationOptions(**config.population_options)
    policy = Policy(config.policy, config.over_select, config.deadline)
    invited = min(policy.invited(config.per_round), config.clients)
    invite = None if config.availability == "uniform" else inviter(invited)
    population = build_population(config.population, config.clients, config.seed,
                                  config.population_options)
    fixed = 0.0 if config.local_steps is None else float(config.local_steps * config.batch_size)
    selection = PopulationAvailability(
        population, policy, config.per_round, dataset.num_samples,
        work_per_sample=float(config.epochs), work_fixed=fixed,
        model_bytes=float(4.0 * max(num_params, 1) if options.model_bytes is None
                          else options.model_bytes),
        invite=invite, idle=float(options.idle), track_participation=options.track_participation)
    if options.tier_by_group:
        population.tier_by(dataset.groups, _group_shares(dataset))
    elif dataset.num_groups is None:
        dataset = with_tiers(dataset, population)
    return selection, dataset


def _group_shares(dataset: Any, most: int = 10**7) -> np.ndarray:
    """``[G]`` each group's share of the clients (read for every client, so K <= ``most``)."""
    if dataset.num_groups is None:
        raise ValueError("population option tier_by_group needs a data set with groups "
                         "(--groups-file, --group-by-class, the grouped workload)")
    groups = dataset.group_ids
    if groups is None:
        if dataset.num_clients > most:
            raise ValueError(f"population option tier_by_group reads every client's group: at "
                             f"most {most} clients; got {dataset.num_clients}")
        groups = dataset.groups(np.arange(dataset.num_clients))
    return np.bincount(groups, minlength=dataset.num_groups) / dataset.num_clients


def with_tiers(dataset: Any, population: Population) -> Any:
    """``dataset`` whose groups are the population's tiers, answered per id (nothing K-long is
    built): a :class:`~fastfair.sim.data.regrouped.Regrouped` view of it."""
    from fastfair.sim.data.regrouped import Regrouped

    return Regrouped(dataset, population.num_tiers, population.tier)


def time_to_accuracy(history: List[Dict[str, Any]], target: float,
                     key: str = "acc_mean") -> float:
    """The virtual time (seconds) of the first evaluated round whose ``key`` reaches
    ``target``; ``inf`` when none does."""
    for record in history:
        if key in record and record[key] >= target and "virtual_time" in record:
            return float(record["virtual_time"])
    return float(np.inf)
