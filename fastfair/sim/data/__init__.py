"""Every data set of the simulator by name (:data:`DATASETS`, :func:`build_dataset`): the
generated ones (:mod:`.synthetic`, :mod:`.grouped`, scikit-learn's digits in :mod:`.arrays`),
your own arrays (:class:`ArrayDataset`, any sample shape; :func:`partition_labels` splits one
array across clients IID, by Dirichlet(alpha) or pathologically), and those read from files in
their standard formats (:func:`open_files`): LEAF JSON (:mod:`.leaf`), torchvision's layouts
(:mod:`.vision`) and a folder of per-client ``.npz`` files (:mod:`.npz`). :mod:`.base` says what
every data set is.

.. code-block:: python

    from fastfair.sim.data import open_files

    femnist = open_files("femnist", "leaf/data/femnist/data")   # all users, headers read only
    batch = femnist.client_data([0, 7, 42])                      # read now: x [N, 1, 28, 28]
"""

from fastfair.sim.data.arrays import ArrayDataset, digits_dataset, partition_labels
from fastfair.sim.data.base import ClientBatch, FederatedDataset
from fastfair.sim.data.catalog import build_dataset, check_files, count_clients, open_files
from fastfair.sim.data.grouped import GroupedSyntheticDataset
from fastfair.sim.data.registry import DATASETS, DatasetSpec
from fastfair.sim.data.synthetic import SyntheticDataset
from fastfair.sim.data.validation import ValidationSplit

__all__ = ["ArrayDataset", "ClientBatch", "DATASETS", "DatasetSpec", "FederatedDataset",
           "GroupedSyntheticDataset", "SyntheticDataset", "ValidationSplit", "build_dataset",
           "check_files", "count_clients", "digits_dataset", "open_files", "partition_labels"]
