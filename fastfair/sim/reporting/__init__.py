"""What runs report: fairness metrics of client accuracy (:mod:`.metrics`), statistics over seeds
(:mod:`.stats`), an experiment's files and plots (:mod:`.report`), a sweep's (:mod:`.sweep_report`)
and per-round callbacks (:mod:`.callbacks`)."""

from fastfair.sim.reporting.callbacks import (
    CSVLogger,
    LoggingCallback,
    RoundCallback,
    TensorBoardLogger,
    WandbLogger,
)
from fastfair.sim.reporting.metrics import fairness_metrics
from fastfair.sim.reporting.stats import SweepRun

__all__ = [
    "CSVLogger", "LoggingCallback", "RoundCallback", "SweepRun", "TensorBoardLogger",
    "WandbLogger", "fairness_metrics",
]
