"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.sim.data.arrays import ArrayDataset as ArrayDataset
from fastfair.sim.data.arrays import digits_dataset as digits_dataset
from fastfair.sim.data.arrays import partition_labels as partition_labels
from fastfair.sim.data.base import ClientBatch as ClientBatch
from fastfair.sim.data.base import FederatedDataset as FederatedDataset
from fastfair.sim.data.catalog import build_dataset as build_dataset
from fastfair.sim.data.catalog import check_files as check_files
from fastfair.sim.data.catalog import count_clients as count_clients
from fastfair.sim.data.catalog import open_files as open_files
from fastfair.sim.data.grouped import GroupedSyntheticDataset as GroupedSyntheticDataset
from fastfair.sim.data.hub import from_partitions as from_partitions
from fastfair.sim.data.synthetic import SyntheticDataset as SyntheticDataset
from fastfair.sim.data.validation import ValidationSplit as ValidationSplit
from fastfair.sim.names import DATASETS as DATASETS
from fastfair.sim.names import DatasetSpec as DatasetSpec
