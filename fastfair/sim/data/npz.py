"""``npz-clients``: a folder of one ``.npz`` file per client, for any data set a user has
preprocessed (tabular Berka or MQP, ISIC images, Reddit or SpeechCommands features, ...).

Each file holds ``x [n, *sample_shape]`` and ``y [n]`` (or ``[n, T]``, a label per position),
and optionally ``x_test``, ``y_test``; without them a client's samples are split 80/20 in their
order. An optional ``group`` entry (one integer >= 0: a region, a device class) gives the
client's group; every file or none holds one. Float ``x`` are features (any shape: vectors,
``[C, H, W]`` images); integer ``x`` are token ids (the vocabulary is one more than the largest
id, found when the folder opens). Labels are integer classes; their number is one more than the
largest label. Files are opened with ``allow_pickle=False``. Opening reads every file's labels
and array headers; a client's features are read when it is sampled.
"""

from __future__ import annotations

import glob
import os
import zipfile
import zlib
from typing import Dict, List, Optional, Tuple

import numpy as np

from fastfair._files import open_regular
from fastfair._limits import npz_array_header
from fastfair.sim.data.base import check_finite, check_groups, split_sizes
from fastfair.sim.data.client_files import ClientFiles, choose_clients


def _header(zf: zipfile.ZipFile, member: str, path: str) -> Tuple[Tuple[int, ...], np.dtype]:
    """Shape and dtype of array ``member`` of an open ``.npz`` (:func:`npz_array_header`)."""
    return npz_array_header(zf, member, path, os.path.getsize(path))


def _load(path: str, read):
    """``read(npz, zip)`` of the ``.npz`` at ``path`` (a regular file, opened without pickles);
    every way the file can be broken (not a zip, truncated, a damaged entry) is one ValueError
    naming it."""
    try:
        with open_regular(path) as f:
            z = np.load(f, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError("it is a single .npy array, not an .npz of x and y")
            with z:
                return read(z, z.zip)
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(path) else f"{path}: {text}") from None
    except (OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, MemoryError,
            NotImplementedError) as exc:
        raise ValueError(f"{path} is not a readable .npz ({type(exc).__name__}: {exc}); it may "
                         "be truncated or corrupted") from None


def npz_paths(data_dir: str) -> List[str]:
    """The ``.npz`` files of ``data_dir``, in name order (ValueError when there are none)."""
    paths = sorted(glob.glob(os.path.join(data_dir, "*.npz")))
    if not paths:
        raise ValueError(f"{data_dir} holds no .npz files (one per client, with x and y)")
    return paths


