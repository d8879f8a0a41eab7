"""Cross-device federated simulation: data sets that cost nothing until a client is sampled,
batched local training of thousands of clients at once, fairness metrics, and experiments that
run several rules on identical data, client samples and seeds (:class:`Experiment`), and sweeps
of rules x seeds x hyperparameter grids as one batched program with their statistics
(:class:`Sweep`). The public names below load on first use, so that ``fastfair --help`` and the
option checks import neither torch nor the training code.

The sub-packages are the layers, each importing only those before it:

- top-level modules: :mod:`~fastfair.sim.registry` and :mod:`~fastfair.sim.names` (every data
  set and model by name, with NumPy alone), :mod:`~fastfair.sim.config` (every option),
  :mod:`~fastfair.sim.seeding` (every random stream), :mod:`~fastfair.sim.distributed`,
  :mod:`~fastfair.sim.process` (threads, allocator), :mod:`~fastfair.sim.checkpoint` (safe
  state files), :mod:`~fastfair.sim.products` (affine products of m models);
- :mod:`~fastfair.sim.data`: every data set by name;
- :mod:`~fastfair.sim.models`: flat models, any ``nn.Module``, the papers' networks;
- :mod:`~fastfair.sim.training`: a cohort's local training and evaluation;
- :mod:`~fastfair.sim.reporting`: metrics, statistics, output files, round callbacks;
- :mod:`~fastfair.sim.population`: device populations and selection on a virtual clock;
- :mod:`~fastfair.sim.rounds`: the round runners (rules, FedEvg, SuPerFed) and what they build;
- :mod:`~fastfair.sim.experiments`: experiments and sweeps, their run folders and checkpoints.
"""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.config import SimulationConfig  # noqa: F401
    from fastfair.sim.data.arrays import ArrayDataset, digits_dataset  # noqa: F401
    from fastfair.sim.data.base import ClientBatch, FederatedDataset  # noqa: F401
    from fastfair.sim.data.synthetic import SyntheticDataset  # noqa: F401
    from fastfair.sim.distributed import Distributed  # noqa: F401
    from fastfair.sim.experiments.experiment import Experiment, ExperimentResult  # noqa: F401
    from fastfair.sim.experiments.loading import load_run  # noqa: F401
    from fastfair.sim.experiments.sweep import Sweep  # noqa: F401
    from fastfair.sim.experiments.sweep_result import SweepResult  # noqa: F401
    from fastfair.sim.models.flat import MLP, LogisticRegression, make_model  # noqa: F401
    from fastfair.sim.models.module import ModuleModel  # noqa: F401
    from fastfair.sim.reporting.callbacks import (  # noqa: F401
        CSVLogger,
        LoggingCallback,
        RoundCallback,
        TensorBoardLogger,
        WandbLogger,
    )
    from fastfair.sim.reporting.metrics import fairness_metrics  # noqa: F401
    from fastfair.sim.reporting.stats import SweepRun  # noqa: F401
    from fastfair.sim.rounds.ditto import DittoSimulation  # noqa: F401
    from fastfair.sim.rounds.engine import Simulation  # noqa: F401
    from fastfair.sim.rounds.fedevg import FedEvgSimulation  # noqa: F401
    from fastfair.sim.rounds.registry import make_runner  # noqa: F401
    from fastfair.sim.rounds.superfed import SuperFedSimulation  # noqa: F401
    from fastfair.sim.training.evaluate import evaluate_clients  # noqa: F401
    from fastfair.sim.training.local import train_clients  # noqa: F401
    from fastfair.sim.training.schedule import LocalTrainingConfig  # noqa: F401

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.config": ("SimulationConfig",),
    "fastfair.sim.data.arrays": ("ArrayDataset", "digits_dataset"),
    "fastfair.sim.data.base": ("ClientBatch", "FederatedDataset"),
    "fastfair.sim.data.synthetic": ("SyntheticDataset",),
    "fastfair.sim.distributed": ("Distributed",),
    "fastfair.sim.experiments.experiment": ("Experiment", "ExperimentResult"),
    "fastfair.sim.experiments.loading": ("load_run",),
    "fastfair.sim.experiments.sweep": ("Sweep",),
    "fastfair.sim.experiments.sweep_result": ("SweepResult",),
    "fastfair.sim.models.flat": ("MLP", "LogisticRegression", "make_model"),
    "fastfair.sim.models.module": ("ModuleModel",),
    "fastfair.sim.reporting.callbacks": (
        "CSVLogger", "LoggingCallback", "RoundCallback", "TensorBoardLogger", "WandbLogger"),
    "fastfair.sim.reporting.metrics": ("fairness_metrics",),
    "fastfair.sim.reporting.stats": ("SweepRun",),
    "fastfair.sim.rounds.ditto": ("DittoSimulation",),
    "fastfair.sim.rounds.engine": ("Simulation",),
    "fastfair.sim.rounds.fedevg": ("FedEvgSimulation",),
    "fastfair.sim.rounds.registry": ("make_runner",),
    "fastfair.sim.rounds.superfed": ("SuperFedSimulation",),
    "fastfair.sim.training.evaluate": ("evaluate_clients",),
    "fastfair.sim.training.local": ("train_clients",),
    "fastfair.sim.training.schedule": ("LocalTrainingConfig",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
