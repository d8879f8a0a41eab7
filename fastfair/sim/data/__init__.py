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

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.data.arrays import (  # noqa: F401
        ArrayDataset,
        digits_dataset,
        partition_labels,
    )
    from fastfair.sim.data.base import ClientBatch, FederatedDataset  # noqa: F401
    from fastfair.sim.data.catalog import (  # noqa: F401
        build_dataset,
        check_files,
        count_clients,
        open_files,
    )
    from fastfair.sim.data.grouped import GroupedSyntheticDataset  # noqa: F401
    from fastfair.sim.data.hub import from_partitions  # noqa: F401
    from fastfair.sim.data.synthetic import SyntheticDataset  # noqa: F401
    from fastfair.sim.data.validation import ValidationSplit  # noqa: F401
    from fastfair.sim.names import DATASETS, DatasetSpec  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.data.arrays": ("ArrayDataset", "digits_dataset", "partition_labels"),
    "fastfair.sim.data.base": ("ClientBatch", "FederatedDataset"),
    "fastfair.sim.data.catalog": ("build_dataset", "check_files", "count_clients", "open_files"),
    "fastfair.sim.data.grouped": ("GroupedSyntheticDataset",),
    "fastfair.sim.data.hub": ("from_partitions",),
    "fastfair.sim.data.synthetic": ("SyntheticDataset",),
    "fastfair.sim.data.validation": ("ValidationSplit",),
    "fastfair.sim.names": ("DATASETS", "DatasetSpec"),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
