"""Every data set of the simulator by name (:data:`DATASETS`): the generated ones of
:mod:`fastfair.sim.data.base` and :mod:`fastfair.sim.data.grouped` (built by
:func:`fastfair.sim.data.catalog.build_dataset`, which dispatches every name) and those read from
files in their standard formats, LEAF JSON (:mod:`~fastfair.sim.data.leaf`), torchvision's
layouts (:mod:`~fastfair.sim.data.vision`), a folder of per-client ``.npz`` files
(:mod:`~fastfair.sim.data.npz`), image files in class folders
(:mod:`~fastfair.sim.data.image_folder`) and UCI Adult (:mod:`~fastfair.sim.data.adult`).

.. code-block:: python

    from fastfair.sim.data.catalog import open_files

    femnist = open_files("femnist", "leaf/data/femnist/data")   # all users, headers read only
    batch = femnist.client_data([0, 7, 42])                      # read now: x [N, 1, 28, 28]
"""

from __future__ import annotations

import glob
import os
from typing import Any, Dict, Optional, Tuple

from fastfair.sim.data.arrays import digits_dataset
from fastfair.sim.data.base import (
    FederatedDataset,
    dominant_classes,
    read_groups_file,
    with_groups,
)
from fastfair.sim.data.grouped import GroupedSyntheticDataset
from fastfair.sim.data.registry import DATASETS, MODELS, DatasetSpec
from fastfair.sim.data.synthetic import SyntheticDataset

__all__ = ["DATASETS", "MODELS", "DatasetSpec", "check_files", "count_clients", "open_files"]

_OPENED: Dict[Tuple[Any, ...], FederatedDataset] = {}


def open_files(name: str, data_dir: str, clients: Optional[int] = None, *, seed: int = 0,
               partition: str = "dirichlet", dirichlet_alpha: float = 0.3,
               classes_per_client: int = 2, download: bool = False) -> FederatedDataset:
    """Data set ``name`` read from ``data_dir``.

    LEAF and ``npz-clients``: ``clients`` of the data set's users (all when None, else a seeded
    random subset). Vision data sets and ``image-folder``: the training set split across
    ``clients`` (required) by ``partition``; ``adult``: by ``partition``, whose ``column:...``
    forms fix the number of clients (``clients`` None or that number). ``download`` fetches
    missing files with torchvision's downloader. An open
    data set is reused by later calls with the same arguments while its files are unchanged
    (:func:`_signature`), so the rules of an experiment share one and the clients it has read.
    """
    spec = DATASETS.get(name)
    if spec is None or spec.family == "generated":
        files = [n for n, s in DATASETS.items() if s.family != "generated"]
        raise ValueError(f"unknown data set {name!r} on disk; choose from {', '.join(files)}")
    if not os.path.isdir(data_dir):
        raise ValueError(f"data_dir {data_dir!r} is not a folder")
    key = (name, os.path.realpath(data_dir), clients, seed, partition, dirichlet_alpha,
           classes_per_client, _signature(spec.family, data_dir))
    if key not in _OPENED:
        if spec.family == "leaf":
            from fastfair.sim.data.leaf import LeafDataset
            _OPENED[key] = LeafDataset(name, data_dir, clients, seed=seed)
        elif spec.family == "npz":
            from fastfair.sim.data.npz import NpzClients
            _OPENED[key] = NpzClients(data_dir, clients, seed=seed)
        elif spec.family == "table":
            from fastfair.sim.data.adult import AdultDataset
            _OPENED[key] = AdultDataset(data_dir, clients, partition=partition,
                                        alpha=dirichlet_alpha,
                                        classes_per_client=classes_per_client, seed=seed)
        elif spec.family == "images":
            from fastfair.sim.data.image_folder import ImageFolder
            if clients is None:
                raise ValueError(f"{name} is split across clients: give their number")
            _OPENED[key] = ImageFolder(data_dir, clients, partition=partition,
                                       alpha=dirichlet_alpha,
                                       classes_per_client=classes_per_client, seed=seed)
        else:
            from fastfair.sim.data.vision import VisionDataset
            if clients is None:
                raise ValueError(f"{name} is split across clients: give their number")
            _OPENED[key] = VisionDataset(name, data_dir, clients, partition=partition,
                                         alpha=dirichlet_alpha,
                                         classes_per_client=classes_per_client, seed=seed,
                                         download_missing=download)
    return _OPENED[key]


