"""A cohort's local training and evaluation: the step schedule (:mod:`.schedule`), the runs a
training pass serves (:mod:`.lanes`), training by kernel or autograd (:mod:`.local`) and
evaluation in large batches (:mod:`.evaluate`)."""

from fastfair.sim.training.evaluate import evaluate_clients
from fastfair.sim.training.local import train_clients, train_lanes
from fastfair.sim.training.schedule import LocalTrainingConfig

__all__ = ["LocalTrainingConfig", "evaluate_clients", "train_clients", "train_lanes"]
