r"""Per-client state whose memory and cost scale with the clients a run touches, not with K.

A rule's per-client vector :math:`v \in \mathbb R^K` (AAggFF-D's ``D``, AFL's λ, FedMABA's
:math:`\log p`) starts at one value ``fill`` for every client, and a round reads and writes only
its m sampled entries. :class:`ClientVector` stores the entries written so far as sorted arrays
of ids and values (16 bytes per touched client, a gather is a binary search, a round's new ids
are merged in O(n + m log m)); every other client holds ``fill``. Once it stores half of the K
clients it moves to one dense ``[K]`` array (8 bytes per client, O(m) per round): it never holds
more than either form would, so a run with K = 10^10 clients of which 10^5 take part keeps
1.6 MB, where a dense array would be 80 GB (and, allocated lazily by the kernel, would fault in
and zero a 2 MB huge page at each of the rounds' random writes).

The values are the dense ones bit for bit: a gather returns exactly what the dense array would
hold, so a rule computes the same float64 operations in the same order either way.

In a ``state_dict`` (format version 3) a vector ``name`` is three keys: ``name_ids`` (int64,
strictly increasing, in ``[0, K)``), ``name_values`` (float64, one per id) and ``name_fill``
(the value of every client not listed). Only entries whose bits differ from ``fill`` are listed,
so the snapshot is the same whichever form holds the vector. Version 1 and 2 snapshots held the
dense ``name`` ``[K]``; :func:`upgrade` reads them.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import numpy as np

from fastfair.aggregators._checks import StateSpec

#: The vector moves to dense storage once it stores this fraction of the K clients (then the
#: sparse arrays, 16 bytes a client, would take as much as the dense one, 8 bytes a client).
DENSE_FRACTION = 0.5


def _bits(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint64)


class _Store(NamedTuple):
    """One consistent state of a vector, replaced whole (one attribute assignment, atomic under
    the GIL), so that a round proposed in one thread never reads half of another thread's
    commit: at worst stale values, and that round is refused (the contract's Threads)."""

    fill: float
    ids: np.ndarray            # [n] int64, strictly increasing (empty once dense)
    values: np.ndarray         # [n] float64
    dense: Optional[np.ndarray]  # [K] float64, or None while sparse


def _sparse(fill: float, ids: np.ndarray, values: np.ndarray) -> _Store:
    return _Store(float(fill), ids, values, None)


_NO_IDS = np.empty(0, dtype=np.int64)
_NO_VALUES = np.empty(0, dtype=np.float64)


class ClientVector:
    r"""A float64 vector over K clients: ``fill`` everywhere except the entries written.

    Parameters
    ----------
    num_clients
        K (up to 2**63 - 1).
    fill
        The value of every client not yet written.

    Operations (m ids, n entries stored): :meth:`gather` O(m log n), :meth:`scatter`
    O(n + m log m) while sparse and O(m) once dense, :meth:`dense` O(K). Reads are safe beside a
    concurrent write (they see the state before or after it, or stale values of it).
    """

    def __init__(self, num_clients: int, fill: float) -> None:
        self.num_clients = int(num_clients)
        self._store = _sparse(fill, _NO_IDS, _NO_VALUES)

    @property
    def fill(self) -> float:
        """The value of every client not stored."""
        return self._store.fill

    @property
    def stored(self) -> int:
        """How many entries the vector holds in memory (K once dense)."""
        store = self._store
        return self.num_clients if store.dense is not None else int(store.ids.shape[0])

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """:math:`v_{ids}` ``[m]`` float64 (a new array) for int64 ids in ``[0, K)``."""
        store = self._store
        if store.dense is not None:
            return store.dense[ids]
        out = np.full(ids.shape[0], store.fill)
        n = store.ids.shape[0]
        if n:
            pos = np.minimum(np.searchsorted(store.ids, ids), n - 1)
            hit = store.ids[pos] == ids
            out[hit] = store.values[pos[hit]]
        return out

    def scatter(self, ids: np.ndarray, values: np.ndarray, *,
                fill: Optional[float] = None) -> None:
        r""":math:`v_{ids} \leftarrow` ``values`` for distinct int64 ids ``[m]`` in ``[0, K)``;
        with ``fill``, every other entry becomes ``fill`` in the same write.

        All or nothing: everything that allocates (a grown or reset store) is built beside the
        current one and replaces it in one assignment, so a failure (e.g. ``MemoryError``)
        leaves the vector exactly as it was; only a write that grows nothing is in place.
        """
        store = self._store if fill is None else _sparse(fill, _NO_IDS, _NO_VALUES)
        if store.dense is not None:
            store.dense[ids] = values
            return
        n = store.ids.shape[0]
        pos = np.searchsorted(store.ids, ids)
        hit = store.ids[np.minimum(pos, n - 1)] == ids if n else np.zeros(ids.shape[0], bool)
        new = ~hit
        if not new.any():
            store.values[pos[hit]] = values[hit]
            self._store = store
            return
        kept = store.values.copy()
        kept[pos[hit]] = values[hit]
        order = np.argsort(ids[new], kind="stable")
        at, new_ids, new_values = pos[new][order], ids[new][order], values[new][order]
        # np.insert places equal positions in the order given, so the ids stay sorted.
        grown = _sparse(store.fill, np.insert(store.ids, at, new_ids),
                        np.insert(kept, at, new_values))
        self._store = _densified(grown, self.num_clients)

    def reset(self, fill: float) -> None:
        """Every entry becomes ``fill`` (O(1): the vector empties)."""
        self._store = _sparse(fill, _NO_IDS, _NO_VALUES)

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
            keep = _bits(store.values) != fill_bits
            ids, values = store.ids[keep], store.values[keep]
        return {f"{name}_ids": ids, f"{name}_values": values, f"{name}_fill": store.fill}

    @staticmethod
    def specs(name: str, lo: Optional[float] = None) -> Dict[str, StateSpec]:
        """The :class:`StateSpec` of each of the vector's three state keys (values at least
        ``lo``); :func:`check_state` adds the checks across them."""
        return {f"{name}_ids": StateSpec((-1,), integer=True),
                f"{name}_values": StateSpec((-1,), lo=lo), f"{name}_fill": StateSpec(lo=lo)}

    @classmethod
    def from_state(cls, state: Dict[str, Any], name: str, num_clients: int) -> "ClientVector":
        """A vector from checked state keys (see :func:`check_state`); the arrays are taken
        over, not copied."""
        vec = cls(num_clients, state[f"{name}_fill"])
        vec._store = _densified(_sparse(state[f"{name}_fill"], state[f"{name}_ids"],
                                        state[f"{name}_values"]), num_clients)
        return vec


def _densified(store: _Store, num_clients: int) -> _Store:
    """``store`` as one dense ``[K]`` array once it holds ``DENSE_FRACTION`` of the K clients
    (and at least one), else unchanged."""
    n = store.ids.shape[0]
    if n == 0 or n < DENSE_FRACTION * num_clients:
        return store
    return _Store(store.fill, _NO_IDS, _NO_VALUES, _expanded(store, num_clients))


def _expanded(store: _Store, num_clients: int) -> np.ndarray:
    """A sparse ``store`` as a new dense ``[K]`` array: ``fill``, its stored values at its ids."""
    dense = np.full(num_clients, store.fill)
    dense[store.ids] = store.values
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
    vec._store = _Store(float(fill), _NO_IDS, _NO_VALUES, dense)
    out = {k: v for k, v in given.items() if k != name}
    out.update(vec.state(name))
    return out
