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

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
