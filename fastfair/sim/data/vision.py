"""MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 in the layouts torchvision writes, split across
clients by a partition scheme.

=========  ================================================================================
mnist      ``DIR/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`` (or ``.gz``)
fmnist     the same names under ``DIR/FashionMNIST/raw``
cifar10    ``DIR/cifar-10-batches-py/{data_batch_1..5,test_batch}`` (python pickles)
cifar100   ``DIR/cifar-100-python/{train,test}`` (fine labels)
=========  ================================================================================

``DIR`` may also be the folder holding the files themselves. IDX images are memory-mapped and
a client's rows are read when it is sampled; the pickles (at most 180 MB of uint8) are read
once, by an unpickler that builds NumPy arrays and nothing else. The training set is split by
:func:`fastfair.sim.data.arrays.partition_labels` (IID, Dirichlet(alpha) over labels, or ``c``
classes per client); the test set follows each client's class mix (:func:`match_test_split`),
so every client is evaluated on its own distribution. Nothing is downloaded unless asked
(``download=True``, through torchvision's own downloaders).
"""

from __future__ import annotations

import gzip
import io
import math
import os
import pickle
import zlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from fastfair.sim.checkpoint import open_regular, read_regular_file
from fastfair.sim.data.arrays import partition_labels
from fastfair.sim.data.base import check_labels
from fastfair.sim.data.client_files import ClientFiles
from fastfair.sim.seeding import Stream, numpy_rng

#: name -> (torchvision folder, sample shape, classes)
LAYOUTS = {"mnist": ("MNIST", (1, 28, 28), 10), "fmnist": ("FashionMNIST", (1, 28, 28), 10),
           "cifar10": ("cifar-10-batches-py", (3, 32, 32), 10),
           "cifar100": ("cifar-100-python", (3, 32, 32), 100)}
_IDX = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
        "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
_CIFAR = {"cifar10": ({"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
                      "labels"),
          "cifar100": ({"train": ["train"], "test": ["test"]}, "fine_labels")}


_CHUNK = 1 << 26


def read_idx(path: str) -> np.ndarray:
    """An IDX file (big-endian header: two zero bytes, type 0x08 = uint8, rank, then the
    sizes) as a uint8 array; uncompressed files are memory-mapped, ``.gz`` ones decompressed.
    A file that is not a regular file, is cut short, or holds other than its header declares
    is refused with one ValueError naming it (before anything that large is allocated)."""
    try:
        with open_regular(path) as raw_file:
            f = gzip.GzipFile(fileobj=raw_file, mode="rb") if path.endswith(".gz") else raw_file
            magic = f.read(4)
            if len(magic) < 4 or magic[:2] != b"\0\0" or magic[2] != 0x08:
                raise ValueError(f"{path} is not an IDX file of uint8 (magic 00 00 08 rank)")
            sizes = f.read(4 * magic[3])
            if len(sizes) != 4 * magic[3]:
                raise ValueError(f"{path}: its header declares rank {magic[3]} but the file "
                                 "ends before the sizes")
            shape = tuple(int(d) for d in np.frombuffer(sizes, dtype=">u4"))
            expected = math.prod(shape)
            if f is raw_file:
                held = os.fstat(raw_file.fileno()).st_size - 4 - len(sizes)
                if held != expected:
                    raise ValueError(f"{path}: its header declares {list(shape)} ({expected} "
                                     f"bytes) but the file holds {held}")
                if expected == 0:
                    return np.zeros(shape, dtype=np.uint8)
                return np.memmap(raw_file, dtype=np.uint8, mode="r", offset=4 + len(sizes),
                                 shape=shape)
            chunks, held = [], 0
            while held <= expected:                  # never more than declared, plus a byte
                chunk = f.read(min(_CHUNK, expected + 1 - held))
                if not chunk:
                    break
                chunks.append(chunk)
                held += len(chunk)
            if held != expected:
                raise ValueError(f"{path}: its header declares {list(shape)} ({expected} "
                                 f"bytes) but the file holds "
                                 f"{held if held < expected else 'more'}")
            return np.frombuffer(b"".join(chunks), dtype=np.uint8).reshape(shape)
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path} cannot be read as IDX ({type(exc).__name__}: {exc}); it may "
                         "be truncated or corrupted") from None


class RefusedPickle(pickle.UnpicklingError, ValueError):
    """A CIFAR batch that asked for code (any global but NumPy's array builders)."""


class _ArraysOnly(pickle.Unpickler):
    """Builds dicts, lists, strings, numbers and NumPy arrays; any other global is refused."""

    def __init__(self, file, path: str, **kwargs) -> None:
        super().__init__(file, **kwargs)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in (("numpy.core.multiarray", "_reconstruct"),
                              ("numpy._core.multiarray", "_reconstruct")):
            return np.ndarray.__reduce__(np.zeros(0))[0]
        if (module, name) == ("numpy", "ndarray"):
            return np.ndarray
        if (module, name) == ("numpy", "dtype"):
            return np.dtype
        if (module, name) == ("_codecs", "encode"):
            return lambda text, encoding="utf-8": text.encode(encoding)
        raise RefusedPickle(f"{self.path}: refusing to load {module}.{name}: a CIFAR batch "
                            "holds arrays only")


