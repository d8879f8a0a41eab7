"""Every data set of the simulator, registered by name on its builder
(:func:`fastfair.sim.registry.register_dataset`): the generated ones (:mod:`.synthetic`,
:mod:`.grouped`, scikit-learn's digits in :mod:`fastfair.sim.data.arrays`) and those read
from files in their standard formats, LEAF JSON (:mod:`.leaf`), torchvision's layouts
(:mod:`.vision`), a folder of per-client ``.npz`` files (:mod:`.npz`), image files in class
folders (:mod:`.image_folder`) and UCI Adult (:mod:`.adult`). The builders import their
loaders (and torch) when they run, so the names cost nothing to list.

A builder takes the run's configuration (the fields of
:class:`~fastfair.sim.config.SimulationConfig` it reads) and returns a
:class:`~fastfair.sim.data.base.FederatedDataset`. Adding a data set is one decorated builder
here (its loader may live in a module of its own).

.. code-block:: python

    from fastfair.sim.data.catalog import open_files

    femnist = open_files("femnist", "leaf/data/femnist/data")   # all users, headers read only
    batch = femnist.client_data([0, 7, 42])                      # read now: x [N, 1, 28, 28]
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Protocol, Tuple

from fastfair.sim.registry import (
    DATASETS,
    MODELS,
    DatasetSpec,
    get_dataset,
    get_dataset_builder,
    get_dataset_counter,
    register_dataset,
)

if TYPE_CHECKING:
    from fastfair.sim.config import SimulationConfig
    from fastfair.sim.data.base import FederatedDataset

__all__ = ["DATASETS", "MODELS", "DatasetSpec", "FileOptions", "build_dataset", "check_files",
           "count_clients", "open_files"]


class FileConfig(Protocol):
    """What a data set read from files is opened with: the fields of
    :class:`~fastfair.sim.config.SimulationConfig` (or :class:`FileOptions`) of that name."""

    dataset: str
    data_dir: Optional[str]
    clients: Optional[int]
    seed: int
    partition: str
    dirichlet_alpha: float
    classes_per_client: int
    download: bool
    adult_features: str


@dataclass
class FileOptions:
    """The options :func:`open_files` opens a data set with, under the names of
    :class:`~fastfair.sim.config.SimulationConfig`'s fields (``clients`` None: every user of a
    data set with its own clients)."""

    dataset: str
    data_dir: Optional[str]
    clients: Optional[int]
    seed: int = 0
    partition: str = "dirichlet"
    dirichlet_alpha: float = 0.3
    classes_per_client: int = 2
    download: bool = False
    adult_features: str = "all"


# ------------------------------------------------------------------------- generated
@register_dataset(DatasetSpec("synthetic", "generated", "logreg", False, "features",
                              "Synthetic(alpha, beta), generated per client",
                              options=("synthetic_alpha", "synthetic_beta", "max_samples")))
def _synthetic(config: SimulationConfig) -> FederatedDataset:
    from fastfair.sim.data.synthetic import SyntheticDataset

    return SyntheticDataset(config.clients, config.synthetic_alpha, config.synthetic_beta,
                            seed=config.seed, max_samples=config.max_samples)


@register_dataset(DatasetSpec("grouped", "generated", "logreg", False, "features",
                              "latent groups of power-law sizes, each a shift of a common "
                              "model",
                              options=("max_samples", "groups", "group_power", "group_shift")))
def _grouped(config: SimulationConfig) -> FederatedDataset:
    from fastfair.sim.data.grouped import GroupedSyntheticDataset

    return GroupedSyntheticDataset(config.clients, num_groups=config.groups,
                                   group_power=config.group_power, shift=config.group_shift,
                                   max_samples=config.max_samples, seed=config.seed)


@register_dataset(DatasetSpec("digits", "generated", "logreg", False, "features",
                              "scikit-learn's digits, split by --partition",
                              options=("partition", "group_by_class")))
def _digits(config: SimulationConfig) -> FederatedDataset:
    from fastfair.sim.data.arrays import digits_dataset

    return digits_dataset(config.clients, config.partition, seed=config.seed,
                          alpha=config.dirichlet_alpha,
                          classes_per_client=config.classes_per_client)


# ------------------------------------------------------------------------- read from files
#: The settings a data set read from files reads: its folder; split across clients by
#: ``--partition``, the scheme and the grouping by class; torchvision's, the downloader too.
_FILES = ("data_dir",)
_SPLIT_FILES = ("data_dir", "partition", "group_by_class")
_VISION = _SPLIT_FILES + ("download",)
_OPENED: Dict[Tuple[Any, ...], FederatedDataset] = {}


def _opened(options: FileConfig, patterns: Tuple[str, ...],
            open_dataset: Callable[[str], FederatedDataset]) -> FederatedDataset:
    """``open_dataset(data_dir)``, reused by later calls with the same options while the files
    of ``patterns`` (under ``data_dir``) keep their paths, sizes and modification times, so the
    rules of an experiment share one data set and the clients it has read. With ``download``, a
    ``data_dir`` not there yet is made first."""
    data_dir = options.data_dir
    if options.download and data_dir is not None and not os.path.lexists(data_dir):
        os.makedirs(data_dir)  # the downloader fills it
    if data_dir is None or not os.path.isdir(data_dir):
        raise ValueError(f"data_dir {data_dir!r} is not a folder")
    paths = sorted(p for pattern in patterns for p in glob.glob(os.path.join(data_dir, pattern)))
    signature = tuple((p, s.st_size, s.st_mtime_ns) for p in paths for s in [os.stat(p)])
    key = (options.dataset, os.path.realpath(data_dir), options.clients, options.seed,
           options.partition, options.dirichlet_alpha, options.classes_per_client,
           options.adult_features, signature)
    if key not in _OPENED:
        _OPENED[key] = open_dataset(data_dir)
    return _OPENED[key]


def _leaf_users(data_dir: str, partition: str) -> int:
    from fastfair.sim.data.leaf import count_users

    return count_users(data_dir)


@register_dataset(
    DatasetSpec("femnist", "leaf", "femnist-cnn", True, "image",
                "LEAF FEMNIST: 28x28 characters of 62 classes, one client per writer",
                options=_FILES),
    DatasetSpec("shakespeare", "leaf", "char-lstm", True, "next-token",
                "LEAF Shakespeare: next character of 80-character lines, one client per role",
                options=_FILES),
    DatasetSpec("celeba", "leaf", "celeba-cnn", True, "image",
                "LEAF CelebA: smiling or not from 84x84 faces, one client per celebrity",
                options=_FILES),
    DatasetSpec("sent140", "leaf", "sent140-lstm", True, "tokens",
                "LEAF Sent140: tweet sentiment from 25 words, one client per user", options=_FILES),
    count=_leaf_users)
def _leaf(config: FileConfig) -> FederatedDataset:
    from fastfair.sim.data.leaf import LeafDataset

    return _opened(config, ("train/*.json", "test/*.json", "*.json"),
                   lambda data_dir: LeafDataset(config.dataset, data_dir, config.clients,
                                                seed=config.seed))


@register_dataset(
    DatasetSpec("mnist", "vision", "femnist-cnn", False, "image",
                "MNIST (torchvision's IDX files), split by --partition", options=_VISION),
    DatasetSpec("fmnist", "vision", "femnist-cnn", False, "image",
                "Fashion-MNIST (torchvision's IDX files), split by --partition", options=_VISION),
    DatasetSpec("cifar10", "vision", "cifar-cnn", False, "image",
                "CIFAR-10 (torchvision's python pickles), split by --partition", options=_VISION),
    DatasetSpec("cifar100", "vision", "resnet8", False, "image",
                "CIFAR-100, fine labels (torchvision's python pickles), split by --partition",
                options=_VISION))
def _vision(config: FileConfig) -> FederatedDataset:
    from fastfair.sim.data.vision import VisionDataset

    clients = _split_clients(config)
    return _opened(config, ("*", "*/*", "*/raw/*"), lambda data_dir: VisionDataset(
        config.dataset, data_dir, clients, partition=config.partition,
        alpha=config.dirichlet_alpha, classes_per_client=config.classes_per_client,
        seed=config.seed, download_missing=config.download))


def _npz_files(data_dir: str, partition: str) -> int:
    from fastfair.sim.data.npz import npz_paths

    return len(npz_paths(data_dir))


@register_dataset(DatasetSpec("npz-clients", "npz", "mlp", True, None,
                              "a folder of one .npz per client (x, y, optional x_test, y_test)",
                              options=_FILES),
                  count=_npz_files)
def _npz(config: FileConfig) -> FederatedDataset:
    from fastfair.sim.data.npz import NpzClients

    return _opened(config, ("*.npz",),
                   lambda data_dir: NpzClients(data_dir, config.clients, seed=config.seed))


def _split_clients(config: FileConfig) -> int:
    """``config.clients``, which a data set split across clients requires."""
    if config.clients is None:
        raise ValueError(f"{config.dataset} is split across clients: give their number")
    return config.clients


@register_dataset(DatasetSpec("image-folder", "images", "cifar-cnn", False, "image",
                              "your images in class subfolders (train/<class>/*, "
                              "test/<class>/*), split by --partition",
                              options=_SPLIT_FILES))
def _image_folder(config: FileConfig) -> FederatedDataset:
    from fastfair.sim.data.image_folder import ImageFolder

    clients = _split_clients(config)
    return _opened(config, ("*/*", "*/*/*"), lambda data_dir: ImageFolder(
        data_dir, clients, partition=config.partition, alpha=config.dirichlet_alpha,
        classes_per_client=config.classes_per_client, seed=config.seed))


def _adult_clients(data_dir: str, partition: str) -> int:
    from fastfair.sim.data.adult import count_adult_clients

    return count_adult_clients(data_dir, partition)


@register_dataset(DatasetSpec("adult", "table", "logreg", False, "features",
                              "UCI Adult: income over 50K from census columns (one-hot; "
                              "--adult-features categorical: the q-FFL authors' 99), split by "
                              "--partition (column:education=Doctorate: AFL's two clients)",
                              options=_SPLIT_FILES + ("adult_features",),
                              column_partitions=True),
                  count=_adult_clients)
def _adult(config: FileConfig) -> FederatedDataset:
    from fastfair.sim.data.adult import AdultDataset

    return _opened(config, ("adult.*",), lambda data_dir: AdultDataset(
        data_dir, config.clients, partition=config.partition, alpha=config.dirichlet_alpha,
        classes_per_client=config.classes_per_client, seed=config.seed,
        features=config.adult_features))


# ------------------------------------------------------------------------- by name
def open_files(name: str, data_dir: str, clients: Optional[int] = None, *, seed: int = 0,
               partition: str = "dirichlet", dirichlet_alpha: float = 0.3,
               classes_per_client: int = 2, download: bool = False,
               adult_features: str = "all") -> FederatedDataset:
    """Data set ``name`` read from ``data_dir``.

    LEAF and ``npz-clients``: ``clients`` of the data set's users (all when None, else a seeded
    random subset). Vision data sets and ``image-folder``: the training set split across
    ``clients`` (required) by ``partition``; ``adult``: by ``partition``, whose ``column:...``
    forms fix the number of clients (``clients`` None or that number), encoded as
    ``adult_features`` says (``FEATURES`` of :mod:`fastfair.sim.data.adult`). ``download`` fetches
    missing files with torchvision's downloader. An open
    data set is reused by later calls with the same arguments while its files are unchanged,
    so the rules of an experiment share one and the clients it has read.
    """
    spec = DATASETS.get(name)
    if spec is None or spec.family == "generated":
        files = [n for n, s in DATASETS.items() if s.family != "generated"]
        raise ValueError(f"unknown data set {name!r} on disk; choose from {', '.join(files)}")
    options = FileOptions(name, data_dir, clients, seed, partition, dirichlet_alpha,
                          classes_per_client, download, adult_features)
    dataset: FederatedDataset = get_dataset_builder(name)(options)
    return dataset


def count_clients(name: str, data_dir: str, partition: str = "dirichlet") -> int:
    """The number of users of a data set with its own clients (LEAF: reads the train files'
    headers; ``npz-clients``: counts the files), or of the clients ``adult``'s ``column:...``
    ``partition`` makes."""
    return get_dataset_counter(name)(data_dir, partition)


def check_files(config: SimulationConfig) -> None:
    """Refuses, before anything runs, a configuration whose data cannot be there: a data set
    with its own clients and fewer users than ``config.clients``, vision files missing
    without ``download``, an image folder without images, or Adult's files missing or a
    ``column:...`` partition of them making another number of clients than
    ``config.clients``."""
    spec = get_dataset(config.dataset)
    if spec.natural_split:
        users = count_clients(config.dataset, str(config.data_dir))
        if config.clients > users:
            raise ValueError(f"clients ({config.clients}) exceeds the {users} users of "
                             f"{config.dataset} in {config.data_dir}")
    elif spec.family == "vision" and not config.download:
        from fastfair.sim.data.vision import find_files
        find_files(config.dataset, str(config.data_dir))
    elif spec.family == "images":
        from fastfair.sim.data.image_folder import list_images
        list_images(str(config.data_dir))
    elif spec.family == "table":
        from fastfair.sim.data.adult import COLUMN_PARTITION
        from fastfair.sim.data.adult import find_files as find_adult
        find_adult(str(config.data_dir))
        if str(config.partition).startswith(COLUMN_PARTITION):
            made = count_clients(config.dataset, str(config.data_dir), config.partition)
            if made != config.clients:
                raise ValueError(f"partition {config.partition!r} makes {made} clients of "
                                 f"{config.dataset}; clients (--clients) is {config.clients}: "
                                 f"set it to {made}")


def build_dataset(config: SimulationConfig) -> FederatedDataset:
    """The data set a :class:`~fastfair.sim.config.SimulationConfig` names (its registered
    builder), with the clients' groups of ``config.groups_file`` (a CSV of ``client,group``)
    or, with ``config.group_by_class``, their most frequent training label."""
    from fastfair.sim.data.base import dominant_classes, read_groups_file, with_groups

    dataset: FederatedDataset = get_dataset_builder(config.dataset)(config)
    groups_file = getattr(config, "groups_file", None)
    if groups_file is not None:
        dataset = with_groups(dataset, read_groups_file(groups_file, dataset), groups_file)
    elif getattr(config, "group_by_class", False):
        dataset = with_groups(dataset, dominant_classes(dataset), "dominant classes")
    return dataset
