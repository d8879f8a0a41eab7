"""The registries of the simulator's data sets and models, filled where each builder is defined:
:func:`register_dataset` and :func:`register_model` put a builder and its :class:`DatasetSpec` or
:class:`ModelSpec` here. Each table (:class:`~fastfair._table.Table`) imports the catalog that
registers every built-in one (:mod:`fastfair.sim.data.catalog`,
:mod:`fastfair.sim.models.catalog`) on its first lookup, so it answers in full whatever was
imported first. Plain data: importing this costs nothing.

.. code-block:: python

    from fastfair.sim.registry import DatasetSpec, register_dataset

    @register_dataset(DatasetSpec("my-data", "generated", "logreg", False, "features",
                                  "what it is, in one line"))
    def _my_data(config):
        from my_package import MyFederatedDataset   # imported when the data set is built

        return MyFederatedDataset(config.clients, seed=config.seed)
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, TypeVar

from fastfair._table import Table

Builder = TypeVar("Builder", bound=Callable[..., Any])


class DatasetSpec(NamedTuple):
    """A data set: ``family`` is ``generated`` (synthetic, grouped, digits), ``leaf`` (LEAF JSON),
    ``vision`` (torchvision's layouts, split across ``clients`` by a partition scheme),
    ``npz`` (one file per client), ``images`` (image files in class folders) or ``table``
    (UCI Adult's CSV files); ``natural_split``: the clients are the data set's users;
    ``inputs``: what its samples are (``features``, ``image``, ``tokens`` with one label,
    ``next-token`` with a label per position; None: known once the files are read);
    ``options``: the fields of :class:`~fastfair.sim.data.settings.DataSettings` its builder
    reads (others set to non-defaults are refused); ``column_partitions``: ``--partition`` may
    also be ``column:...`` (a client per value of a column)."""

    name: str
    family: str
    default_model: str
    natural_split: bool
    inputs: Optional[str]
    summary: str
    options: Tuple[str, ...] = ()
    column_partitions: bool = False


class ModelSpec(NamedTuple):
    """A model: ``inputs``, the kinds of samples it takes (those of :class:`DatasetSpec`);
    ``eval_rows``, the samples per evaluation forward pass of a network (None: a flat model,
    which chooses its own); ``summary``, one line for listings."""

    name: str
    inputs: Tuple[str, ...]
    eval_rows: Optional[int]
    summary: str


#: Every data set by its public name (``--dataset``), in registration order; filled from
#: :mod:`fastfair.sim.data.catalog` on first lookup.
DATASETS: Table[DatasetSpec] = Table("dataset", fill=("fastfair.sim.data.catalog",))
#: Every model by its public name (``--model``) with the inputs it takes, in registration order;
#: filled from :mod:`fastfair.sim.models.catalog` on first lookup.
MODELS: Table[Tuple[str, ...]] = Table("model", fill=("fastfair.sim.models.catalog",))
# What registration stores beside each name (written with it, read after a lookup fills it).
_DATASET_BUILDERS: Dict[str, Callable[..., Any]] = {}
_DATASET_COUNTERS: Dict[str, Callable[[str, str], int]] = {}
_MODEL_SPECS: Dict[str, ModelSpec] = {}
_MODEL_BUILDERS: Dict[str, Callable[..., Any]] = {}


def register_dataset(*specs: DatasetSpec,
                     count: Optional[Callable[[str, str], int]] = None
                     ) -> Callable[[Builder], Builder]:
    """Registers the decorated function as the builder of each data set of ``specs``, in
    their order (one builder may serve several data sets: the LEAF ones share one).

    The builder takes a :class:`~fastfair.sim.config.SimulationConfig` (or any object with the
    fields it reads) whose ``dataset`` is one of the names and returns a
    :class:`~fastfair.sim.data.base.FederatedDataset`.

    Parameters
    ----------
    specs
        The data sets' :class:`DatasetSpec`; each ``default_model`` must be a registered model
        when the data set is used.
    count
        For data sets with their own clients: ``count(data_dir, partition)``, the number of
        users on disk, read cheaply (headers), or of the clients a ``partition`` that fixes
        them makes (``adult``'s ``column:...``); None otherwise.

    Returns
    -------
    decorator
        Returns the builder unchanged.
    """
    def register(build: Builder) -> Builder:
        for spec in specs:
            DATASETS.add(spec.name, spec)
            _DATASET_BUILDERS[spec.name] = build
            if count is not None:
                _DATASET_COUNTERS[spec.name] = count
        return build

    return register


def register_model(spec: ModelSpec) -> Callable[[Builder], Builder]:
    """Registers the decorated function as the builder of the model ``spec`` describes.

    The builder takes ``(dataset, hidden)``, a
    :class:`~fastfair.sim.data.base.FederatedDataset` and the MLP width, and returns either a
    :class:`~fastfair.sim.models.flat.FlatModel` or a ``torch.nn.Module`` for the data set's
    sample shape, classes and vocabulary; :func:`fastfair.sim.models.catalog.build_model` draws a
    module's weights from the run's seed and trains it as a
    :class:`~fastfair.sim.models.module.ModuleModel` that evaluates ``spec.eval_rows`` samples
    per forward pass.

    Returns
    -------
    decorator
        Returns the builder unchanged.
    """
    def register(build: Builder) -> Builder:
        MODELS.add(spec.name, tuple(spec.inputs))
        _MODEL_SPECS[spec.name] = spec
        _MODEL_BUILDERS[spec.name] = build
        return build

    return register


def list_datasets() -> List[str]:
    """The names of every registered data set, in registration order."""
    return list(DATASETS)


def list_models() -> List[str]:
    """The names of every registered model, in registration order."""
    return list(MODELS)


def get_dataset(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of data set ``name`` (ValueError listing the names if
    unknown)."""
    DATASETS.check(name)
    return DATASETS[name]


def get_model(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of model ``name`` (ValueError listing the names if unknown)."""
    MODELS.check(name)
    return _MODEL_SPECS[name]


def get_dataset_builder(name: str) -> Callable[..., Any]:
    """The registered builder of data set ``name`` (:func:`register_dataset`)."""
    get_dataset(name)
    return _DATASET_BUILDERS[name]


def get_dataset_counter(name: str) -> Callable[[str, str], int]:
    """``count(data_dir, partition)`` of a data set with its own clients, or whose partitions
    may fix them (ValueError for one split into ``--clients``)."""
    get_dataset(name)
    if name not in _DATASET_COUNTERS:
        raise ValueError(f"{name} has no clients of its own: it is split into --clients")
    return _DATASET_COUNTERS[name]


def get_model_builder(name: str) -> Callable[..., Any]:
    """The registered builder of model ``name`` (:func:`register_model`)."""
    get_model(name)
    return _MODEL_BUILDERS[name]