#: label key of a CIFAR batch -> its number of classes
_CLASSES = {"labels": 10, "fine_labels": 100}


def read_cifar_batch(path: str, label_key: str,
                     num_classes: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """``(images [n, 3, 32, 32] uint8, labels [n] int64)`` of one CIFAR python batch, labels
    checked against ``[0, num_classes)`` (default: 10 for ``labels``, 100 for
    ``fine_labels``). Anything else (a truncated or foreign pickle, missing keys, labels that
    are no class, a pickle asking for code) is one ValueError naming the file."""
    classes = num_classes if num_classes is not None else _CLASSES.get(label_key)
    data = read_regular_file(path, "CIFAR batch")
    try:
        batch = _ArraysOnly(io.BytesIO(data), path, encoding="latin1").load()
    except RefusedPickle:
        raise
    except Exception as exc:  # a broken pickle fails in many ways; all mean the same here
        detail = str(exc)[:200] or ("it declares more than fits in memory"
                                    if isinstance(exc, MemoryError) else "no detail")
        raise ValueError(f"{path} is not a readable CIFAR python batch ({type(exc).__name__}: "
                         f"{detail}); it may be truncated or corrupted") from None
    finally:
        del data
    if not isinstance(batch, dict) or "data" not in batch or label_key not in batch:
        raise ValueError(f"{path} is not a CIFAR python batch: it needs a dict with 'data' and "
                         f"{label_key!r}")
    images = batch["data"]
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 2 \
            or images.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: 'data' must be uint8 [n, 3072]")
    try:
        labels = np.asarray(batch[label_key])
    except Exception:
        labels = np.zeros(0, dtype=object)
    if labels.ndim != 1 or labels.size != images.shape[0] or labels.dtype.kind not in "iuf":
        raise ValueError(f"{path}: {label_key!r} must hold one integer class per row of 'data' "
                         f"({images.shape[0]}); got {labels.dtype} {list(labels.shape)}")
    if labels.dtype.kind == "f":
        bad = ~np.isfinite(labels) | (labels != np.round(labels))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{path}: {label_key!r} must hold integer classes; got "
                             f"{labels[i]} at index {i}")
    if classes is not None:
        check_labels(labels, classes, path)
    return images.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _first(paths: List[str]) -> Optional[str]:
    return next((p for p in paths if os.path.exists(p)), None)


def find_files(name: str, data_dir: str) -> Dict[str, List[str]]:
    """The files of each split, or ValueError naming where they were looked for."""
    folder = LAYOUTS[name][0]
    found: Dict[str, List[str]] = {}
    if name in _CIFAR:
        names = _CIFAR[name][0]
        for base in (os.path.join(data_dir, folder), data_dir):
            # exists, not isfile: a named pipe in a file's place is refused when it is read
            if all(os.path.exists(os.path.join(base, f)) for s in names for f in names[s]):
                return {s: [os.path.join(base, f) for f in names[s]] for s in names}
        raise ValueError(f"{name}: no {folder}/ with {', '.join(names['train'] + names['test'])} "
                         f"in {data_dir}; pass --download or see docs/data.md")
    bases = [os.path.join(data_dir, folder, "raw"), os.path.join(data_dir, "raw"), data_dir]
    for split, pair in _IDX.items():
        paths = [_first([os.path.join(b, f + ext) for b in bases for ext in ("", ".gz")])
                 for f in pair]
        if None in paths:
            raise ValueError(f"{name}: no {' and '.join(pair)} (or .gz) in {bases[0]}; pass "
                             "--download or see docs/data.md")
        found[split] = paths  # type: ignore[assignment]  # no None in paths (checked above)
    return found


def download(name: str, data_dir: str) -> None:
    """Fetches ``name`` into ``data_dir`` with torchvision's own downloader (torchvision must
    import beside this torch)."""
    try:
        from torchvision import datasets as tv
    except Exception as exc:  # an absent or mismatched torchvision fails in several ways
        raise ValueError(f"--download uses torchvision's downloaders, which failed to import "
                         f"({type(exc).__name__}: {exc}); install the torchvision built for "
                         "your torch, or fetch the files as docs/data.md says") from None
    cls = {"mnist": tv.MNIST, "fmnist": tv.FashionMNIST, "cifar10": tv.CIFAR10,
           "cifar100": tv.CIFAR100}[name]
    for train in (True, False):
        cls(root=data_dir, train=train, download=True)


