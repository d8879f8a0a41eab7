"""What every federated data set is: per-client sample counts and ragged batches of clients'
samples (:class:`ClientBatch`), answered for any set of client ids in O(number of ids), and the
train/test prefix split of a client's generated samples (:class:`PrefixSplit`)."""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np
import torch

from fastfair._arrays import frozen

TRAIN_FRACTION = 0.8


def take_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``t[index]`` for ``t [N, *rest]`` and integer ``index [*shape]``: ``[*shape, *rest]``.
    Through ``index_select`` of the flattened index: the same copy as advanced indexing, which
    on the CPU computes every element's address and runs slower on short rows."""
    return t.index_select(0, index.reshape(-1)).view(*index.shape, *t.shape[1:])


class HostBuffer:
    """A host array that a data set generates each cohort into, handed out again once no tensor
    uses it, so that a round's fresh cohort does not fault in and zero new pages
    (docs/benchmarks.md, design measurements).

    The tensor :meth:`take` returns is built on a NumPy view of one array, and the tensor (with
    every tensor that shares its memory) keeps that view alive; the buffer keeps only a weak
    reference to it, so the array is written again only once the view is gone, which the
    language guarantees happens no earlier than the last holder lets go. Otherwise (the previous
    batch still alive) a new array is taken and the old one left to its holders. Holds at most
    one array, 1/8 larger than the largest request, between calls.
    """

    def __init__(self) -> None:
        self._array: Optional[np.ndarray] = None
        self._handed: Optional["weakref.ReferenceType[np.ndarray]"] = None  # the last view out
        self._lock = threading.Lock()  # the check and the view it hands out, as one step

    def __reduce__(self) -> Tuple[type, Tuple[()]]:
        return HostBuffer, ()  # a copy (pickle, deepcopy) starts with no buffer of its own

    def take(self, n: int, dtype: Any = np.float32) -> torch.Tensor:
        """A CPU tensor ``[n]`` of ``dtype`` (contents undefined) in memory no other tensor
        uses."""
        with self._lock:
            in_use = self._handed is not None and self._handed() is not None
            if (self._array is None or self._array.size < n
                    or self._array.dtype != np.dtype(dtype) or in_use):
                self._array = np.empty(n + n // 8, dtype)
            view = self._array[:n]
            self._handed = weakref.ref(view)
            return torch.from_numpy(view)


@dataclass
class ClientBatch:
    """Samples of several clients, concatenated.

    x: ``[N, *sample_shape]``, float32 (feature vectors ``[F]``, images ``[C, H, W]``) or int64
    (token ids ``[T]``); y: ``[N]`` int64 class labels, or ``[N, T]`` for a label per position
    (next-character prediction); offsets: ``[m + 1]`` int64, client k owns rows
    ``offsets[k]:offsets[k + 1]``.
    """

    x: torch.Tensor
    y: torch.Tensor
    offsets: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to(self, device: torch.device) -> "ClientBatch":
        """The batch with ``x`` and ``y`` on ``device`` (offsets stay on the host)."""
        return ClientBatch(self.x.to(device), self.y.to(device), self.offsets)


def concat_batches(batches: Sequence[ClientBatch]) -> ClientBatch:
    """One batch of the clients of ``batches`` (in order): x and y concatenated, offsets
    shifted."""
    counts = np.concatenate([b.counts for b in batches])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return ClientBatch(torch.cat([b.x for b in batches]), torch.cat([b.y for b in batches]),
                       offsets)


class ResidentSplit:
    """One split of a data set held on a device: every client's samples as batch tensors,
    concatenated once on the host (``x [N, *sample_shape]``, ``y [N, ...]``; client k's rows
    ``starts[k]:starts[k] + counts[k]``), from which :meth:`gather` takes a cohort with one index
    copy on the device. The batch equals, value for value, the one the data set builds on the
    host and copies (conversions such as pixels to [0, 1] stay on the host: a GPU's division by
    a scalar multiplies by its reciprocal, one ulp away for some pixels)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, counts: np.ndarray,
                 device: torch.device) -> None:
        self.x = x.to(device)
        self.y = y.to(device)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.device = device

    def gather(self, ids: np.ndarray) -> ClientBatch:
        """The samples of clients ``ids [m]`` (in that order) on the device: rows
        ``starts[k] + j`` for ``j < counts[k]``; offsets on the host."""
        counts = self.counts[ids]
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        rows = np.repeat(self.starts[ids] - offsets[:-1], counts) + np.arange(offsets[-1])
        index = torch.from_numpy(rows).to(self.device)
        return ClientBatch(self.x.index_select(0, index), self.y.index_select(0, index), offsets)


def resident_split(dataset: "FederatedDataset", split: str, device: torch.device,
                   nbytes: Callable[[], int],
                   whole: Callable[[], Tuple[torch.Tensor, torch.Tensor, np.ndarray]]
                   ) -> Optional[ResidentSplit]:
    """``dataset``'s ``split`` kept on ``device`` from the first call on (``whole()`` gives its
    batch tensors ``(x, y, counts)``, about ``nbytes()`` bytes), or None where it would take
    more than half of the device's free memory (the caller then copies each batch from the
    host). One copy per data set, split and device; later calls only look it up."""
    cache = dataset.__dict__.setdefault("_on_device", {})
    key = (split, str(device))
    if key not in cache:
        size = nbytes()
        free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 2 * size
        cache[key] = ResidentSplit(*whole(), device) if 2 * size <= free else None
    return cache[key]


class FederatedDataset:
    """Interface of every data set: ``num_clients``, ``num_features`` (the product of
    ``sample_shape``, the shape of one sample), ``num_classes``, ``vocab_size`` (token data: x
    holds ids in ``[0, vocab_size)``; None for float features), ``label_shape`` (``()``, or
    ``(T,)`` for a label per position), ``fixed_data``, ``num_samples(ids)`` and
    ``client_data(ids, split, device)``.

    ``fixed_data``: ``client_data`` returns the same samples for the same ids and split on every
    call (every built-in data set); a data set that draws fresh samples per call (augmentation)
    sets it False, and the simulator then never reuses a cohort's batch."""

    num_clients: int
    num_features: int
    num_classes: int
    sample_shape: Tuple[int, ...]
    vocab_size: Optional[int] = None
    label_shape: Tuple[int, ...] = ()
    fixed_data: bool = True
    #: The number of groups G the clients fall into, such as regions or device classes; None
    #: for a data set without groups.
    num_groups: Optional[int] = None
    #: The ``[K]`` int64 group of every client where the data set lists them; None without
    #: groups, or when :meth:`groups` answers per id, as the generated grouped workload does.
    group_ids: Optional[np.ndarray] = None

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
        """Training-sample counts of clients ``ids`` ([m] int64 -> [m] int64)."""
        raise NotImplementedError

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        """The ``split`` ('train' or 'test') samples of clients ``ids``, in the order of ``ids``,
        on ``device`` (default CPU; generated there where the data set can)."""
        raise NotImplementedError

    def groups(self, ids: np.ndarray) -> Optional[np.ndarray]:
        """``[m]`` group of each client where the data set has groups (None otherwise); the
        report then adds per-group accuracy, and runs may be fair over groups."""
        if self.group_ids is None:
            return None
        return self.group_ids[self._check_ids(ids)]

    def group_map(self) -> Any:
        """The clients' groups as :class:`~fastfair.aggregators.OverGroups` takes them: the
        array ``[K]`` where listed, else the function :meth:`groups`; None without groups."""
        if self.num_groups is None:
            return None
        return self.group_ids if self.group_ids is not None else self.groups

    def _check_ids(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_clients):
            bad = int(ids[(ids < 0) | (ids >= self.num_clients)][0])
            raise ValueError(f"client_ids: client id {bad} is out of range "
                             f"[0, {self.num_clients})")
        return ids


