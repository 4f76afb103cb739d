"""MLflow's worker starts before the run's config is composed (``rlrun.record.remote.start_early``):
the config's logger node then names its store, or ends it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlrun.record import remote

pytest.importorskip("mlflow")


@pytest.fixture(autouse=True)
def _no_workers_left(monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("RLRUN_MLFLOW_IN_PROCESS", raising=False)
    yield
    remote.discard_prestarted()


def test_the_early_worker_opens_the_store_the_config_names(tmp_path: Path):
    remote.start_early()
    remote.start_early()  # one early worker at most
    assert len(remote._early) == 1
    early = remote._early[0]
    remote.prestart({"name": "mlflow", "root": str(tmp_path), "experiment": "early"})
    taken = remote.take_prestarted(None, str(tmp_path), "early")
    assert taken is early and not remote._early
    taken.start_run("r", None, {"k": "v"})
    taken.log_metric_rows([(8, 0, {"x": 1.5})])
    taken.finish("FINISHED")
    from mlflow.tracking import MlflowClient

    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(taken.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics == {"x": 1.5} and run.data.tags["k"] == "v"


def test_an_early_worker_that_the_config_does_not_use_is_ended(tmp_path: Path):
    remote.start_early()
    early = remote._early[0]
    remote.prestart({"name": "none"})
    assert not remote._early and not remote._prestarted
    assert early._proc.wait(timeout=30) is not None
    assert not (tmp_path / "mlflow.db").exists() and os.getcwd() != str(tmp_path)
