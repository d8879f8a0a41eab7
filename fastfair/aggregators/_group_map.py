"""The group map of :class:`~fastfair.aggregators.over_groups.OverGroups` and the per-round
arithmetic over it: each client's share of its group, the groups' losses and averaged updates,
all in O(m) over the cohort (np.bincount over the groups present)."""

from __future__ import annotations

import hashlib
from typing import Any, Callable, List, Optional, Tuple, Union

import numpy as np

from fastfair import ops
from fastfair._arrays import framework_or_none, frozen
from fastfair.aggregators._checks import host_array

#: How many ids a function map is probed at for its checksum.
PROBES = 4096

GroupMap = Union[np.ndarray, Callable[[np.ndarray], Any]]


class ReportedGroups:
    """A group map the clients report each round (the Flower strategy reads each reply's
    ``fastfair-group`` metric): :meth:`report` sets the round's groups before the rule's round,
    and the map answers for those clients only.

    Parameters
    ----------
    num_groups
        G; every reported group must lie in ``[0, G)``.
    """

    #: The Flower strategy reads a group from every reply when the map says so.
    reported = True

    def __init__(self, num_groups: int) -> None:
        if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) \
                or num_groups < 1:
            raise ValueError(f"num_groups must be an integer >= 1; got {num_groups!r}")
        self.num_groups = int(num_groups)
        self._round: dict = {}

    @property
    def checksum(self) -> str:
        """What a ``state_dict`` records of this map: its kind and G (its values change every
        round)."""
        return f"reported:{self.num_groups}"

    def report(self, ids: Any, groups: Any) -> None:
        """The groups ``[m]`` of the clients ``ids [m]`` of this round (replacing the last
        round's)."""
        ids, groups = np.asarray(ids, dtype=np.int64), np.asarray(groups, dtype=np.int64)
        if ids.shape != groups.shape:
            raise ValueError(f"{ids.shape[0]} ids but {groups.shape[0]} groups")
        self._round = dict(zip(ids.tolist(), groups.tolist()))

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        missing = [int(k) for k in ids if int(k) not in self._round]
        if missing:
            raise ValueError(f"client {missing[0]} reported no group this round")
        return np.array([self._round[int(k)] for k in ids], dtype=np.int64)


def map_checksum(groups: GroupMap, num_clients: int) -> str:
    """A checksum of the group map: SHA-256 (first 16 hex digits) of the int64 array, or of a
    function map's values at up to :data:`PROBES` ids spread over ``[0, K)`` (``probe:``
    prefix). A ``state_dict`` carries it, so that a state is not loaded under another map."""
    if isinstance(groups, ReportedGroups):
        return groups.checksum
    if callable(groups):
        probe = np.unique(np.linspace(0, num_clients - 1, min(num_clients, PROBES))
                          .astype(np.int64))
        values = np.asarray(host_array(groups(probe), "groups(ids)"), dtype=np.int64)
        return "probe:" + hashlib.sha256(probe.tobytes() + values.tobytes()).hexdigest()[:16]
    return hashlib.sha256(np.ascontiguousarray(groups, dtype=np.int64).tobytes()).hexdigest()[:16]



def check_map(groups: GroupMap, num_clients: Optional[int],
               num_groups: Optional[int]) -> Tuple[GroupMap, int, int]:
    """The group map (an int64 array, or the function), K and G, checked."""
    for value, what in ((num_clients, "num_clients"), (num_groups, "num_groups")):
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, (int, np.integer)) or value < 1):
            raise ValueError(f"{what} must be an integer >= 1; got {value!r}")
    if callable(groups):
        num_groups = num_groups if num_groups is not None else getattr(groups, "num_groups", None)
        if num_clients is None or num_groups is None:
            raise ValueError("a function group map needs num_clients (K) and num_groups (G)")
        return groups, int(num_clients), int(num_groups)
    arr = host_array(groups, "groups")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"groups must be a non-empty 1-D array [K]; got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"groups must hold integers; got dtype {arr.dtype}")
    arr = np.asarray(arr, dtype=np.int64)   # copied once, by frozen() below
    if num_clients is not None and arr.shape[0] != num_clients:
        raise ValueError(f"groups has {arr.shape[0]} entries but num_clients is {num_clients}")
    G = int(arr.max()) + 1 if num_groups is None else int(num_groups)
    bad = (arr < 0) | (arr >= G)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"groups must lie in [0, {G}); client {k} has {int(arr[k])}")
    arr = frozen(arr)   # the rule's groups: no write, nor setflags(write=True), regroups
    return arr, arr.shape[0], G


def within_shares(counts: Optional[np.ndarray], totals: Optional[np.ndarray], sizes: np.ndarray,
            inv: np.ndarray, share: str) -> np.ndarray:
    """Each client's share of its group ``[m]`` (1/|S_g| in a group with no samples)."""
    uniform = 1.0 / sizes[inv]
    if share == "uniform" or counts is None or totals is None:
        return uniform
    t = totals[inv]
    return np.divide(counts, t, out=uniform, where=t > 0)


def group_losses(losses: np.ndarray, counts: Optional[np.ndarray],
                  totals: Optional[np.ndarray], sizes: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Each present group's loss: its clients' sample-weighted mean (plain mean where no
    counts are known or the group has no samples)."""
    n = sizes.shape[0]
    plain = np.bincount(inv, weights=losses, minlength=n) / sizes
    if counts is None or totals is None:
        return plain
    weighted = np.bincount(inv, weights=counts * losses, minlength=n)
    return np.divide(weighted, totals, out=plain, where=totals > 0)


def group_updates(updates: Any, inv: np.ndarray, within: np.ndarray, n_groups: int,
                   m: int) -> Any:
    """Each present group's averaged update :math:`\\sum_{k\\in S_g} s_k X_k`: ``[G_S, *S]``
    (m lists of arrays: G_S lists), in the framework of ``updates``."""
    listed = isinstance(updates, (list, tuple))
    rows = len(updates) if listed or hasattr(updates, "shape") else None
    if rows is None:
        updates = np.asarray(updates)
        rows = updates.shape[0] if updates.ndim else 0
    if rows != m:
        raise ValueError(f"updates has {rows} clients but client_ids has {m}")
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(n_groups + 1))
    kind = framework_or_none(updates) if not listed else None
    out: List[Any] = []
    for g in range(n_groups):
        idx = order[bounds[g]:bounds[g + 1]]
        part: Any  # a list of the clients' arrays, or the framework's rows
        if listed:
            part = [updates[i] for i in idx]
        elif kind == "torch":
            import torch

            part = updates[torch.as_tensor(idx, device=updates.device)]
        else:
            part = np.ascontiguousarray(np.asarray(updates)[idx])
        out.append(ops.weighted_average(part, within[idx]))
    if listed:
        return out
    if kind == "torch":
        import torch

        return torch.stack(out)
    return np.stack(out)
