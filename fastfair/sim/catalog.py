"""Every data set by the name a configuration gives (``--dataset``): the generated ones built
here, those read from files opened through :mod:`fastfair.sim.datasets` (whose registry,
:data:`fastfair.sim.datasets.DATASETS`, lists them all)."""

from __future__ import annotations

from typing import Any

from fastfair.sim.data import FederatedDataset, SyntheticDataset, digits_dataset
from fastfair.sim.datasets import DATASETS, open_files
from fastfair.sim.grouped import GroupedSyntheticDataset


def build_dataset(config: Any) -> FederatedDataset:
    """The data set a :class:`~fastfair.sim.config.SimulationConfig` names: generated
    (``synthetic``, ``grouped``, ``digits``) or read from ``config.data_dir``."""
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
                          alpha=config.dirichlet_alpha, classes_per_client=config.classes_per_client)
