"""Every data set and model of the simulator by name: one registry per kind, filled where each
builder is defined and readable with NumPy alone; and the names of the availability processes
and the selection policies.

A data set's builder is registered with :func:`~fastfair.sim.registry.register_dataset` in
:mod:`fastfair.sim.data.catalog`, a model's with :func:`~fastfair.sim.registry.register_model`
in :mod:`fastfair.sim.models.catalog`; each table imports its catalog on its first lookup
(:class:`~fastfair._table.Table`), and the catalogs import their loaders and networks (and
torch) only when a builder runs, so the names cost a few milliseconds to read. The command
line's help, its listings and :class:`~fastfair.sim.config.SimulationConfig`'s checks read them
here.

.. code-block:: python

    from fastfair.sim.names import get_dataset, list_datasets, list_models

    list_datasets()                    # ['synthetic', 'grouped', 'digits', 'femnist', ...]
    get_dataset("femnist").family      # 'leaf'

Adding a data set (or a model) is one decorated builder in its catalog; nothing else lists the
names.
"""

from __future__ import annotations

from typing import Any, Optional

from fastfair._table import Table
from fastfair.sim.registry import (
    DATASETS,
    MODELS,
    DatasetSpec,
    ModelSpec,
    get_dataset,
    get_dataset_builder,
    get_dataset_counter,
    get_model,
    get_model_builder,
    list_datasets,
    list_models,
)

_R = "fastfair.sim.rounds.availability:"
#: Which clients can take part in a round: each availability process by name, its class
#: imported on first lookup (``AVAILABILITY`` of :mod:`fastfair.sim.rounds.availability`).
AVAILABILITY_PROCESSES: Table[Any] = Table("availability", targets={
    "uniform": _R + "UniformAvailability", "bernoulli": _R + "BernoulliAvailability",
    "ram": _R + "RandomAccessAvailability"})
#: Their names alone, in order, for the command line's choices.
AVAILABILITY = tuple(AVAILABILITY_PROCESSES)
#: How a device population's invited clients are kept: wait for all, over-select, or a
#: deadline (:mod:`fastfair.sim.population.selection`).
POLICIES = ("all", "overselect", "deadline")

__all__ = ["AVAILABILITY", "AVAILABILITY_PROCESSES", "DATASETS", "MODELS", "POLICIES",
           "DatasetSpec", "ModelSpec",
           "check_pair", "get_dataset", "get_dataset_builder", "get_dataset_counter",
           "get_model", "get_model_builder", "list_datasets", "list_models",
           "default_model_note"]


def check_pair(dataset: str, model: Optional[str]) -> None:
    """Raises ValueError when ``model`` (None: the data set's default) cannot take the samples
    of ``dataset``, naming the models that can."""
    spec = get_dataset(dataset)
    name = model or spec.default_model
    if spec.inputs is not None and spec.inputs not in get_model(name).inputs:
        fits = [m for m, inputs in MODELS.items() if spec.inputs in inputs]
        raise ValueError(f"model {name!r} cannot take {dataset}'s samples ({spec.inputs}); "
                         f"choose from {', '.join(fits)}")


def default_model_note(dataset: str, model: Optional[str]) -> Optional[str]:
    """The line a run on a data set read from files shows when it trains the data set's default
    model (``model`` None): ``"npz-clients: training the default model 'mlp' (choose one with
    --model)"``; None when the model was chosen or the data are generated."""
    spec = get_dataset(dataset)
    if model is not None or spec.family == "generated":
        return None
    return (f"{dataset}: training the default model {spec.default_model!r} (choose one with "
            "--model)")