def _signature(family: str, data_dir: str) -> Tuple[Tuple[str, int, int], ...]:
    """Path, size and modification time of the files a data set opens with (LEAF's JSON, the
    .npz files, whatever sits in a vision data set's folders)."""
    patterns = {"leaf": ["train/*.json", "test/*.json", "*.json"], "npz": ["*.npz"],
                "vision": ["*", "*/*", "*/raw/*"], "table": ["adult.*"],
                "images": ["*/*", "*/*/*"]}[family]
    paths = sorted(p for pattern in patterns for p in glob.glob(os.path.join(data_dir, pattern)))
    return tuple((p, s.st_size, s.st_mtime_ns) for p in paths for s in [os.stat(p)])


def count_clients(name: str, data_dir: str, partition: str = "dirichlet") -> int:
    """The number of users of a data set with its own clients (LEAF: reads the train files'
    headers; ``npz-clients``: counts the files), or of the clients ``adult``'s ``column:...``
    ``partition`` makes."""
    family = DATASETS[name].family
    if family == "table" and partition.startswith("column:"):
        from fastfair.sim.data.adult import count_adult_clients
        return count_adult_clients(data_dir, partition)
    if family == "leaf":
        from fastfair.sim.data.leaf import count_users
        return count_users(data_dir)
    if family == "npz":
        from fastfair.sim.data.npz import npz_paths
        return len(npz_paths(data_dir))
    raise ValueError(f"{name} has no clients of its own: it is split into --clients")


def check_files(config: Any) -> None:
    """Refuses, before anything runs, a configuration whose data cannot be there: a data set
    with its own clients and fewer users than ``config.clients``, vision files missing
    without ``download``, an image folder without images, or Adult's files missing."""
    spec = DATASETS[config.dataset]
    if spec.natural_split:
        users = count_clients(config.dataset, config.data_dir)
        if config.clients > users:
            raise ValueError(f"clients ({config.clients}) exceeds the {users} users of "
                             f"{config.dataset} in {config.data_dir}")
    elif spec.family == "vision" and not config.download:
        from fastfair.sim.data.vision import find_files
        find_files(config.dataset, config.data_dir)
    elif spec.family == "images":
        from fastfair.sim.data.image_folder import list_images
        list_images(config.data_dir)
    elif spec.family == "table":
        from fastfair.sim.data.adult import find_files as find_adult
        find_adult(config.data_dir)


def build_dataset(config: Any) -> FederatedDataset:
    """The data set a :class:`~fastfair.sim.config.SimulationConfig` names: generated
    (``synthetic``, ``grouped``, ``digits``) or read from ``config.data_dir``, with the clients'
    groups of ``config.groups_file`` (a CSV of ``client,group``) or, with
    ``config.group_by_class``, their most frequent training label."""
    dataset = _build_dataset(config)
    if getattr(config, "groups_file", None) is not None:
        dataset = with_groups(dataset, read_groups_file(config.groups_file, dataset),
                              config.groups_file)
    elif getattr(config, "group_by_class", False):
        dataset = with_groups(dataset, dominant_classes(dataset), "dominant classes")
    return dataset


def _build_dataset(config: Any) -> FederatedDataset:
    if DATASETS[config.dataset].family != "generated":
        return open_files(config.dataset, config.data_dir, config.clients, seed=config.seed,
                          partition=config.partition, dirichlet_alpha=config.dirichlet_alpha,
                          classes_per_client=config.classes_per_client, download=config.download)
    if config.dataset == "synthetic":
        return SyntheticDataset(config.clients, config.synthetic_alpha, config.synthetic_beta,
                                seed=config.seed, max_samples=config.max_samples)
    if config.dataset == "grouped":
        return GroupedSyntheticDataset(config.clients, num_groups=config.groups,
                                       group_power=config.group_power, shift=config.group_shift,
                                       max_samples=config.max_samples, seed=config.seed)
    return digits_dataset(config.clients, config.partition, seed=config.seed,
                          alpha=config.dirichlet_alpha,
                          classes_per_client=config.classes_per_client)