def check_finite(x: np.ndarray, where: str, field: str = "x", first: int = 0) -> None:
    """Raises ValueError ``"<where>: <field> has NaN at sample <i>"`` (or inf) when the float
    array ``x [n, ...]`` holds a value that is not finite (``first``: the sample number of
    ``x[0]``). One ``isfinite`` pass; integer arrays pass unchecked."""
    if x.dtype.kind not in "fc" or x.size == 0:
        return
    finite = np.isfinite(x)
    if finite.all():
        return
    flat = int(np.argmin(finite.reshape(-1)))
    value = x.reshape(-1)[flat]
    per_sample = x.size // x.shape[0] if x.ndim else 1
    raise ValueError(f"{where}: {field} has {'NaN' if np.isnan(value) else 'inf'} at sample "
                     f"{first + flat // per_sample}")


def check_labels(labels: np.ndarray, num_classes: int, where: str) -> None:
    """Raises ValueError naming ``where`` and the first index of ``labels`` outside
    ``[0, num_classes)``."""
    flat = np.asarray(labels).reshape(-1)
    bad = (flat < 0) | (flat >= num_classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{where}: label {flat[i]} at index {i} is outside [0, {num_classes})")


def split_sizes(total: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-client 80/20 train/test sizes; at least one training sample each."""
    train = np.maximum(1, np.floor(TRAIN_FRACTION * total + 0.5).astype(np.int64))
    train = np.minimum(train, total)
    return train, total - train


class PrefixSplit:
    """Which rows of a generated cohort a split needs, for data sets whose client k's samples
    are the prefix of its own keyed stream, the first ``train[k]`` of its ``totals[k]``
    (:func:`split_sizes`) training and the rest test: the training split (every round's data)
    draws only its own rows, the test split draws them all and keeps the rest.

    ``drawn [m]``: rows to draw per client; ``starts [m + 1]``: their offsets in the drawn
    batch; :meth:`batch` turns the drawn ``x``, ``y`` into the split's :class:`ClientBatch`.
    """

    def __init__(self, totals: np.ndarray, split: str) -> None:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
        self.totals, self.split = totals, split
        self.train, _ = split_sizes(totals)
        self.drawn = self.train if split == "train" else totals
        self.starts = np.concatenate([[0], np.cumsum(self.drawn)]).astype(np.int64)

    def batch(self, x: torch.Tensor, y: torch.Tensor) -> ClientBatch:
        """The split's batch from the drawn rows ``x [sum drawn, ...]``, ``y``."""
        if self.split == "train":
            return ClientBatch(x, y, self.starts)
        position = torch.arange(x.shape[0], device=x.device) - torch.from_numpy(
            np.repeat(self.starts[:-1], self.totals)).to(x.device)
        keep = position >= torch.from_numpy(np.repeat(self.train, self.totals)).to(x.device)
        offsets = np.concatenate([[0], np.cumsum(self.totals - self.train)]).astype(np.int64)
        return ClientBatch(x[keep], y[keep], offsets)


def check_groups(groups: Any, num_clients: int, where: str) -> Tuple[np.ndarray, int]:
    """``groups`` as an int64 array ``[K]`` of groups >= 0, and G (one more than the largest);
    ValueError naming ``where`` otherwise."""
    g = np.asarray(groups)
    if g.shape != (num_clients,):
        raise ValueError(f"{where}: groups must hold one group per client, [{num_clients}]; "
                         f"got shape {g.shape}")
    if g.dtype.kind not in "iu":
        raise TypeError(f"{where}: groups must be integers; got dtype {g.dtype}")
    if g.size and g.min() < 0:
        k = int(np.argmin(g))
        raise ValueError(f"{where}: client {k} has group {int(g[k])}; groups must be >= 0")
    g = frozen(np.asarray(g, dtype=np.int64))
    return g, int(g.max()) + 1


def with_groups(dataset: FederatedDataset, groups: Any, where: str = "groups") -> FederatedDataset:
    """``dataset`` (a shallow copy: the data are shared) with the clients' ``groups [K]``
    (:func:`check_groups`) as its known groups."""
    import copy

    g, num_groups = check_groups(groups, dataset.num_clients, where)
    out = copy.copy(dataset)
    out.group_ids, out.num_groups = g, num_groups
    return out


def dominant_classes(dataset: FederatedDataset, chunk: int = 256) -> np.ndarray:
    """``[K]`` each client's most frequent training label (the smallest on ties), read a
    ``chunk`` of clients at a time: a group per dominant class, for experiments on data sets
    split by label (Dirichlet)."""
    out = np.empty(dataset.num_clients, dtype=np.int64)
    for lo in range(0, dataset.num_clients, chunk):
        ids = np.arange(lo, min(lo + chunk, dataset.num_clients))
        batch = dataset.client_data(ids, "train")
        y = batch.y.reshape(batch.y.shape[0], -1).cpu().numpy()
        for j, (a, b) in enumerate(zip(batch.offsets[:-1], batch.offsets[1:])):
            labels = y[a:b].reshape(-1)
            out[ids[j]] = int(np.argmax(np.bincount(labels))) if labels.size else 0
    return out


#: The largest integer group label a groups file may give (a run keeps per-group arrays).
MAX_GROUP_LABEL = 2**20 - 1
#: An integer label or client index: ASCII digits with an optional sign (``-1``, ``+1``, ``07``).
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: A group name: a letter or underscore first, then letters, digits, ``_``, ``-``, ``.``, spaces.
_NAME = re.compile(r"[^\W\d][\w.\- ]*")


def _group_label(text: str, where: str) -> Any:
    """A group label of a groups file: an ``int`` (``07`` and ``+7`` are 7) or a name (``str``);
    ValueError naming ``where`` for anything else (empty, ``1.5``, ``1e3``, ``#``)."""
    if _INTEGER.fullmatch(text):
        return int(text)
    if _NAME.fullmatch(text):
        return text
    raise ValueError(f"{where}: group {text!r} is neither an integer nor a name (a letter "
                     "first); give integers >= 0 or names")


def read_groups_file(path: str, dataset: FederatedDataset) -> np.ndarray:
    """The ``[K]`` groups of a CSV of ``client,group`` rows (a header row is allowed).

    A client is its index in ``[0, K)`` or, for data sets of named users (LEAF), its user name.
    A group is an integer in ``[0, MAX_GROUP_LABEL]``, kept as it is (``07`` and ``+7`` are
    group 7, so a run's ``acc_group7`` is the file's group 7), or a name (a letter first), the
    names numbered in sorted order; one file gives every group as integers or every group as
    names. Every client needs exactly one row.

    Raises
    ------
    ValueError
        Naming the file and the line: a row without ``client,group``, a client outside
        ``[0, K)`` or given twice, an integer group outside ``[0, MAX_GROUP_LABEL]``, a group
        that is neither an integer nor a name, integers beside names, a client without a
        group, or a file that is not a readable UTF-8 CSV.
    """
    import csv
    import io

    from fastfair._files import open_regular

    names = {str(u): k for k, u in enumerate(getattr(dataset, "users", []) or [])}
    K = dataset.num_clients
    found: dict = {}
    first_of_kind: dict = {}
    try:
        with open_regular(path) as raw, io.TextIOWrapper(raw, encoding="utf-8",
                                                         newline="") as f:
            reader = csv.reader(f)
            rows = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a readable UTF-8 CSV of client,group rows "
                         f"({type(exc).__name__}: {exc})") from None
    for index, (line, row) in enumerate(rows):
        where = f"{path}: line {line}"
        if len(row) < 2:
            raise ValueError(f"{where} needs client,group; got {row!r}")
        client, text = row[0].strip(), row[1].strip()
        if names:  # named users: rows of users the run did not choose (and a header) are skipped
            if client not in names:
                continue
            k = names[client]
        elif _INTEGER.fullmatch(client):
            k = int(client)
            if not 0 <= k < K:
                raise ValueError(f"{where}: client {k} is outside [0, {K})")
        elif index == 0:
            continue  # a header
        else:
            raise ValueError(f"{where}: client {client!r} is not an index in [0, {K})")
        if k in found:
            raise ValueError(f"{where}: client {client!r} has a second group")
        label = _group_label(text, where)
        kind = "an integer" if isinstance(label, int) else "a name"
        if isinstance(label, int) and not 0 <= label <= MAX_GROUP_LABEL:
            raise ValueError(f"{where}: group {label} is outside [0, {MAX_GROUP_LABEL}]; "
                             "integer groups are kept as they are (a run reports "
                             "acc_group<g> and keeps arrays over 0..max group), or give names")
        other = first_of_kind.get("a name" if isinstance(label, int) else "an integer")
        if other is not None:
            raise ValueError(f"{where}: group {text!r} is {kind}, but line {other[0]} gives "
                             f"{other[1]!r}; give every group as an integer >= 0, or every "
                             "group as a name")
        first_of_kind.setdefault(kind, (line, text))
        found[k] = label
    missing = sorted(set(range(K)) - set(found))
    if missing:
        users = getattr(dataset, "users", None) if names else None
        who = ", ".join(str(users[k]) if users is not None else str(k) for k in missing[:5])
        raise ValueError(f"{path}: {len(missing)} client(s) have no group, e.g. {who}")
    labels = [found[k] for k in range(K)]
    if "a name" not in first_of_kind:
        return np.array(labels, dtype=np.int64)
    order = {lab: i for i, lab in enumerate(sorted(set(labels)))}
    return np.array([order[lab] for lab in labels], dtype=np.int64)
