"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.sim.training.evaluate import evaluate_clients as evaluate_clients
from fastfair.sim.training.local import train_clients as train_clients
from fastfair.sim.training.local import train_lanes as train_lanes
from fastfair.sim.training.schedule import LocalTrainingConfig as LocalTrainingConfig
