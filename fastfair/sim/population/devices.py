"""A device population: every client's tier, compute speed, bandwidths, availability over
virtual time and dropout probability, as pure functions of (seed, client id, time), with nothing
stored per client.

A client belongs to one tier (low, mid, high by default, in given shares). Within its tier its
speed (samples per second) and its download and upload bandwidths (bytes per second) are
log-normal around the tier's medians, ``median * exp(spread * z)`` with ``z`` a keyed standard
normal; its dropout probability per round is the tier's. Its availability is one process of:

- ``always``: online at every moment;
- ``bernoulli``: online in a round with probability ``online_prob``, one keyed coin per
  (client, round);
- ``diurnal``: online while its local hour of day lies in the window ``[start, end)`` hours
  (wrapping past midnight; the duty cycle is the window's length over 24 h); its local time is
  virtual time plus its time zone, one of ``time_zones`` equal steps around the day, keyed;
- ``sessions``: time falls into windows of ``mean_on + mean_off`` seconds; in each window the
  client starts one session at a keyed uniform moment, of keyed exponential length with mean
  ``mean_on``, cut at the window's length (so a session reaches at most into the next window).

A user's CSV replaces the documented tiers (one row per ``tier``: ``share``, ``speed``,
``down``, ``up``, ``dropout`` and optionally ``window_start``, ``window_end`` hours) or lists
every client (one row per ``id`` in ``[0, K)``: the same columns less ``share``, with an
optional ``tier`` label); a listed client's numbers are its own, without spread.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fastfair._files import read_regular_file
from fastfair.sim.seeding import Stream, keys, uniform

DAY = 86400.0
#: The bounds of a device's rates (speed in samples per second, bandwidths in bytes per
#: second): outside them a round's virtual time overflows or rounds to nothing.
RATE_RANGE = (1e-6, 1e15)
#: The largest log-normal ``spread``: ``exp(spread * z)`` stays finite for every keyed z.
MAX_SPREAD = 10.0
#: The longest ``mean_on`` / ``mean_off`` (seconds, about 30 years): a session window stays a
#: finite number of seconds the clock can add.
MAX_SECONDS = 1e9
#: The most bytes a model may send each way (a petabyte): more overflows the virtual clock.
MAX_MODEL_BYTES = 1e15
#: The availability processes of a population over virtual time.
PROCESSES = ("always", "bernoulli", "diurnal", "sessions")


@dataclass(frozen=True)
class Tier:
    """One class of devices: its ``share`` of the clients, median ``speed`` (samples per
    second), median ``down`` and ``up`` bandwidths (bytes per second), ``dropout`` probability
    per round and its diurnal window ``[window_start, window_end)`` in local hours."""

    name: str
    share: float
    speed: float
    down: float
    up: float
    dropout: float
    window_start: float = 22.0
    window_end: float = 6.0

    def check(self, where: str) -> None:
        """Raises ValueError naming ``where`` and the field that is out of range."""
        lo, hi = RATE_RANGE
        for field, value, ok, what in (
                ("share", self.share, self.share >= 0, ">= 0"),
                ("speed", self.speed, lo <= self.speed <= hi, f"in [{lo:g}, {hi:g}]"),
                ("down", self.down, lo <= self.down <= hi, f"in [{lo:g}, {hi:g}]"),
                ("up", self.up, lo <= self.up <= hi, f"in [{lo:g}, {hi:g}]"),
                ("dropout", self.dropout, 0 <= self.dropout < 1, "in [0, 1)"),
                ("window_start", self.window_start, 0 <= self.window_start < 24, "in [0, 24)"),
                ("window_end", self.window_end, 0 <= self.window_end <= 24, "in [0, 24]")):
            if not (math.isfinite(value) and ok):
                raise ValueError(f"{where}: tier {self.name!r} {field} must be {what}; got {value}")
        if self.window_start == self.window_end:
            raise ValueError(f"{where}: tier {self.name!r} has the empty diurnal window "
                             f"[{self.window_start:g}, {self.window_end:g}): its clients would "
                             "never be online; give [0, 24] for the whole day")

    @property
    def duty(self) -> float:
        """The fraction of the day the diurnal window covers."""
        return ((self.window_end - self.window_start) % 24.0 or 24.0) / 24.0


#: The documented default tiers: phones of three classes (speeds in samples per second of a
#: small model's training, bandwidths in bytes per second: about 10, 40 and 200 Mbit/s down).
DEFAULT_TIERS = (
    Tier("low", 0.3, speed=25.0, down=1.25e6, up=0.3e6, dropout=0.10),
    Tier("mid", 0.5, speed=75.0, down=5.0e6, up=1.25e6, dropout=0.05),
    Tier("high", 0.2, speed=250.0, down=2.5e7, up=6.0e6, dropout=0.02))


#: The largest |z| :func:`_normal` can draw: its uniforms lie in [2**-54, 1 - 2**-54].
Z_MAX = math.sqrt(-2.0 * math.log(0.5 / 2.0 ** 53))


def _normal(seed: int, a: Stream, b: Stream, ids: np.ndarray) -> np.ndarray:
    """Keyed standard normals of ``ids [n]`` (Box-Muller of two keyed uniforms)."""
    u1, u2 = uniform(keys(seed, a, ids)), uniform(keys(seed, b, ids))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


class Population:
    """The devices of ``num_clients`` clients under ``seed``: every method maps ``ids [n]`` (int64
    in ``[0, K)``) to ``[n]`` values in O(n), drawing through keyed hashes only.

    Parameters
    ----------
    num_clients, seed
        K and the run's seed.
    tiers
        The tiers; shares are normalised to sum to one (ignored with a per-client ``table``).
    spread
        The log-normal sigma of speed and bandwidths around their tier's medians.
    process
        The availability process, one of :data:`PROCESSES` (module docstring).
    online_prob, online_probs
        ``bernoulli``: the probability a client is online in a round; ``online_probs`` gives
        each tier its own (restricted, skewed availability).
    time_zones
        ``diurnal``: the number of equally spaced time zones the clients fall into.
    mean_on, mean_off
        ``sessions``: mean session length and mean gap, in seconds.
    table
        Per-client columns ``[K]`` (``tier``, ``speed``, ``down``, ``up``, ``dropout``,
        ``window_start``, ``window_end``) of a CSV listing every client; None otherwise.
    """

    def __init__(self, num_clients: int, seed: int, tiers: Sequence[Tier] = DEFAULT_TIERS,
                 spread: float = 0.3, process: str = "always", online_prob: float = 0.5,
                 time_zones: int = 24, mean_on: float = 3600.0, mean_off: float = 7200.0,
                 online_probs: Optional[Sequence[float]] = None,
                 table: Optional[Dict[str, np.ndarray]] = None) -> None:
        for name, value, lo, hi in (("num_clients", num_clients, 1, 2 ** 63 - 1),
                                    ("seed", seed, 0, 2 ** 63 - 1)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                    or not lo <= value <= hi:
                raise ValueError(f"population: {name} must be an integer in [{lo}, 2**63 - 1]; "
                                 f"got {value!r}")
        if not tiers:
            raise ValueError("population: tiers must hold at least one tier")
        for tier in tiers:
            tier.check("population")
        total = sum(t.share for t in tiers)
        if table is None and not total > 0:
            raise ValueError("population: the tiers' shares must not all be 0")
        if process not in PROCESSES:
            raise ValueError(f"population process must be one of {', '.join(PROCESSES)}; got "
                             f"{process!r}")
        given = {"spread": spread, "online_prob": online_prob, "time_zones": time_zones,
                 "mean_on": mean_on, "mean_off": mean_off}
        for name, ok, what in (("spread", 0 <= spread <= MAX_SPREAD, f"in [0, {MAX_SPREAD:g}]"),
                               ("online_prob", 0 < online_prob <= 1, "in (0, 1]"),
                               ("time_zones", 1 <= time_zones <= DAY, f"in [1, {DAY:g}]"),
                               ("mean_on", 0 < mean_on <= MAX_SECONDS, f"in (0, {MAX_SECONDS:g}]"),
                               ("mean_off", 0 <= mean_off <= MAX_SECONDS,
                                f"in [0, {MAX_SECONDS:g}]")):
            if not (ok and math.isfinite(given[name])):
                raise ValueError(f"population option {name} must be {what}; got {given[name]}")
        if table is not None and any(len(v) != num_clients for v in table.values()):
            raise ValueError(f"a population table must list every one of the {num_clients} "
                             "clients")
        self.num_clients, self.seed = int(num_clients), int(seed)
        self.tiers = tuple(replace(t, share=t.share / total) if total > 0 else t for t in tiers)
        self.spread, self.process, self.online_prob = float(spread), process, float(online_prob)
        self.time_zones, self.mean_on, self.mean_off = int(time_zones), float(mean_on), \
            float(mean_off)
        self.table = table
        probs = [online_prob] * len(tiers) if online_probs is None else list(online_probs)
        if len(probs) != len(tiers) or not all(
                isinstance(p, (int, float, np.integer, np.floating))
                and not isinstance(p, (bool, np.bool_)) and 0 < p <= 1 for p in probs):
            raise ValueError(f"population option online_probs must give each of the "
                             f"{len(tiers)} tiers a probability in (0, 1]; got {online_probs}")
        self._online_probs = np.array(probs, dtype=np.float64)
        self._tier_of: Optional[Callable[[np.ndarray], np.ndarray]] = None
        self._group_shares: Optional[np.ndarray] = None
        self._cum = np.cumsum([t.share for t in self.tiers])
        self._cum[-1] = 1.0
        self._column = {f: np.array([getattr(t, f) for t in self.tiers], dtype=np.float64)
                        for f in ("speed", "down", "up", "dropout", "window_start", "window_end")}

    def tier_by(self, groups: Callable[[np.ndarray], np.ndarray], shares: np.ndarray) -> None:
        """Makes the tier of a client its group ``groups(ids)`` (a data set's groups, one per
        tier), the tiers' ``shares [T]`` those of the groups: device class tied to data, as
        when a region's users share both."""
        shares = np.asarray(shares, dtype=np.float64)
        if shares.shape != (self.num_tiers,):
            raise ValueError(f"tier_by: the data set has {shares.size} groups; the population "
                             f"has {self.num_tiers} tiers: give one tier per group")
        self._tier_of, self._group_shares = groups, shares

    @property
    def num_tiers(self) -> int:
        return len(self.tiers)

    def shares(self) -> np.ndarray:
        """``[T]`` each tier's share of the K clients (counted exactly with a table)."""
        if self._group_shares is not None:
            return self._group_shares
        if self.table is not None:
            return np.bincount(self.table["tier"], minlength=self.num_tiers) / self.num_clients
        return np.array([t.share for t in self.tiers])

    def tier(self, ids: np.ndarray) -> np.ndarray:
        """``[n]`` int64 tier of each client: the first tier whose cumulative share exceeds a
        keyed uniform (or the table's)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._tier_of is not None:
            return np.asarray(self._tier_of(ids), dtype=np.int64)
        if self.table is not None:
            return self.table["tier"][ids]
        u = uniform(keys(self.seed, Stream.POPULATION_TIER, ids))
        return np.minimum(np.searchsorted(self._cum, u, side="right"),
                          self.num_tiers - 1).astype(np.int64)

    def _spread(self, field: str, ids: np.ndarray, tier: np.ndarray, a: Stream,
                b: Stream) -> np.ndarray:
        if self.table is not None:
            return self.table[field][ids]
        median = self._column[field][tier]
        if self.spread == 0:
            return median
        return median * np.exp(self.spread * _normal(self.seed, a, b, ids))

    def speed(self, ids: np.ndarray, tier: np.ndarray) -> np.ndarray:
        """``[n]`` samples per second: ``median_tier * exp(spread * z)``."""
        return self._spread("speed", ids, tier, Stream.POPULATION_SPEED_A,
                            Stream.POPULATION_SPEED_B)

    def down(self, ids: np.ndarray, tier: np.ndarray) -> np.ndarray:
        """``[n]`` download bytes per second (log-normal as :meth:`speed`)."""
        return self._spread("down", ids, tier, Stream.POPULATION_DOWN_A,
                            Stream.POPULATION_DOWN_B)

    def up(self, ids: np.ndarray, tier: np.ndarray) -> np.ndarray:
        """``[n]`` upload bytes per second (log-normal as :meth:`speed`)."""
        return self._spread("up", ids, tier, Stream.POPULATION_UP_A, Stream.POPULATION_UP_B)

    def quickest(self, model_bytes: float, work: float) -> float:
        """A lower bound of any client's round time, in seconds: ``model_bytes`` down and up
        and ``work`` sample passes at the fastest rates any client can draw (a tier's medians
        times ``exp(spread * Z_MAX)``, :data:`Z_MAX` the largest keyed normal; a table's own
        numbers)."""
        if self.table is not None:
            speed, down, up = (self.table[c] for c in ("speed", "down", "up"))
        else:
            boost = math.exp(self.spread * Z_MAX)
            speed, down, up = (self._column[c] * boost for c in ("speed", "down", "up"))
        return float(np.min(model_bytes / down + work / speed + model_bytes / up))

    def dropout(self, ids: np.ndarray, tier: np.ndarray) -> np.ndarray:
        """``[n]`` probability of dropping out of a round it was invited to."""
        if self.table is not None:
            return self.table["dropout"][np.asarray(ids, dtype=np.int64)]
        return self._column["dropout"][tier]

    def dropouts(self, ids: np.ndarray, tier: np.ndarray, round: int
                 ) -> Tuple[np.ndarray, np.ndarray]:
        """``(dropped [n] bool, at [n])`` in round ``round``: a keyed coin against
        :meth:`dropout`, and the fraction of its round time at which a dropped client leaves
        (a keyed uniform)."""
        ids = np.asarray(ids, dtype=np.int64)
        coin = uniform(keys(self.seed, Stream.POPULATION_DROPOUT, ids, round))
        at = uniform(keys(self.seed, Stream.POPULATION_DROP_AT, ids, round))
        return coin < self.dropout(ids, tier), at

    def online_fraction(self) -> float:
        """The expected share of clients online at a moment (used only to size candidate
        batches; the exact share of ``sessions`` is slightly below it)."""
        if self.process == "always":
            return 1.0
        if self.process == "bernoulli":
            return float(np.dot(self.shares(), self._online_probs))
        if self.process == "diurnal":
            if self.table is not None:
                start, end = self.table["window_start"], self.table["window_end"]
                return float(np.mean(((end - start) % 24.0) / 24.0)) or 1.0
            return float(sum(t.share * t.duty for t in self.tiers))
        window = self.mean_on + self.mean_off
        return self.mean_on * (1.0 - math.exp(-window / self.mean_on)) / window

    def online(self, ids: np.ndarray, time: float, round: int) -> np.ndarray:
        """``[n]`` bool: whether each client is online at virtual ``time`` (seconds) in round
        ``round`` (only ``bernoulli`` reads the round)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.process == "always":
            return np.ones(ids.shape, dtype=bool)
        if self.process == "bernoulli":
            return uniform(keys(self.seed, Stream.POPULATION_ONLINE, ids, round)) \
                < self._online_probs[self.tier(ids)]
        if self.process == "diurnal":
            zone = np.floor(uniform(keys(self.seed, Stream.POPULATION_PHASE, ids))
                            * self.time_zones)
            hour = ((time + zone * DAY / self.time_zones) % DAY) / 3600.0
            if self.table is not None:
                start, end = self.table["window_start"][ids], self.table["window_end"][ids]
            else:
                tier = self.tier(ids)
                start = self._column["window_start"][tier]
                end = self._column["window_end"][tier]
            return np.where(start <= end, (hour >= start) & (hour < end),
                            (hour >= start) | (hour < end))
        return self._in_session(ids, time)

    def _in_session(self, ids: np.ndarray, time: float) -> np.ndarray:
        """``sessions``: online when the session of the window holding ``time`` or of the one
        before covers it."""
        width = self.mean_on + self.mean_off
        w = int(time // width)
        out = np.zeros(ids.shape, dtype=bool)
        for window in (w, w - 1):  # window -1 holds the sessions running at time 0
            key = window % (1 << 64)  # a window's number (-1 too) as a uint64 key
            start = window * width + width * uniform(
                keys(self.seed, Stream.POPULATION_SESSION_START, ids, key))
            length = np.minimum(-self.mean_on * np.log(uniform(
                keys(self.seed, Stream.POPULATION_SESSION_LENGTH, ids, key))), width)
            out |= (time >= start) & (time < start + length)
        return out


_NUMBERS = ("speed", "down", "up", "dropout")


def read_population_csv(path: str, num_clients: int) -> Tuple[List[Tier],
                                                              Optional[Dict[str, np.ndarray]]]:
    """The tiers (and, for a file listing every client, the per-client table) of a population
    CSV with a header row.

    A file of tiers has the columns ``tier, share, speed, down, up, dropout`` and optionally
    ``window_start, window_end`` (local hours). A file of clients has ``id`` (every id of
    ``[0, K)`` once), ``speed, down, up, dropout``, optionally ``tier`` (a label; tiers then
    number the labels in sorted order) and ``window_start, window_end``.

    Raises
    ------
    ValueError
        Naming the file, the row and the column that is missing or out of range.
    """
    try:
        text = read_regular_file(path, "population file").decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"population file {path} is not UTF-8 text (byte {exc.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [name.strip() for name in reader.fieldnames or []]
    repeated = sorted(name for name, n in Counter(header).items() if n > 1)
    if repeated:
        raise ValueError(f"population file {path}: column(s) {', '.join(repeated)} appear more "
                         "than once in the header; keep one of each")
    reader.fieldnames = header
    rows = list(reader)
    if not rows:
        raise ValueError(f"population file {path}: no rows below the header")
    columns = set(header)
    by_id = "id" in columns
    needed = set(_NUMBERS) | ({"id"} if by_id else {"tier", "share"})
    missing = sorted(needed - columns)
    if missing:
        raise ValueError(f"population file {path}: missing column(s) {', '.join(missing)} (a "
                         "file of tiers needs tier, share, speed, down, up, dropout; a file of "
                         "clients needs id, speed, down, up, dropout)")

    def number(row: Dict[str, str], line: int, column: str, default: float) -> float:
        text = (row.get(column) or "").strip()
        if not text:
            return default
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"population file {path} row {line}: {column} must be a number; "
                             f"got {text!r}") from None

    def row_tier(name: str, share: float, row: Dict[str, str], line: int) -> Tier:
        speed, down, up, dropout = (number(row, line, c, float("nan")) for c in _NUMBERS)
        return Tier(name, share, speed, down, up, dropout,
                    window_start=number(row, line, "window_start", 22.0),
                    window_end=number(row, line, "window_end", 6.0))

    if not by_id:
        tiers = []
        for line, row in enumerate(rows, 2):
            tier = row_tier(row["tier"].strip(), number(row, line, "share", float("nan")),
                            row, line)
            tier.check(f"population file {path} row {line}")
            tiers.append(tier)
        return tiers, None
    if len(rows) != num_clients:
        raise ValueError(f"population file {path}: lists {len(rows)} clients; the run has "
                         f"{num_clients} (one row per id in [0, {num_clients}))")
    labels = sorted({(r.get("tier") or "all").strip() for r in rows})
    label_index = {label: g for g, label in enumerate(labels)}
    table = {c: np.full(num_clients, np.nan) for c in (*_NUMBERS, "window_start", "window_end")}
    table_tier = np.full(num_clients, -1, dtype=np.int64)
    for line, row in enumerate(rows, 2):
        try:
            k = int(row["id"])
        except ValueError:
            raise ValueError(f"population file {path} row {line}: id must be an integer; got "
                             f"{row['id']!r}") from None
        if not 0 <= k < num_clients or table_tier[k] >= 0:
            raise ValueError(f"population file {path} row {line}: id {k} is out of [0, "
                             f"{num_clients}) or listed twice")
        table_tier[k] = label_index[(row.get("tier") or "all").strip()]
        values = row_tier(str(k), 1.0, row, line)
        values.check(f"population file {path} row {line}")
        for c in table:
            table[c][k] = getattr(values, c)
    out: Dict[str, np.ndarray] = {"tier": table_tier, **table}
    order = np.argsort(table_tier, kind="stable")   # O(K log K): each tier's rows in one run
    bounds = np.searchsorted(table_tier[order], np.arange(len(labels) + 1))
    tiers = [Tier(label, 1.0 / len(labels),
                  *(float(np.median(table[c][order[bounds[g]:bounds[g + 1]]])) for c in _NUMBERS))
             for g, label in enumerate(labels)]
    return tiers, out
