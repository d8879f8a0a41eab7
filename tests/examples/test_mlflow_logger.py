"""examples/trackers/mlflow_logger.py: a sweep's runs land in MLflow, one MLflow run per
fastfair run with its rounds as metrics (runs where mlflow is installed; skips otherwise)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import ROOT

# MLflow's SQL store uses a loader option SQLAlchemy 2.1 deprecates: their warning, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore:The ``noload`` loader strategy is deprecated:DeprecationWarning")


@pytest.fixture()
def logger_class(monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "trackers"))
    sys.modules.pop("mlflow_logger", None)
    import mlflow_logger

    return mlflow_logger.MLflowLogger


def test_a_sweep_logs_every_run_and_round(logger_class, tmp_path):
    import mlflow

    from fastfair.sim import SimulationConfig, Sweep

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logger = logger_class("quick", tracking_uri=uri)
    config = SimulationConfig(clients=12, per_round=4, rounds=3, eval_every=3)
    Sweep(config, rules=["fedavg", "term"], seeds=[0, 1], callbacks=[logger],
          progress=False).run()
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([logger.experiment_id])
    assert sorted(r.info.run_name for r in runs) == [
        "fedavg/seed0", "fedavg/seed1", "term/seed0", "term/seed1"]
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.params["rounds"] == "3" and run.data.params["clients"] == "12"
        history = client.get_metric_history(run.info.run_id, "participants")
        assert [m.step for m in history] == [1, 2, 3] and {m.value for m in history} == {4.0}
        accuracy = client.get_metric_history(run.info.run_id, "acc_mean")
        assert [m.step for m in accuracy] == [3] and 0.0 <= accuracy[0].value <= 1.0
    assert logger.run_ids == {}


def test_close_marks_runs_a_failure_left_open(logger_class, tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logger = logger_class("failed", tracking_uri=uri)
    logger.on_run_start("fedavg", {"rounds": 2})
    logger.on_round("fedavg", {"round": 1, "train_loss": 0.5, "note": "skipped"})
    logger.close()
    (run,) = mlflow.MlflowClient(tracking_uri=uri).search_runs([logger.experiment_id])
    assert run.info.status == "KILLED" and run.data.metrics == {"train_loss": 0.5}