class NpzClients(ClientFiles):
    """The folder ``data_dir``; ``clients`` files (all when None, else a seeded random subset,
    in name order) are the clients."""

    def __init__(self, data_dir: str, clients: Optional[int] = None, *, seed: int = 0,
                 cache_bytes: int = 1 << 30) -> None:
        self.paths = paths = choose_clients(npz_paths(data_dir), clients, seed,
                                            f".npz files of {data_dir}")
        counts: Dict[str, List[int]] = {"train": [], "test": []}
        shapes: set = set()
        labels: set = set()
        tops = [0, -1]                         # the largest label and token id
        self._own_test: List[bool] = []
        groups: List[Optional[int]] = []
        for path in paths:
            own, n, n_test = _load(path, lambda z, zf, path=path: self._open(
                z, zf, path, shapes, labels, tops, groups))
            train = n if own else int(split_sizes(np.array([n]))[0][0])
            counts["train"].append(train)
            counts["test"].append(n_test if own else n - train)
            self._own_test.append(own)
        top_label, top_id = tops
        if len(shapes) != 1 or len(labels) != 1:
            raise ValueError(f"every client of {data_dir} needs the same sample shape, kind "
                             f"(float or integer) and label shape; got {sorted(shapes)} and "
                             f"{sorted(labels)}")
        (shape, floats), = shapes
        super().__init__({s: np.array(c) for s, c in counts.items()}, shape, top_label + 1,
                         kind="float" if floats else "tokens",
                         vocab_size=None if floats else top_id + 1, label_shape=labels.pop(),
                         cache_bytes=cache_bytes)
        given = [g is not None for g in groups]
        if any(given) and not all(given):
            k = given.index(not given[0])
            raise ValueError(f"{paths[k]} {'holds' if given[k] else 'lacks'} a group entry and "
                             f"{paths[0]} {'does' if given[0] else 'does not'}: give every "
                             "client a group, or none")
        if all(given):
            self.group_ids, self.num_groups = check_groups(groups, self.num_clients, data_dir)

    @staticmethod
    def _open(z, zf: zipfile.ZipFile, path: str, shapes: set, labels: set,
              tops: list, groups: list) -> Tuple[bool, int, int]:
        """Checks one client's file from its array headers and labels (every member's header
        first, so no member is read past what its entry holds); returns (own test split,
        samples, test samples)."""
        names = set(z.files)
        groups.append(None)
        if "group" in names:
            shape, dtype = _header(zf, "group", path)
            if shape not in ((), (1,)) or dtype.kind not in "iu":
                raise ValueError(f"{path}: group must be one integer; got {list(shape)} {dtype}")
            group = int(np.asarray(z["group"]).reshape(-1)[0])
            if group < 0:
                raise ValueError(f"{path}: group must be >= 0; got {group}")
            groups[-1] = group
        if not {"x", "y"} <= names or ("x_test" in names) != ("y_test" in names):
            raise ValueError(f"{path} must hold x and y (and x_test with y_test); it "
                             f"holds {', '.join(sorted(names))}")
        own = "x_test" in names
        pairs = [("x", "y")] + ([("x_test", "y_test")] if own else [])
        headers = {m: _header(zf, m, path) for pair in pairs for m in pair}
        rows = []
        for member, label in pairs:
            (shape, dtype), (y_shape, y_dtype) = headers[member], headers[label]
            if len(shape) < 1 or dtype.kind not in "fiu":
                raise ValueError(f"{path}: {member} must be float features or integer token "
                                 f"ids [n, ...]; got {list(shape)} {dtype}")
            if shape[:1] != y_shape[:1] or y_dtype.kind not in "iu":
                raise ValueError(f"{path}: {member} {list(shape)} needs integer labels "
                                 f"with as many rows; got {list(y_shape)} {y_dtype}")
            y = z[label]
            shapes.add((shape[1:], dtype.kind == "f"))
            labels.add(y.shape[1:])
            if y.size and y.min() < 0:
                raise ValueError(f"{path}: labels must be >= 0; {label} holds {y.min()}")
            tops[0] = max(tops[0], int(y.max(initial=0)))
            if dtype.kind != "f":
                ids = z[member]
                if ids.size and ids.min() < 0:
                    raise ValueError(f"{path}: token ids must be >= 0; {member} holds "
                                     f"{ids.min()}")
                tops[1] = max(tops[1], int(ids.max(initial=0)))
            rows.append(shape[0])
        return own, rows[0], rows[1] if own else 0

    def describe(self, k: int, split: str = "train") -> str:
        return self.paths[k]

    def _read(self, split: str, k: int) -> Tuple[np.ndarray, np.ndarray]:
        path = self.paths[k]
        own = self._own_test[k]
        field, label = ("x", "y") if split == "train" or not own else ("x_test", "y_test")

        def read(z, zf):
            _header(zf, field, path)               # the file may have changed since it opened
            _header(zf, label, path)
            return z[field], z[label]

        x, y = _load(path, read)
        first = 0
        if not own:
            n = int(self._counts["train"][k])
            x, y, first = (x[:n], y[:n], 0) if split == "train" else (x[n:], y[n:], n)
        if x.dtype.kind == "f":
            with np.errstate(over="ignore"):           # as the batch holds it: inf past 3.4e38
                x = x.astype(np.float32, copy=False)
            check_finite(x, f"{path} (client {k})", field, first)
        return x, y
