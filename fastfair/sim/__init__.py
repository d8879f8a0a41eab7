"""Cross-device federated simulation: data sets that cost nothing until a client is sampled,
batched local training of thousands of clients at once, and fairness metrics."""

from fastfair.sim.data import (ArrayDataset, ClientBatch, FederatedDataset, SyntheticDataset,
                               digits_dataset)
from fastfair.sim.metrics import fairness_metrics
from fastfair.sim.models import LogisticRegression, MLP, make_model
from fastfair.sim.training import LocalTrainingConfig, evaluate_clients, train_clients

__all__ = ["ArrayDataset", "ClientBatch", "FederatedDataset", "SyntheticDataset",
           "digits_dataset", "fairness_metrics", "LogisticRegression", "MLP", "make_model",
           "LocalTrainingConfig", "evaluate_clients", "train_clients"]
