"""Every round of every run into MLflow, through fastfair's :class:`~fastfair.sim.RoundCallback`.

Copy this file beside your script (or import it from here) and pass the logger to an experiment
or a sweep; each fastfair run (``fedavg``, or ``term(tilt=1)/seed2`` in a sweep) becomes one
MLflow run of the experiment ``experiment``, its configuration as parameters and every numeric
entry of each round as a metric at step ``round``::

    from fastfair.sim import Sweep, SimulationConfig
    from mlflow_logger import MLflowLogger

    Sweep(SimulationConfig(rounds=50), rules=["fedavg", "aaggff-d"], seeds=[0, 1],
          callbacks=[MLflowLogger("fastfair", tracking_uri="sqlite:///mlflow.db")]).run()

then ``mlflow ui --backend-store-uri sqlite:///mlflow.db``. The runs of a sweep train as one
batched program, so their rounds interleave: the logger keeps one MLflow run id per fastfair
run and writes through :class:`mlflow.MlflowClient`, never through MLflow's one "active run".
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

from fastfair.sim import RoundCallback
from fastfair.sim.reporting.callbacks import scalars


class MLflowLogger(RoundCallback):
    """Logs fastfair runs to MLflow (``pip install mlflow``).

    Parameters
    ----------
    experiment
        The MLflow experiment's name (made when absent).
    tracking_uri
        Where MLflow stores the runs (``sqlite:///mlflow.db``, a tracking server's URL); None:
        MLflow's default (``MLFLOW_TRACKING_URI``, else ``./mlruns``).
    """

    def __init__(self, experiment: str = "fastfair", tracking_uri: Optional[str] = None) -> None:
        import mlflow

        self._entities = mlflow.entities
        self.client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (found.experiment_id if found is not None
                              else self.client.create_experiment(experiment))
        self.run_ids: Dict[str, str] = {}

    def on_run_start(self, run: str, config: Dict[str, Any]) -> None:
        created = self.client.create_run(self.experiment_id, run_name=run,
                                         tags={"fastfair.run": run})
        self.run_ids[run] = created.info.run_id
        params = [self._entities.Param(key, str(value)[:6000])
                  for key, value in sorted(config.items())]
        self.client.log_batch(self.run_ids[run], params=params)

    def on_round(self, run: str, record: Dict[str, Any]) -> None:
        now = int(time.time() * 1000)
        metrics = [self._entities.Metric(key, value, now, int(record["round"]))
                   for key, value in scalars(record)]
        self.client.log_batch(self.run_ids[run], metrics=metrics)

    def on_run_end(self, run: str, summary: Dict[str, float]) -> None:
        self.client.set_terminated(self.run_ids.pop(run), status="FINISHED")

    def close(self) -> None:
        for run_id in self.run_ids.values():      # runs a raised round left open
            self.client.set_terminated(run_id, status="KILLED")
        self.run_ids.clear()


if __name__ == "__main__":
    from fastfair.sim import SimulationConfig, Sweep

    Sweep(SimulationConfig(rounds=50, eval_every=10), rules=["fedavg", "aaggff-d"], seeds=[0, 1],
          callbacks=[MLflowLogger("fastfair", tracking_uri="sqlite:///mlflow.db")]).run()
    print("logged 4 runs to sqlite:///mlflow.db: mlflow ui --backend-store-uri sqlite:///mlflow.db")
