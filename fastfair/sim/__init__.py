"""Cross-device federated simulation: data sets that cost nothing until a client is sampled,
batched local training of thousands of clients at once, fairness metrics, and experiments that
run several rules on identical data, client samples and seeds (:class:`Experiment`), and sweeps
of rules x seeds x hyperparameter grids as one batched program with their statistics
(:class:`Sweep`).

The sub-packages are the layers, each importing only those before it:

- top-level modules: :mod:`~fastfair.sim.config` (every option), :mod:`~fastfair.sim.seeding`
  (every random stream), :mod:`~fastfair.sim.distributed`, :mod:`~fastfair.sim.process`
  (threads, allocator), :mod:`~fastfair.sim.checkpoint` (safe state files),
  :mod:`~fastfair.sim.products` (affine products of m models);
- :mod:`~fastfair.sim.data`: every data set by name;
- :mod:`~fastfair.sim.models`: flat models, any ``nn.Module``, the papers' networks;
- :mod:`~fastfair.sim.training`: a cohort's local training and evaluation;
- :mod:`~fastfair.sim.reporting`: metrics, statistics, output files, round callbacks;
- :mod:`~fastfair.sim.rounds`: the round runners (rules, FedEvg, SuPerFed) and what they build;
- :mod:`~fastfair.sim.experiments`: experiments and sweeps, their run folders and checkpoints.
"""

from fastfair.sim.config import SimulationConfig
from fastfair.sim.data import (
    ArrayDataset,
    ClientBatch,
    FederatedDataset,
    SyntheticDataset,
    digits_dataset,
)
from fastfair.sim.distributed import Distributed
from fastfair.sim.experiments import (
    Experiment,
    ExperimentResult,
    Sweep,
    SweepResult,
    load_run,
)
from fastfair.sim.models import MLP, LogisticRegression, ModuleModel, make_model
from fastfair.sim.reporting import (
    CSVLogger,
    LoggingCallback,
    RoundCallback,
    SweepRun,
    TensorBoardLogger,
    WandbLogger,
    fairness_metrics,
)
from fastfair.sim.rounds import FedEvgSimulation, Simulation, SuperFedSimulation, make_runner
from fastfair.sim.training import LocalTrainingConfig, evaluate_clients, train_clients

__all__ = [
    "ArrayDataset", "CSVLogger", "ClientBatch", "Distributed", "Experiment", "ExperimentResult",
    "FedEvgSimulation", "FederatedDataset", "LocalTrainingConfig", "LoggingCallback",
    "LogisticRegression", "MLP", "ModuleModel", "RoundCallback", "Simulation",
    "SimulationConfig", "SuperFedSimulation", "Sweep", "SweepResult", "SweepRun",
    "SyntheticDataset", "TensorBoardLogger", "WandbLogger", "digits_dataset",
    "evaluate_clients", "fairness_metrics", "load_run", "make_model", "make_runner",
    "train_clients",
]
