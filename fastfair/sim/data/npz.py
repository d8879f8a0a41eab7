"""``npz-clients``: a folder of one ``.npz`` file per client, for any data set a user has
preprocessed (tabular Berka or MQP, ISIC images, Reddit or SpeechCommands features, ...).

Each file holds ``x [n, *sample_shape]`` and ``y [n]`` (or ``[n, T]``, a label per position),
and optionally ``x_test``, ``y_test``; without them a client's samples are split 80/20 in their
order. Float ``x`` are features (any shape: vectors, ``[C, H, W]`` images); integer ``x`` are
token ids (the vocabulary is one more than the largest id, found when the folder opens). Labels
are integer classes; their number is one more than the largest label. Files are opened with
``allow_pickle=False``. Opening reads every file's labels and array headers; a client's
features are read when it is sampled.
"""

from __future__ import annotations

import glob
import os
import zipfile
from typing import Dict, List, Optional, Tuple

import numpy as np

from fastfair.sim.data.base import split_sizes
from fastfair.sim.data.client_files import ClientFiles, choose_clients


def _header(zf: zipfile.ZipFile, member: str) -> Tuple[Tuple[int, ...], np.dtype]:
    """Shape and dtype of array ``member`` of an open ``.npz``, read from its header only."""
    with zf.open(member + ".npy") as f:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(f)
    return tuple(shape), dtype


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
        shapes, labels, top_label, top_id = set(), set(), 0, -1
        self._own_test: List[bool] = []
        for path in paths:
            with np.load(path, allow_pickle=False) as z, zipfile.ZipFile(path) as zf:
                names = set(z.files)
                if not {"x", "y"} <= names or ("x_test" in names) != ("y_test" in names):
                    raise ValueError(f"{path} must hold x and y (and x_test with y_test); it "
                                     f"holds {', '.join(sorted(names))}")
                own = "x_test" in names
                ys = [z["y"]] + ([z["y_test"]] if own else [])
                for member, y in zip(["x", "x_test"], ys):
                    shape, dtype = _header(zf, member)
                    if shape[:1] != y.shape[:1] or y.dtype.kind not in "iu":
                        raise ValueError(f"{path}: {member} {list(shape)} needs integer labels "
                                         f"with as many rows; got {list(y.shape)} {y.dtype}")
                    shapes.add((shape[1:], dtype.kind == "f"))
                    labels.add(y.shape[1:])
                    top_label = max(top_label, int(y.max(initial=0)))
                    if y.size and y.min() < 0:
                        raise ValueError(f"{path}: labels must be >= 0")
                    if dtype.kind != "f":
                        top_id = max(top_id, int(z[member].max(initial=0)))
            n = len(ys[0])
            train = n if own else int(split_sizes(np.array([n]))[0][0])
            counts["train"].append(train)
            counts["test"].append(len(ys[1]) if own else n - train)
            self._own_test.append(own)
        if len(shapes) != 1 or len(labels) != 1:
            raise ValueError(f"every client of {data_dir} needs the same sample shape, kind "
                             f"(float or integer) and label shape; got {sorted(shapes)} and "
                             f"{sorted(labels)}")
        (shape, floats), = shapes
        super().__init__({s: np.array(c) for s, c in counts.items()}, shape, top_label + 1,
                         kind="float" if floats else "tokens",
                         vocab_size=None if floats else top_id + 1, label_shape=labels.pop(),
                         cache_bytes=cache_bytes)

    def describe(self, k: int) -> str:
        return self.paths[k]

    def _read(self, split: str, k: int) -> Tuple[np.ndarray, np.ndarray]:
        with np.load(self.paths[k], allow_pickle=False) as z:
            if self._own_test[k]:
                return (z["x"], z["y"]) if split == "train" else (z["x_test"], z["y_test"])
            x, y = z["x"], z["y"]
        n = int(self._counts["train"][k])
        return (x[:n], y[:n]) if split == "train" else (x[n:], y[n:])
