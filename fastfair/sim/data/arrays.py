"""Your own arrays as a federated data set (:class:`ArrayDataset`: features of any shape or token
ids), the label partitions that split one array across clients (:func:`partition_labels`), and
scikit-learn's digits split that way."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from fastfair.sim.data.base import (
    ClientBatch,
    FederatedDataset,
    check_finite,
    check_groups,
    resident_split,
    split_sizes,
)
from fastfair.sim.data.partitions import PARTITIONS as SCHEMES
from fastfair.sim.seeding import Stream, numpy_rng


def _concat(xs: List[torch.Tensor], ys: List[torch.Tensor], dataset: "ArrayDataset"
            ) -> ClientBatch:
    offsets = np.zeros(len(ys) + 1, dtype=np.int64)
    np.cumsum([len(y) for y in ys], out=offsets[1:])
    if not xs:
        dtype = torch.float32 if dataset.vocab_size is None else torch.int64
        return ClientBatch(torch.empty((0, *dataset.sample_shape), dtype=dtype),
                           torch.empty((0, *dataset.label_shape), dtype=torch.int64), offsets)
    return ClientBatch(torch.cat(xs), torch.cat(ys), offsets)


class ArrayDataset(FederatedDataset):
    """A user's own per-client arrays, of any sample shape, as a federated data set.

    Parameters
    ----------
    train
        One ``(x_k, y_k)`` per client k (NumPy arrays, CPU torch tensors or lists).
        ``x_k [n_k, *sample_shape]``: float features of any shape (vectors ``[n_k, F]``, images
        ``[n_k, C, H, W]``), or integer token ids (``[n_k, T]``). ``y_k [n_k]``: integer class
        labels, or ``[n_k, *label_shape]`` for a label per position (``[n_k, T]``, next-token
        prediction). Every client has the same sample shape, kind of ``x`` and label shape.
    test
        Each client's test arrays, likewise. None: each client's ``train`` arrays are split
        80/20 in their given order (shuffle them first if that order is not random).
    num_classes
        Labels are in ``[0, num_classes)``; default one more than the largest label.
    vocab_size
        Token ids are in ``[0, vocab_size)``; default one more than the largest id. Only for
        integer ``x``.
    groups
        ``[K]`` the group of each client (integers >= 0: a region, a device class): the runs
        report per-group accuracy and may be fair over groups (``fair_over="groups"``).

    As an ``npz-clients`` folder reads its files, float (and bool) ``x`` are features, held as
    float32 and required finite, and integer ``x`` are token ids, held as int64 for a
    sequence model (``vocab_size`` set): cast integer features, e.g. uint8 pixels, to float
    first (``x / 255.0``). ``num_features`` is the product of ``sample_shape``; ``logreg`` and
    ``mlp`` take features of any shape, and a :class:`~fastfair.sim.models.module.ModuleModel`
    any module that maps ``[B, *sample_shape]`` to logits ``[B, *label_shape, num_classes]``.

    Given to an experiment, a sweep or a simulation in place of ``config.dataset``, the data set
    sets the run's number of clients: leave ``config.clients`` at its default, or set it to
    ``num_clients``. Your own single arrays ``x [n, ...]``, ``y [n]`` split across clients by
    :func:`partition_labels`:

    .. code-block:: python

        parts = partition_labels(y, 20, "dirichlet", seed=0, alpha=0.3)
        dataset = ArrayDataset([(x[p], y[p]) for p in parts])

    Raises
    ------
    ValueError
        Naming the client (``train[k]``, ``test[k]``): shapes that disagree, a client without
        training samples, NaN or inf features, labels or ids out of range.
    TypeError
        An item of ``train`` or ``test`` that is not one client's ``(x, y)`` pair (the arrays
        of every sample, ``ArrayDataset(x, y)``, are split with :func:`partition_labels`
        first); ``x`` or ``y`` not numbers (labels must be integers; integer-valued floats are
        taken).
    """

    def __init__(self, train: Sequence[Tuple[object, object]],
                 test: Optional[Sequence[Tuple[object, object]]] = None,
                 num_classes: Optional[int] = None, *,
                 vocab_size: Optional[int] = None, groups: Optional[object] = None) -> None:
        if len(train) == 0:
            raise ValueError("train must hold at least one client's (x, y)")
        for name, given in (("train", train), ("test", test if test is not None else ())):
            for k, item in enumerate(given):
                if not (isinstance(item, (tuple, list)) and len(item) == 2):
                    raise TypeError(
                        f"{name}[{k}] must be client {k}'s pair (x, y); got "
                        f"{type(item).__name__}. Arrays x [n, ...], y [n] of every sample are "
                        "split across clients first: ArrayDataset([(x[p], y[p]) for p in "
                        "partition_labels(y, num_clients, 'iid', seed=0)])")
        if test is not None and len(test) != len(train):
            raise ValueError(f"test has {len(test)} clients but train has {len(train)}")
        pairs = [self._pair(x, y, f"train[{k}]") for k, (x, y) in enumerate(train)]
        if test is None:
            split = [split_sizes(np.array([len(y)]))[0][0] for _, y in pairs]
            test_pairs = [(x[n:], y[n:]) for (x, y), n in zip(pairs, split)]
            pairs = [(x[:n], y[:n]) for (x, y), n in zip(pairs, split)]
        else:
            test_pairs = [self._pair(x, y, f"test[{k}]") for k, (x, y) in enumerate(test)]
        for k, (_, y) in enumerate(pairs):
            if len(y) == 0:
                raise ValueError(f"train[{k}] (client {k}) has no training samples; remove it "
                                 "or give it samples")
        every = pairs + test_pairs
        kinds = {(tuple(x.shape[1:]), x.dtype == torch.int64, tuple(y.shape[1:]))
                 for x, y in every}
        if len(kinds) != 1:
            got = sorted({f"x {['n', *x.shape[1:]]} {'ids' if x.dtype == torch.int64 else 'float'}"
                          f" with y {['n', *y.shape[1:]]}" for x, y in every})
            raise ValueError("every client needs the same sample shape (the same number of "
                             "features for vectors), kind of x (float features or integer "
                             f"token ids) and label shape; got {'; '.join(got)}")
        (shape, tokens, label_shape), = kinds
        labels = torch.cat([y.reshape(-1) for _, y in every])
        names = ([f"train[{k}]" for k in range(len(pairs))]
                 + [f"test[{k}]" for k in range(len(test_pairs))])
        if labels.numel() and labels.min() < 0:
            k = next(k for k, (_, y) in enumerate(every) if y.numel() and y.min() < 0)
            raise ValueError(f"{names[k]}: labels must be >= 0; its y holds "
                             f"{int(every[k][1].min())}")
        self.num_classes = int(num_classes or (int(labels.max()) + 1 if labels.numel() else 1))
        if labels.numel() and labels.max() >= self.num_classes:
            k = next(k for k, (_, y) in enumerate(every)
                     if y.numel() and y.max() >= self.num_classes)
            raise ValueError(f"{names[k]}: labels must be < num_classes={self.num_classes}; its "
                             f"y holds {int(every[k][1].max())}")
        self.vocab_size = self._vocab(every, vocab_size) if tokens else None
        if vocab_size is not None and not tokens:
            raise ValueError("vocab_size is for token ids (integer x); x holds float features: "
                             "drop vocab_size")
        self.num_clients = len(pairs)
        self.sample_shape = shape
        self.label_shape = label_shape
        self.num_features = int(np.prod(shape))
        self._data = {"train": pairs, "test": test_pairs}
        self._train_counts = np.array([len(y) for _, y in pairs], dtype=np.int64)
        if groups is not None:
            self.group_ids, self.num_groups = check_groups(groups, self.num_clients, "groups")

    @staticmethod
    def _vocab(pairs: List[Tuple[torch.Tensor, torch.Tensor]], vocab_size: Optional[int]) -> int:
        """The vocabulary of token ids ``x``: ``vocab_size``, checked, or the largest id + 1."""
        top = max((int(x.max()) for x, _ in pairs if x.numel()), default=0)
        if vocab_size is None:
            return top + 1
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size must be an integer >= 1; got {vocab_size!r}")
        if top >= vocab_size:
            raise ValueError(f"token ids must be < vocab_size={vocab_size}; x holds {top}")
        return vocab_size

    @staticmethod
    def _pair(x, y, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """Client ``name``'s (``"train[k]"``) arrays: float32 features or int64 token ids x,
        int64 y; labels must be integers (integer-valued floats are accepted, never rounded or
        truncated), features finite (as float32: 1e39 is inf), token ids >= 0."""
        array = np.asarray(x)
        if array.dtype == np.uint8 and array.ndim >= 3:
            # [n, C, H, W] or [n, H, W] bytes are pixels far more often than token ids.
            raise ValueError(f"{name}: x is uint8 of shape {tuple(array.shape)}, which looks like "
                             "image pixels: pass float features, e.g. x.astype(np.float32) / 255 "
                             "(integer x are token ids of a sequence model: pass them as int64)")
        if array.dtype.kind in "iu":
            x = torch.as_tensor(array.astype(np.int64, copy=False))
            if x.numel() and x.min() < 0:
                raise ValueError(f"{name}: x holds token ids (integers), which must be >= 0; "
                                 f"got {int(x.min())} (cast float features to float)")
        elif array.dtype.kind in "fb":
            with np.errstate(over="ignore"):
                x = torch.as_tensor(array.astype(np.float32, copy=False))
            if x.ndim >= 1 and x.shape[0]:
                check_finite(x.numpy(), name, "x")
        else:
            raise TypeError(f"{name}: x must hold float features or integer token ids; got "
                            f"dtype {array.dtype}")
        labels = np.asarray(y)
        if labels.dtype.kind == "f":
            bad = ~np.isfinite(labels) | (labels != np.round(labels))
            if bad.any():
                pos = np.unravel_index(int(np.flatnonzero(bad)[0]), labels.shape)
                raise ValueError(f"{name}: y must hold integer class labels; got "
                                 f"{labels[pos]} at position {pos[0] if len(pos) == 1 else pos}")
        elif labels.dtype.kind not in "biu":
            raise TypeError(f"{name}: y must hold integer class labels; got dtype {labels.dtype}")
        y = torch.as_tensor(labels).long()
        if x.ndim < 2 or y.ndim < 1 or x.shape[0] != y.shape[0]:
            raise ValueError(f"{name} must be x [n, F] and y [n] (or x [n, *sample_shape] and "
                             f"y [n, *label_shape]) with the same n; got {tuple(x.shape)} and "
                             f"{tuple(y.shape)} (one feature per sample: x [n, 1])")
        return x, y

    def num_samples(self, ids: np.ndarray) -> np.ndarray:
        return self._train_counts[self._check_ids(ids)]

    def client_data(self, ids: np.ndarray, split: str = "train",
                    device: Optional[torch.device] = None) -> ClientBatch:
        ids = self._check_ids(ids)
        if split not in self._data:
            raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
        if device is not None and torch.device(device).type != "cpu":
            resident = resident_split(
                self, split, torch.device(device),
                lambda: sum(x.numel() * x.element_size() + y.numel() * y.element_size()
                            for x, y in self._data[split]),
                lambda: self._whole(split))
            if resident is not None:
                return resident.gather(ids)
        pairs = [self._data[split][k] for k in ids.tolist()]
        batch = _concat([p[0] for p in pairs], [p[1] for p in pairs], self)
        return batch if device is None else batch.to(device)

    def _whole(self, split: str) -> Tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """Every client's ``split`` samples concatenated, and the clients' counts."""
        pairs = self._data[split]
        whole = _concat([x for x, _ in pairs], [y for _, y in pairs], self)
        return whole.x, whole.y, whole.counts




def partition_labels(labels: np.ndarray, num_clients: int, scheme: str, *, seed: int,
                     alpha: float = 0.5, classes_per_client: int = 2,
                     stream: Stream = Stream.DIGITS_PARTITION) -> List[np.ndarray]:
    """Splits ``n`` labelled samples across ``num_clients`` clients under a partition scheme:
    which samples each client holds, for your own arrays (``ArrayDataset([(x[p], y[p]) for p
    in parts])``) as for digits and the vision data sets (``--partition``).

    Parameters
    ----------
    labels
        ``[n]`` integer class labels (NumPy array or list).
    num_clients
        K, the number of clients, in ``[1, n // 2]``.
    scheme
        ``'iid'``, ``'dirichlet'`` or ``'pathological'`` (``SCHEMES``):

        - ``'iid'``: a random permutation of the ``n`` indices cut into K parts of
          ``floor(n / K)`` or ``ceil(n / K)`` samples.
        - ``'dirichlet'``: for each class c (in ascending order), its ``n_c`` indices in random
          order and shares ``p_c ~ Dirichlet(alpha * 1_K)``; client k takes the indices from
          ``floor(n_c * (p_c1 + ... + p_c(k-1)))`` to ``floor(n_c * (p_c1 + ... + p_ck))``,
          about ``p_ck * n_c`` samples of class c. Then each client with fewer than two
          samples takes them, one at a time, from the client that holds the most.
        - ``'pathological'``: the indices sorted by label (stably) and cut into
          ``S = K * classes_per_client`` contiguous shards of ``floor(n / S)`` or
          ``ceil(n / S)``; a random permutation of the shards gives each client
          ``classes_per_client`` of them, so a client holds at most about that many classes
          (a shard may straddle two).
    seed
        The seed of the draws (with ``stream``): the same arguments give the same partition.
    alpha
        Dirichlet concentration, > 0: small (0.05) gives each client few classes, large (100)
        nearly the overall class mix.
    classes_per_client
        Shards per client under ``'pathological'``, >= 1.
    stream
        The seeding stream (:class:`~fastfair.sim.seeding.Stream`) the draws come from.

    Returns
    -------
    list of np.ndarray
        K int64 arrays of sample indices, each sorted; they are disjoint and together hold
        every index of ``range(n)``. Under ``'iid'`` and ``'dirichlet'`` every client holds at
        least two samples.

    Raises
    ------
    ValueError
        ``num_clients`` outside ``[1, n // 2]``, an unknown ``scheme``, ``alpha <= 0``,
        ``classes_per_client < 1``, or ``labels`` not ``[n]``.
    TypeError
        ``labels`` not integers.

    Examples
    --------
    >>> y = np.repeat(np.arange(10), 100)                       # 1000 samples, 10 classes
    >>> parts = partition_labels(y, 20, "dirichlet", seed=0, alpha=0.3)
    >>> len(parts), sum(len(p) for p in parts)
    (20, 1000)
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be [n] class labels, one per sample; got shape "
                         f"{list(labels.shape)}")
    if labels.dtype.kind not in "iu":
        raise TypeError(f"labels must be integer class labels; got dtype {labels.dtype} (cast "
                        "them: labels.astype(int))")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be 'iid', 'dirichlet' or 'pathological'; got {scheme!r}")
    n = labels.shape[0]
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) \
            or not 1 <= num_clients <= n // 2:
        raise ValueError(f"num_clients must be in [1, {n // 2}] for {n} samples; got "
                         f"{num_clients!r}")
    rng = numpy_rng(seed, stream)
    if scheme == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(n), num_clients)]
    if scheme == "pathological":
        if classes_per_client < 1:
            raise ValueError(f"classes_per_client must be >= 1; got {classes_per_client}")
        order = np.argsort(labels, kind="stable")
        shards = np.array_split(order, num_clients * classes_per_client)
        pick = rng.permutation(len(shards)).reshape(num_clients, classes_per_client)
        return [np.sort(np.concatenate([shards[s] for s in row])) for row in pick]
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0; got {alpha}")
    parts: List[List[int]] = [[] for _ in range(num_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        share = rng.dirichlet(np.full(num_clients, alpha))
        cuts = (np.cumsum(share)[:-1] * len(idx)).astype(np.int64)
        for k, chunk in enumerate(np.split(idx, cuts)):
            parts[k].extend(chunk.tolist())
    # Clients left with fewer than two samples take them from the largest client.
    for k in range(num_clients):
        while len(parts[k]) < 2:
            donor = max(range(num_clients), key=lambda j: len(parts[j]))
            parts[k].append(parts[donor].pop())
    return [np.sort(np.array(p, dtype=np.int64)) for p in parts]


def digits_dataset(num_clients: int = 50, scheme: str = "dirichlet", *, seed: int = 0,
                   alpha: float = 0.5, classes_per_client: int = 2) -> ArrayDataset:
    """scikit-learn's bundled handwritten digits (1797 samples, 64 features scaled to [0, 1],
    10 classes), split across clients by :func:`partition_labels`, each client 80/20
    train/test in a seeded random order."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    parts = partition_labels(y, num_clients, scheme, seed=seed, alpha=alpha,
                             classes_per_client=classes_per_client)
    rng = numpy_rng(seed, Stream.DIGITS_ORDER)
    shuffled = [rng.permutation(p) for p in parts]
    return ArrayDataset([(x[p], y[p]) for p in shuffled], num_classes=10)