def match_test_split(train_parts: List[np.ndarray], train_labels: np.ndarray,
                     test_labels: np.ndarray, num_classes: int, seed: int) -> List[np.ndarray]:
    """Test indices per client following each client's training classes: the test samples of
    class c (in a seeded random order) go to the clients in proportion to their training
    samples of c, by largest remainders. Returns ``[K]`` sorted index arrays."""
    share = np.stack([np.bincount(train_labels[p], minlength=num_classes)
                      for p in train_parts]).astype(np.float64)          # [K, C]
    rng = numpy_rng(seed, Stream.VISION_TEST_SPLIT)
    out: List[List[np.ndarray]] = [[] for _ in train_parts]
    for c in range(num_classes):
        idx = rng.permutation(np.flatnonzero(test_labels == c))
        if share[:, c].sum() == 0 or idx.size == 0:
            continue
        exact = share[:, c] / share[:, c].sum() * idx.size
        quota = np.floor(exact).astype(np.int64)
        quota[np.argsort(quota - exact, kind="stable")[:idx.size - quota.sum()]] += 1
        for k, chunk in enumerate(np.split(idx, np.cumsum(quota)[:-1])):
            out[k].append(chunk)
    return [np.sort(np.concatenate(o)) if o else np.zeros(0, np.int64) for o in out]


class SplitArrays(ClientFiles):
    """Whole train and test arrays split across clients: client k's samples of ``split`` are
    the rows ``parts[split][k]`` of ``images[split]`` (``[n, *sample_shape]``) and
    ``labels[split]`` (``[n]`` int64).

    ``parts`` None: the training rows are split across ``clients`` by ``partition`` ('iid',
    'dirichlet' with ``alpha``, 'pathological' with ``classes_per_client``;
    :func:`fastfair.sim.data.arrays.partition_labels`) and the test rows follow each client's
    class mix (:func:`match_test_split`). ``kind``: how a client's rows become a batch
    (:class:`ClientFiles`)."""

    def __init__(self, images: Dict[str, np.ndarray], labels: Dict[str, np.ndarray],
                 sample_shape: Tuple[int, ...], num_classes: int, *,
                 clients: Optional[int] = None, partition: str = "dirichlet", alpha: float = 0.3,
                 classes_per_client: int = 2, seed: int = 0,
                 parts: Optional[Dict[str, List[np.ndarray]]] = None,
                 kind: str = "image") -> None:
        self.images, self.labels = images, labels
        if parts is None:
            if clients is None:
                raise ValueError("clients: give the number of clients to split the data across")
            train = partition_labels(labels["train"], clients, partition, seed=seed,
                                     alpha=alpha, classes_per_client=classes_per_client,
                                     stream=Stream.VISION_PARTITION)
            test = match_test_split(train, labels["train"], labels["test"], num_classes, seed)
            parts = {"train": train, "test": test}
        self.parts = parts
        super().__init__({s: np.array([len(p) for p in parts[s]]) for s in parts},
                         sample_shape, num_classes, kind=kind, cache_bytes=0)

    def _read(self, split: str, k: int) -> Tuple[np.ndarray, np.ndarray]:
        rows = self.parts[split][k]
        return np.asarray(self.images[split][rows]), self.labels[split][rows]


class VisionDataset(SplitArrays):
    """``name`` (mnist, fmnist, cifar10, cifar100) from ``data_dir``, split across ``clients``
    by ``partition`` ('iid', 'dirichlet' with ``alpha``, 'pathological' with
    ``classes_per_client``)."""

    def __init__(self, name: str, data_dir: str, clients: int, *, partition: str = "dirichlet",
                 alpha: float = 0.3, classes_per_client: int = 2, seed: int = 0,
                 download_missing: bool = False) -> None:
        if name not in LAYOUTS:
            raise ValueError(f"unknown vision data set {name!r}; choose from {', '.join(LAYOUTS)}")
        if download_missing:
            download(name, data_dir)
        files = find_files(name, data_dir)
        _, shape, classes = LAYOUTS[name]
        images: Dict[str, np.ndarray] = {}
        labels: Dict[str, np.ndarray] = {}
        for split, paths in files.items():
            if name in _CIFAR:
                pairs = [read_cifar_batch(p, _CIFAR[name][1], classes) for p in paths]
                images[split] = np.concatenate([p[0] for p in pairs])
                labels[split] = np.concatenate([p[1] for p in pairs])
            else:
                images[split], labels[split] = read_idx_pair(paths[0], paths[1], shape, classes,
                                                             name)
        super().__init__(images, labels, shape, classes, clients=clients, partition=partition,
                         alpha=alpha, classes_per_client=classes_per_client, seed=seed)


def read_idx_pair(images_path: str, labels_path: str, shape: Tuple[int, ...], classes: int,
                  name: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(images [n, *shape] uint8, labels [n] int64)`` of an IDX images file and its labels
    file (plain, memory-mapped, or ``.gz``), labels checked against ``[0, classes)``; ``name``
    (the data set) is named in the errors."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim < 1 or math.prod(images.shape[1:]) != math.prod(shape):
        raise ValueError(f"{images_path}: images of {list(images.shape[1:])}; {name} "
                         f"has {list(shape[1:])}")
    if labels.ndim != 1:
        raise ValueError(f"{labels_path}: labels must be a vector; the file holds "
                         f"{list(labels.shape)}")
    check_labels(labels, classes, labels_path)
    if len(images) != len(labels):
        raise ValueError(f"{images_path} holds {len(images)} images but "
                         f"{labels_path} {len(labels)} labels")
    return images.reshape((-1,) + shape), np.asarray(labels, dtype=np.int64)
