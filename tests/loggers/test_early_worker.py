"""MLflow's worker starts before the run's config is composed (``rlrun.loggers.remote.start_early``):
the config's logger node then names its store, or ends it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlrun.loggers import remote

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


def test_the_run_goes_on_while_the_worker_opens_the_store(tmp_path: Path, monkeypatch):
    """``start_run`` does not wait for the store (here held at its creation for 5 s): the run's id
    is waited for when first read."""
    monkeypatch.setenv("RLRUN_TEST_PAUSE_AT", "store_create")
    monkeypatch.setenv("RLRUN_TEST_PAUSE_S", "5")
    remote.prestart({"name": "mlflow", "root": str(tmp_path), "experiment": "e"})
    taken = remote.take_prestarted(None, str(tmp_path), "e")
    taken.start_run("r", None, {"k": "v"})
    taken.log_params({"lr": 0.5})
    assert not (tmp_path / "mlflow.db").exists()  # the worker is still importing MLflow, or paused
    run_id = taken.run_id  # waits for the worker
    assert (tmp_path / "mlflow.db").exists() and run_id
    taken.finish("FINISHED")
    from mlflow.tracking import MlflowClient

    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"lr": "0.5"}


def test_a_store_that_fails_late_fails_the_run_once_and_leaves_no_worker(tmp_path: Path):
    """A store that passes the quick check but cannot be opened (a SQLite file holding runs, not
    MLflow's) is the run's ConfigError where its run id is first read; ending the logger then says
    nothing more and ends the worker."""
    import sqlite3

    from rlrun.core.errors import ConfigError

    con = sqlite3.connect(tmp_path / "mlflow.db")
    con.execute("CREATE TABLE runs (name TEXT)")
    con.execute("INSERT INTO runs VALUES ('kept')")
    con.commit()
    con.close()
    remote.prestart({"name": "mlflow", "root": str(tmp_path), "experiment": "e"})
    taken = remote.take_prestarted(None, str(tmp_path), "e")
    taken.start_run("r", None, {})
    with pytest.raises(ConfigError, match="holds 1 runs but cannot be opened"):
        _ = taken.run_id
    assert taken.run_id is None  # said once
    taken.finish("FAILED")
    assert taken._proc.poll() is not None


def test_the_quick_store_check(tmp_path: Path):
    import socket

    from rlrun.core.errors import ConfigError
    from rlrun.loggers.remote import store_looks_usable

    assert store_looks_usable(None, str(tmp_path))  # no store yet: the worker makes it
    assert store_looks_usable(None, str(tmp_path / "not" / "yet"))
    (tmp_path / "mlflow.db").write_bytes(b"SQLite format 3\x00" + bytes(100))
    assert store_looks_usable(f"sqlite:///{tmp_path / 'mlflow.db'}", None)
    (tmp_path / "mlflow.db").write_bytes(b"not a database" * 10)
    assert not store_looks_usable(None, str(tmp_path))  # the worker's verdict, before training
    assert not store_looks_usable("postgresql://u@localhost/db", None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigError, match="no tracking server answers"):
        store_looks_usable(f"http://127.0.0.1:{port}", None)


def test_continuing_a_run_the_store_lacks_fails_before_training(tmp_path: Path):
    """A resume continues the checkpoint's tracker run: ``start_run`` with its id waits for the
    worker, so a store that lacks it is the run's one-line error at once, not a run that trains
    with its metrics going nowhere."""
    from rlrun.core.errors import ConfigError

    remote.prestart({"name": "mlflow", "root": str(tmp_path), "experiment": "e"})
    taken = remote.take_prestarted(None, str(tmp_path), "e")
    with pytest.raises(ConfigError, match="0123456789abcdef0123456789abcdef of this checkpoint is not in"):
        taken.start_run("r", "0123456789abcdef0123456789abcdef", {})
    taken.finish("FAILED")
    assert taken._proc.poll() is not None


def test_a_worker_ended_while_it_makes_the_store_leaves_no_temp_file(tmp_path: Path, monkeypatch):
    """A run that fails on its input after the worker started making the store (the worker is
    never taken, so it is killed): the half-made ``mlflow.db.tmp-<pid>`` goes with it, rather than
    staying in the user's directory until another run makes a store there."""
    import time

    monkeypatch.setenv("RLRUN_TEST_PAUSE_AT", "store_place")
    monkeypatch.setenv("RLRUN_TEST_PAUSE_S", "120")
    remote.prestart({"name": "mlflow", "root": str(tmp_path), "experiment": "e"})
    worker = remote._prestarted[(None, str(tmp_path), "e")]
    temp = tmp_path / f"mlflow.db.tmp-{worker._proc.pid}"
    deadline = time.monotonic() + 90
    while not temp.exists():  # MLflow imported, the temp store made, the worker paused before placing it
        assert time.monotonic() < deadline and worker._proc.poll() is None
        time.sleep(0.05)
    remote.discard_prestarted()
    assert worker._proc.poll() is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == []
