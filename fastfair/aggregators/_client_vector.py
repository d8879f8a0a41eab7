r"""Per-client state whose memory and cost scale with the clients a run touches, not with K.

A rule's per-client vector :math:`v \in \mathbb R^K` (AAggFF-D's ``D``, AFL's λ, FedMABA's
:math:`\log p`) starts at one value ``fill`` for every client, and a round reads and writes only
its m sampled entries. :class:`ClientVector` stores the n entries written so far as sorted runs
of ids and values, each id in exactly one run (16 bytes per touched client): a round's ids
already stored are updated in place in the run that holds them, its new ids form one new sorted
run, and the newest runs merge while the run before them holds at most ``RUN_RATIO`` (4) times
their entries. So every run holds more than 4 times the next one (at most
:math:`\log_4 n + 1` runs), and each merge copies a run that was there before the round into
one at least 1.25 times its size: an entry is copied by at most :math:`\log_{1.25} n + 1`
merges over its life (the 1 for the merge that may take in the new run it arrived in).
A round costs O(m log^2 n) for the binary searches (O(m log n) per run) and O(m log n)
amortised for the merges, where one sorted array cost O(n) a round for its inserts. Every other
client holds ``fill``. Once it stores half of the K clients it moves to one dense ``[K]`` array
(8 bytes per client, O(m) per round): it never stores more than either form would (16 n bytes in
runs, n < K/2, plus the headers of at most :math:`\log_4 n + 1` runs; while a merge of s <= n
entries runs it holds up to 32 s bytes more, the merged copy and its sort order, where one
sorted array's insert held 16 n more), so a run with K = 10^10 clients of which 10^5 take part
keeps 1.6 MB, where a dense array would be 80 GB (and, allocated lazily
by the kernel, would fault in and zero a 2 MB huge page at each of the rounds' random writes).

The values are the dense ones bit for bit: a gather returns exactly what the dense array would
hold, so a rule computes the same float64 operations in the same order either way.

In a ``state_dict`` (format version 3) a vector ``name`` is three keys: ``name_ids`` (int64,
strictly increasing, in ``[0, K)``), ``name_values`` (float64, one per id) and ``name_fill``
(the value of every client not listed). Only entries whose bits differ from ``fill`` are listed,
so the snapshot is the same whichever form holds the vector; it is built on demand from the
runs in O(n). Version 1 and 2 snapshots held the dense ``name`` ``[K]``;
:func:`upgrade` reads them.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import StateSpec

#: The vector moves to dense storage once it stores this fraction of the K clients (then the
#: sparse arrays, 16 bytes a client, would take as much as the dense one, 8 bytes a client).
DENSE_FRACTION = 0.5

#: The newest runs merge while the run before them holds at most this many times their entries,
#: so each run holds more than this many times the next one.
RUN_RATIO = 4


_NO_IDS = np.empty(0, dtype=np.int64)
_NO_VALUES = np.empty(0, dtype=np.float64)


def _bits(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint64)


class _Run(NamedTuple):
    """Stored entries: ``ids`` ``[s]`` int64 strictly increasing, ``values`` ``[s]`` float64."""

    ids: np.ndarray
    values: np.ndarray


class _Store(NamedTuple):
    """One consistent state of a vector, replaced whole (one attribute assignment, atomic under
    the GIL), so that a round proposed in one thread never reads half of another thread's
    commit: at worst stale values, and that round is refused (the contract's Threads)."""

    fill: float
    runs: Tuple[_Run, ...]       # disjoint ids; each > RUN_RATIO x the next; () once dense
    dense: Optional[np.ndarray]  # [K] float64, or None while sparse


def _sparse(fill: float, runs: Tuple[_Run, ...]) -> _Store:
    return _Store(float(fill), runs, None)


def _count(runs: Tuple[_Run, ...]) -> int:
    return sum(int(run.ids.shape[0]) for run in runs)


def _find(run: _Run, ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(hit, pos)``: which of ``ids`` ``[m]`` the run holds, and where (``pos[hit]``)."""
    pos = np.searchsorted(run.ids, ids)
    hit = run.ids[np.minimum(pos, run.ids.shape[0] - 1)] == ids
    return hit, pos


def _merged(runs: Tuple[_Run, ...]) -> _Run:
    """One run holding the s entries of ``runs`` (disjoint ids): a stable sort (timsort) of
    their concatenation, which finds the sorted runs in it and merges them, O(s) for runs whose
    sizes fall geometrically; 32 s bytes beside the runs at most (the copy and its order)."""
    ids = np.concatenate([run.ids for run in runs])
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    return _Run(ids, np.concatenate([run.values for run in runs])[order])


def _appended(runs: Tuple[_Run, ...], new: _Run) -> Tuple[_Run, ...]:
    """``runs`` with the run ``new`` after them, the newest merged while the one before them
    holds at most ``RUN_RATIO`` times their entries (so each run keeps more than that many
    times the next)."""
    first, size = len(runs), int(new.ids.shape[0])
    while first and runs[first - 1].ids.shape[0] <= RUN_RATIO * size:
        first -= 1
        size += int(runs[first].ids.shape[0])
    if first == len(runs):
        return runs + (new,)
    return runs[:first] + (_merged(runs[first:] + (new,)),)


class ClientVector:
    r"""A float64 vector over K clients: ``fill`` everywhere except the entries written.

    Parameters
    ----------
    num_clients
        K (up to 2**63 - 1).
    fill
        The value of every client not yet written.

    Operations (m ids, n entries stored): :meth:`gather` O(m log^2 n) (a binary search in each
    of at most :math:`\log_4 n + 1` runs), :meth:`scatter` the same plus O(m log n) amortised
    for the merges while sparse, O(m) once dense; :meth:`dense` O(K). Reads are safe beside a
    concurrent write (they see the state before or after it, or stale values of it).
    """

    def __init__(self, num_clients: int, fill: float) -> None:
        self.num_clients = int(num_clients)
        self._store = _sparse(fill, ())

    @property
    def fill(self) -> float:
        """The value of every client not stored."""
        return self._store.fill

    @property
    def stored(self) -> int:
        """How many entries the vector holds in memory (K once dense)."""
        store = self._store
        return self.num_clients if store.dense is not None else _count(store.runs)

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """:math:`v_{ids}` ``[m]`` float64 (a new array) for int64 ids in ``[0, K)``."""
        store = self._store
        if store.dense is not None:
            return store.dense[ids]
        out = np.full(ids.shape[0], store.fill)
        for run in store.runs:
            hit, pos = _find(run, ids)
            out[hit] = run.values[pos[hit]]
        return out

    def scatter(self, ids: np.ndarray, values: np.ndarray, *,
                fill: Optional[float] = None) -> None:
        r""":math:`v_{ids} \leftarrow` ``values`` for distinct int64 ids ``[m]`` in ``[0, K)``;
        with ``fill``, every other entry becomes ``fill`` in the same write.

        All or nothing: everything that allocates (a grown or reset store) is built beside the
        current one and replaces it in one assignment, so a failure (e.g. ``MemoryError``)
        leaves the vector exactly as it was; only a write that grows nothing is in place.
        """
        store = self._store if fill is None else _sparse(fill, ())
        if store.dense is not None:
            store.dense[ids] = values
            return
        new = np.ones(ids.shape[0], dtype=bool)
        for run in store.runs:
            new &= ~_find(run, ids)[0]
        grown = store
        if new.any():
            new_ids, new_values = ids[new], values[new]
            order = np.argsort(new_ids, kind="stable")
            runs = _appended(store.runs, _Run(new_ids[order], new_values[order]))
            grown = _densified(_sparse(store.fill, runs), self.num_clients)
        # Everything that allocates is built; the values are written last, in place (into
        # runs kept from the current store, merged copies or the new dense array).
        if grown.dense is not None:
            grown.dense[ids] = values
        else:
            writes = [(run.values, pos[hit], values[hit])
                      for run in grown.runs for hit, pos in [_find(run, ids)]]
            for target, at, value in writes:
                target[at] = value
        self._store = grown

    def reset(self, fill: float) -> None:
        """Every entry becomes ``fill`` (O(1): the vector empties)."""
        self._store = _sparse(fill, ())

    def dense(self) -> np.ndarray:
        """The whole vector ``[K]`` float64 (a new array; O(K) memory and time)."""
        store = self._store
        return store.dense.copy() if store.dense is not None else _expanded(store, self.num_clients)

    # ------------------------------------------------------------------ state
    def state(self, name: str) -> Dict[str, Any]:
        """``{name_ids, name_values, name_fill}``: the entries whose bits differ from ``fill``
        (new arrays, ids increasing) and ``fill``; the same for either storage."""
        store = self._store
        fill_bits = _bits(np.array([store.fill]))[0]
        if store.dense is not None:
            ids = np.flatnonzero(_bits(store.dense) != fill_bits).astype(np.int64)
            values = store.dense[ids]
        else:
            run = _merged(store.runs) if store.runs else _Run(_NO_IDS, _NO_VALUES)
            keep = _bits(run.values) != fill_bits
            ids, values = run.ids[keep], run.values[keep]
        return {f"{name}_ids": ids, f"{name}_values": values, f"{name}_fill": store.fill}

    @staticmethod
    def specs(name: str, lo: Optional[float] = None) -> Dict[str, StateSpec]:
        """The :class:`StateSpec` of each of the vector's three state keys (values at least
        ``lo``); :func:`check_state` adds the checks across them."""
        return {f"{name}_ids": StateSpec((-1,), integer=True),
                f"{name}_values": StateSpec((-1,), lo=lo), f"{name}_fill": StateSpec(lo=lo)}

    @classmethod
    def from_state(cls, state: Dict[str, Any], name: str, num_clients: int) -> "ClientVector":
        """A vector from checked state keys (see :func:`check_state`), as one run; the arrays
        are taken over, not copied."""
        vec = cls(num_clients, state[f"{name}_fill"])
        ids = state[f"{name}_ids"]
        runs = (_Run(ids, state[f"{name}_values"]),) if ids.shape[0] else ()
        vec._store = _densified(_sparse(state[f"{name}_fill"], runs), num_clients)
        return vec


def _densified(store: _Store, num_clients: int) -> _Store:
    """``store`` as one dense ``[K]`` array once it holds ``DENSE_FRACTION`` of the K clients
    (and at least one), else unchanged."""
    n = _count(store.runs)
    if n == 0 or n < DENSE_FRACTION * num_clients:
        return store
    return _Store(store.fill, (), _expanded(store, num_clients))


def _expanded(store: _Store, num_clients: int) -> np.ndarray:
    """A sparse ``store`` as a new dense ``[K]`` array: ``fill``, its stored values at its ids."""
    dense = np.full(num_clients, store.fill)
    for run in store.runs:
        dense[run.ids] = run.values
    return dense


def check_state(state: Dict[str, Any], name: str, num_clients: int) -> None:
    """Raises ``ValueError`` naming the key unless the vector ``name``'s ids (already int64 and
    values float64 by their specs) are strictly increasing, in ``[0, K)`` and one per value;
    changes nothing."""
    ids, values = state[f"{name}_ids"], state[f"{name}_values"]
    if values.shape != ids.shape:
        raise ValueError(f"state['{name}_values'] must hold one value per id of "
                         f"state['{name}_ids'] ({ids.shape[0]}); got {values.shape[0]}")
    if ids.shape[0] and (int(ids[0]) < 0 or int(ids[-1]) >= num_clients):
        raise ValueError(f"state['{name}_ids'] must lie in [0, {num_clients}); got ids from "
                         f"{int(ids[0])} to {int(ids[-1])}")
    if ids.shape[0] > 1 and not (ids[1:] > ids[:-1]).all():
        k = int(np.flatnonzero(ids[1:] <= ids[:-1])[0])
        raise ValueError(f"state['{name}_ids'] must be strictly increasing (sorted, distinct); "
                         f"got {int(ids[k])} then {int(ids[k + 1])} at position {k}")


def upgrade(given: Dict[str, Any], name: str, num_clients: int, fill: float,
            lo: Optional[float] = None) -> Dict[str, Any]:
    """A copy of a version 1 or 2 ``state`` whose dense ``name`` ``[K]`` (checked by its spec:
    finite, at least ``lo``) is replaced by the three keys of version 3, listing the entries
    that differ from ``fill``; ``given`` itself is unchanged (a state without ``name`` is
    returned as it is, for the key check to refuse)."""
    if name not in given:
        return given
    dense = StateSpec((num_clients,), lo=lo).check(given[name], f"state[{name!r}]")
    vec = ClientVector(num_clients, fill)
    vec._store = _Store(float(fill), (), dense)
    out = {k: v for k, v in given.items() if k != name}
    out.update(vec.state(name))
    return out
