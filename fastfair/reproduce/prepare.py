"""The client splits of the papers' tables that the simulator's partition schemes do not
express, built from the real files of a data set into an in-memory
:class:`~fastfair.sim.data.arrays.ArrayDataset` (nothing is written to disk).

``mnist-powerlaw``
    the FedProx / q-FFL MNIST split the FairAvg paper's Table 2 uses: K clients,
    client k holding the digits ``k mod 10`` and ``(k + 1) mod 10``, each of its
    two digits ``5 + floor((n_c - 5 * slots_c) * s / sum(s))`` training images
    with log-normal shares ``s ~ LogNormal(0, sigma)`` (a power law in the
    client sizes); its test images follow its digits in proportion
    (:func:`~fastfair.sim.data.vision.match_test_split`).
``mnist-rare``
    the restricted-availability split of the Fed-CVaR-Avg paper's MNIST runs:
    the digits outside ``rare_classes`` split evenly over the first
    ``K - rare_clients`` clients, the rare digits evenly over the last
    ``rare_clients`` (the least available under the ``ram`` availability,
    whose clients come most available first); test images likewise, so the
    pooled accuracy is the full test set's and group 1 (the rare clients)
    holds every rare digit.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from fastfair._options import OptionSpec, check_options, signature_options
from fastfair.sim.data.arrays import ArrayDataset
from fastfair.sim.data.vision import find_files, match_test_split, read_idx
from fastfair.sim.seeding import Stream, numpy_rng


def check_split(name: str, options: Dict[str, Any]) -> None:
    """Raises ValueError naming ``name`` unless it is a split of :data:`SPLITS` and
    ``options`` are among its options with the right types."""
    if name not in SPLITS:
        raise ValueError(f"prepare {name!r} is not a split; choose from {', '.join(SPLITS)}")
    check_options(f"prepare {name!r}", options, split_options(name))


def build_split(name: str, data_dir: str, options: Dict[str, Any]) -> ArrayDataset:
    """The clients of split ``name`` (:data:`SPLITS`) from the files in ``data_dir``.

    Parameters
    ----------
    name
        ``"mnist-powerlaw"`` or ``"mnist-rare"`` (the module's table).
    data_dir
        The folder of the MNIST IDX files (gzipped or not, in torchvision's ``MNIST/raw``
        layout or plain).
    options
        The split's options; missing ones take their defaults.

    Returns
    -------
    ArrayDataset
        ``K`` clients of images ``[n_k, 1, 28, 28]`` in [0, 1] with their own test images;
        ``mnist-rare`` also gives each client its group (0 frequent, 1 rare).
    """
    check_split(name, options)
    return SPLITS[name](data_dir, **options)


def _mnist(data_dir: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(train images [60000, 1, 28, 28] float32 in [0, 1], train labels, test images,
    test labels)``."""
    files = find_files("mnist", data_dir)
    arrays = []
    for split in ("train", "test"):
        images, labels = (read_idx(p) for p in files[split])
        arrays += [np.asarray(images, dtype=np.float32)[:, None] / 255.0,
                   np.asarray(labels, dtype=np.int64)]
    return arrays[0], arrays[1], arrays[2], arrays[3]


def powerlaw_parts(labels: np.ndarray, clients: int, sigma: float, seed: int,
                   num_classes: int = 10) -> List[np.ndarray]:
    r"""Training indices per client of the ``mnist-powerlaw`` split.

    Client k holds classes :math:`k \bmod C` and :math:`(k + 1) \bmod C`. Class c's
    :math:`S_c` slots (two per client holding it) get
    :math:`5 + \lfloor (n_c - 5 S_c)\, s_j / \sum_j s_j \rfloor` of its ``n_c`` samples
    (shuffled), :math:`s_j \sim \mathrm{LogNormal}(0, \sigma)`.

    Parameters
    ----------
    labels
        ``[n]`` the training labels.
    clients
        K, at least ``num_classes``, at most ``n_c / 5`` for every class c.
    sigma
        The log-normal's spread (FedProx's generator: 2).
    seed
        The seed of the shuffles and shares.

    Returns
    -------
    list of np.ndarray
        ``[K]`` sorted index arrays.
    """
    if clients < num_classes:
        raise ValueError(f"prepare mnist-powerlaw: clients must be >= {num_classes}; "
                         f"got {clients}")
    if sigma <= 0:
        raise ValueError(f"prepare mnist-powerlaw: sigma must be > 0; got {sigma}")
    rng = numpy_rng(seed, Stream.DIGITS_PARTITION)
    holders = [[(k, j) for k in range(clients) for j in (0, 1) if (k + j) % num_classes == c]
               for c in range(num_classes)]
    parts: List[List[np.ndarray]] = [[] for _ in range(clients)]
    for c in range(num_classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        slots = len(holders[c])
        spare = idx.size - 5 * slots
        if spare < 0:
            raise ValueError(f"prepare mnist-powerlaw: class {c} has {idx.size} samples, "
                             f"fewer than 5 for each of its {slots} slots; use fewer clients")
        share = rng.lognormal(0.0, sigma, slots)
        counts = 5 + np.floor(spare * share / share.sum()).astype(np.int64)
        ends = np.cumsum(counts)
        for (k, _), stop, n in zip(holders[c], ends, counts):
            parts[k].append(idx[stop - n:stop])
    return [np.sort(np.concatenate(p)) for p in parts]


def rare_parts(labels: np.ndarray, clients: int, rare_clients: int, rare_classes: Sequence[int],
               seed: int, stream: Stream = Stream.DIGITS_PARTITION) -> List[np.ndarray]:
    """Indices per client of the ``mnist-rare`` split: the samples of the classes outside
    ``rare_classes`` shuffled and cut evenly over clients ``0 .. K - r - 1``, those of
    ``rare_classes`` over the last ``r = rare_clients`` (``np.array_split``: sizes differ by
    at most one). Returns ``[K]`` sorted index arrays."""
    if not 1 <= rare_clients < clients:
        raise ValueError(f"prepare mnist-rare: rare_clients must be in [1, clients); got "
                         f"{rare_clients} of {clients}")
    rare = np.isin(labels, np.asarray(list(rare_classes), dtype=np.int64))
    if not rare.any() or rare.all():
        raise ValueError(f"prepare mnist-rare: rare_classes {list(rare_classes)} must name "
                         "some classes of the data set, not all")
    rng = numpy_rng(seed, stream)
    common = np.array_split(rng.permutation(np.flatnonzero(~rare)), clients - rare_clients)
    scarce = np.array_split(rng.permutation(np.flatnonzero(rare)), rare_clients)
    return [np.sort(p) for p in common + scarce]


def _powerlaw(data_dir: str, clients: int = 1000, sigma: float = 2.0,
              seed: int = 0) -> ArrayDataset:
    x, y, x_test, y_test = _mnist(data_dir)
    parts = powerlaw_parts(y, clients, sigma, seed)
    tests = match_test_split(parts, y, y_test, 10, seed)
    return ArrayDataset([(x[p], y[p]) for p in parts],
                        [(x_test[p], y_test[p]) for p in tests], num_classes=10)


def _rare(data_dir: str, clients: int = 30, rare_clients: int = 3,
          rare_classes: Sequence[int] = (8, 9), seed: int = 0) -> ArrayDataset:
    x, y, x_test, y_test = _mnist(data_dir)
    parts = rare_parts(y, clients, rare_clients, rare_classes, seed)
    tests = rare_parts(y_test, clients, rare_clients, rare_classes, seed,
                       Stream.VISION_TEST_SPLIT)
    groups = np.array([0] * (clients - rare_clients) + [1] * rare_clients)
    return ArrayDataset([(x[p], y[p]) for p in parts],
                        [(x_test[p], y_test[p]) for p in tests], num_classes=10, groups=groups)


#: Every split by name; its options (with their types and defaults) are its builder's keyword
#: arguments (:func:`split_options`).
SPLITS: Dict[str, Callable[..., ArrayDataset]] = {"mnist-powerlaw": _powerlaw,
                                                  "mnist-rare": _rare}


def split_options(name: str) -> Dict[str, OptionSpec]:
    """The options of split ``name`` (:data:`SPLITS`) with their types and defaults."""
    return signature_options(SPLITS[name], skip=("data_dir",))


def data_folder(root: str, name: str) -> str:
    """The folder of data set ``name`` under ``root`` (``root/name`` when it exists, else
    ``root`` itself, which may hold the files directly)."""
    sub = os.path.join(root, name)
    return sub if os.path.isdir(sub) else root
