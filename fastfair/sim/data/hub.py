"""Client data from the partitions users keep in data hubs: a Hugging Face ``datasets.Dataset``
per client, as Flower Datasets (``flwr_datasets.FederatedDataset.load_partition``) or
``Dataset.shard`` / ``train_test_split`` give them, or any mapping of column names to arrays.

.. code-block:: python

    from flwr_datasets import FederatedDataset
    from fastfair.sim.data.hub import from_partitions

    fds = FederatedDataset(dataset="ylecun/mnist", partitioners={"train": 100})
    parts = [fds.load_partition(k) for k in range(100)]
    data = from_partitions(parts, x="image", y="label", num_classes=10)
    # Experiment(config, dataset=data, ...) / Sweep(..., dataset=data)

Nothing here imports ``datasets`` or ``flwr_datasets``: a partition only needs to answer
``partition[column]`` (after ``with_format("numpy")`` where it has that method).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from fastfair.sim.data.arrays import ArrayDataset


def pixels(x: np.ndarray) -> np.ndarray:
    """The default transform of :func:`from_partitions`: integer arrays of images (8-bit
    pixels) as float32 in [0, 1] and channels first (``[n, H, W]`` -> ``[n, 1, H, W]``,
    ``[n, H, W, C]`` with C of 1, 3 or 4 -> ``[n, C, H, W]``); anything else as it is."""
    if np.issubdtype(x.dtype, np.integer) and x.ndim >= 3:
        x = x.astype(np.float32) / 255.0
        if x.ndim == 3:
            return x[:, None]
        if x.ndim == 4 and x.shape[-1] in (1, 3, 4):
            return np.ascontiguousarray(np.moveaxis(x, -1, 1))
    return x


def _columns(partition: Any, x: str, y: str,
             transform: Optional[Callable[[np.ndarray], np.ndarray]], where: str):
    names = list(getattr(partition, "column_names", None) or partition.keys())
    for name in (x, y):
        if name not in names:
            raise ValueError(f"{where} has no column {name!r}: pass x= and y= among its "
                             f"columns {names}")
    table = partition.with_format("numpy") if hasattr(partition, "with_format") else partition
    features = table[x]
    features = np.stack(features) if isinstance(features, list) else np.asarray(features)
    if transform is not None:
        features = transform(features)
    return features, np.asarray(table[y])


def from_partitions(train: Sequence[Any], test: Optional[Sequence[Any]] = None, *,
                    x: str = "image", y: str = "label", num_classes: Optional[int] = None,
                    transform: Optional[Callable[[np.ndarray], np.ndarray]] = pixels,
                    groups: Optional[object] = None) -> ArrayDataset:
    """The simulator's client data from one partition per client.

    Parameters
    ----------
    train
        ``K`` partitions, client k's training samples: Hugging Face ``Dataset`` objects (a
        Flower Datasets partition is one) or mappings of column names to arrays.
    test
        ``K`` partitions of the clients' test samples; None: each training partition is split
        80/20 in its order (:class:`~fastfair.sim.data.ArrayDataset`).
    x, y
        The feature and label columns (``"image"``/``"label"`` for MNIST, CIFAR-10; ``"img"``
        in ``uoft-cs/cifar10``; ``"character"`` in FEMNIST's).
    num_classes
        Labels are in ``[0, num_classes)``; default one more than the largest label.
    transform
        Applied to each partition's ``x`` array ``[n_k, ...]``; default :func:`pixels` (8-bit
        images to float in [0, 1], channels first). None keeps the arrays as they are (integer
        ``x`` are then token ids).
    groups
        ``[K]`` each client's group, as :class:`~fastfair.sim.data.ArrayDataset` takes it.

    Returns
    -------
    ArrayDataset
        Client k holds ``train[k]`` (and ``test[k]``); give it to an experiment, a sweep or a
        simulation as ``dataset=``.

    Raises
    ------
    ValueError
        A partition without the column ``x`` or ``y`` (naming the partition and its columns),
        or what :class:`~fastfair.sim.data.ArrayDataset` refuses, naming the client.
    """
    pairs = [_columns(p, x, y, transform, f"train[{k}]") for k, p in enumerate(train)]
    tests = (None if test is None else
             [_columns(p, x, y, transform, f"test[{k}]") for k, p in enumerate(test)])
    return ArrayDataset(pairs, tests, num_classes, groups=groups)
