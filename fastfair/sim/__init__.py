"""Cross-device federated simulation: data sets that cost nothing until a client is sampled,
batched local training of thousands of clients at once, fairness metrics, and experiments that
run several rules on identical data, client samples and seeds (:class:`Experiment`), and sweeps
of rules x seeds x hyperparameter grids as one batched program with their statistics
(:class:`Sweep`)."""

from fastfair.sim.callbacks import (CSVLogger, LoggingCallback, RoundCallback, TensorBoardLogger,
                                    WandbLogger)
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data import (ArrayDataset, ClientBatch, FederatedDataset, SyntheticDataset,
                               digits_dataset)
from fastfair.sim.distributed import Distributed
from fastfair.sim.engine import Simulation
from fastfair.sim.experiment import Experiment, ExperimentResult, make_runner
from fastfair.sim.fedevg import FedEvgSimulation
from fastfair.sim.metrics import fairness_metrics
from fastfair.sim.models import MLP, LogisticRegression, ModuleModel, make_model
from fastfair.sim.stats import SweepRun
from fastfair.sim.superfed import SuperFedSimulation
from fastfair.sim.sweep import Sweep, SweepResult
from fastfair.sim.training import LocalTrainingConfig, evaluate_clients, train_clients

__all__ = ["ArrayDataset", "CSVLogger", "ClientBatch", "Distributed", "Experiment",
           "ExperimentResult", "FedEvgSimulation", "FederatedDataset", "LocalTrainingConfig",
           "LoggingCallback", "LogisticRegression", "MLP", "ModuleModel", "RoundCallback",
           "Simulation", "SimulationConfig", "SuperFedSimulation", "Sweep", "SweepResult",
           "SweepRun", "SyntheticDataset",
           "TensorBoardLogger", "WandbLogger", "digits_dataset", "evaluate_clients",
           "fairness_metrics", "make_model", "make_runner", "train_clients"]
