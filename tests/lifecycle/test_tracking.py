"""Tracking stores tell the truth: fresh starts do not append to old files, a dead server fails fast."""

from __future__ import annotations

import csv
import errno
import os
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from cli_utils import run_cli, spawn
from process_utils import descendants, wait_gone

from rlrun.loggers.tracking import CSVLogger

FAST = ["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1", "eval.interval_frames=0",
        "logger=csv", "progress=false"]


def frame_rows(path) -> list[int]:
    with open(path, newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r["key"] == "frames"]


def test_csv_fresh_start_sets_old_files_aside_and_resume_appends(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = [*FAST, f"hydra.run.dir={run_dir}"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    first = (run_dir / "metrics.csv").read_text()
    assert frame_rows(run_dir / "metrics.csv") == [256, 512]

    code, _, err = run_cli([*args, "resume=false"], tmp_path, capsys)
    assert code == 0, err
    assert frame_rows(run_dir / "metrics.csv") == [256, 512]  # not [256, 512, 256, 512]
    assert (run_dir / "metrics.prev-1.csv").read_text() == first  # kept, not deleted
    assert (run_dir / "params.prev-1.csv").exists()
    assert "metrics.prev-1.csv" in err

    # a resume (more frames in the same directory) continues the same file
    code, _, err = run_cli([*args[1:], "total_frames=1024"], tmp_path, capsys)
    assert code == 0, err
    assert frame_rows(run_dir / "metrics.csv") == [256, 512, 768, 1024]
    assert not (run_dir / "metrics.prev-2.csv").exists()


def test_csv_logger_never_overwrites_an_earlier_aside_file(tmp_path):
    for i in range(3):
        logger = CSVLogger(tmp_path, resumed=False)
        logger.log_metrics({"frames": i}, step=i)
        logger.finish()
    assert frame_rows(tmp_path / "metrics.csv") == [2]
    assert frame_rows(tmp_path / "metrics.prev-1.csv") == [0]
    assert frame_rows(tmp_path / "metrics.prev-2.csv") == [1]
    logger = CSVLogger(tmp_path, resumed=True)
    logger.log_metrics({"frames": 3}, step=3)
    logger.finish()
    assert frame_rows(tmp_path / "metrics.csv") == [2, 3]


@pytest.mark.parametrize("server", ["closed port", "silent listener"])
def test_tracking_server_that_does_not_answer_fails_fast_with_the_key(tmp_path, server):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if server == "silent listener":  # accepts connections (backlog) but never answers
            sock.listen(8)
        else:
            sock.close()
        start = time.monotonic()
        proc = spawn([*FAST[:-2], "logger=mlflow", f"logger.tracking_uri=http://127.0.0.1:{port}"], tmp_path)
        try:
            _, err = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail(f"still waiting for the tracking server after {time.monotonic() - start:.0f} s")
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, err
    # the probe waits PROBE_TIMEOUT_S (5 s); the rest is process start and env set-up, ~3 s
    # on an idle machine and more on a shared CI box, hence the margin
    assert elapsed < 20, elapsed
    assert "Traceback" not in err and err.count("rlrun: error:") == 1, err
    assert f"logger.tracking_uri: no tracking server answers at http://127.0.0.1:{port}" in err
    assert "fix:" in err and "logger=csv" in err
    assert not list(tmp_path.glob("runs/**/summary.json"))  # nothing trained


# --- issue 25: the embedded store is made atomically; a half-made one is rebuilt; errors are one line

def _store_with(tmp_path, runs: int):
    """A store at ``tmp_path/mlflow.db`` that this process has not opened (MLflow caches open stores)."""
    import shutil

    from rlrun.loggers.store import open_client

    made = tmp_path / "made" / "mlflow.db"
    client = open_client(made)
    exp = client.create_experiment("rlrun")
    for _ in range(runs):
        client.create_run(exp)
    shutil.copy(made, tmp_path / "mlflow.db")
    (tmp_path / "run").mkdir()
    return tmp_path / "mlflow.db"


def _half_made(db) -> None:
    """What a kill mid-migration leaves: alembic's bookkeeping behind the tables made."""
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("UPDATE alembic_version SET version_num = '451aebb31d03'")
    con.commit()
    con.close()


def test_a_half_made_store_without_runs_is_set_aside_and_made_anew(tmp_path, capsys):
    from rlrun.loggers.tracking import make_mlflow

    db = _store_with(tmp_path, runs=0)
    _half_made(db)
    logger = make_mlflow(tmp_path / "run", "r", root=str(tmp_path))
    logger.log_metrics({"x": 1.0}, step=1)
    logger.commit(1)
    logger.finish()
    err = capsys.readouterr().err
    assert "was half-made, with no runs in it" in err and "mlflow.prev-1.db" in err, err
    assert (tmp_path / "mlflow.prev-1.db").exists()
    from mlflow.tracking import MlflowClient

    assert [m.step for m in MlflowClient(f"sqlite:///{db}").get_metric_history(logger.run_id, "x")] == [1]


def test_a_store_with_runs_that_cannot_be_opened_is_left_alone_with_one_line(tmp_path):
    from rlrun.core.errors import ConfigError
    from rlrun.loggers.tracking import make_mlflow

    db = _store_with(tmp_path, runs=1)
    _half_made(db)
    before = db.read_bytes()
    with pytest.raises(ConfigError) as info:
        make_mlflow(tmp_path / "run", "r", root=str(tmp_path))
    text = info.value.render()
    assert "holds 1 runs but cannot be opened" in text and "mlflow db upgrade" in text, text
    assert "[SQL" not in text and len(text.splitlines()) == 2, text  # the message and its fix
    assert db.read_bytes() == before and not (tmp_path / "mlflow.prev-1.db").exists()


def test_a_damaged_store_says_so_in_one_line_and_how_to_recover(tmp_path, capsys):
    (tmp_path / "mlflow.db").write_bytes(b"not a database" * 100)
    code, _, err = run_cli([*FAST[:-2], "logger=mlflow", "progress=false"], tmp_path, capsys)
    assert code == 2, err
    assert err.count("rlrun: error:") == 1 and "Traceback" not in err and "[SQL" not in err, err
    assert "is damaged: it is not a readable SQLite database" in err and "mv " in err, err
    assert (tmp_path / "mlflow.db").read_bytes() == b"not a database" * 100
    # the MLflow worker that found it damaged has ended (it outlived the run in this process)
    assert not wait_gone(_remote_workers(), timeout_s=10)


def test_a_failure_before_training_leaves_the_tracker_run_failed_not_running(tmp_path, capsys, monkeypatch):
    from rlrun.core import checkpoint

    write = checkpoint.atomic_write_text

    def full_disk(path, *args, **kwargs):  # the disk fills up after the tracker run exists
        if Path(path).name == "config.yaml":
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "atomic_write_text", full_disk)
    code, _, err = run_cli([*FAST[:-2], "logger=mlflow", "progress=false"], tmp_path, capsys)
    assert code == 2 and "out of space" in err and "Traceback" not in err, err
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert [r.info.status for r in runs] == ["FAILED"]  # was RUNNING for ever: no rerun could find it
    assert not wait_gone(_remote_workers(), timeout_s=10)


def _remote_workers() -> set[int]:
    return {pid for pid in descendants(os.getpid())
            if b"rlrun.loggers.remote_worker" in _cmdline(pid)}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_store_killed_during_creation_leaves_no_mlflow_db_and_the_rerun_makes_it(tmp_path, monkeypatch):
    import signal

    monkeypatch.setenv("RLRUN_TEST_PAUSE_AT", "store_place")
    monkeypatch.setenv("RLRUN_TEST_PAUSE_S", "60")
    proc = spawn([*FAST[:-2], "logger=mlflow", "progress=false"], tmp_path)
    for line in proc.stderr:
        if "test pause: store_place" in line:
            break
    temp = list(tmp_path.glob("mlflow.db.tmp-*"))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert temp and not (tmp_path / "mlflow.db").exists()  # made aside, never half in place
    monkeypatch.delenv("RLRUN_TEST_PAUSE_AT")
    proc = spawn([*FAST[:-2], "logger=mlflow", "progress=false"], tmp_path)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert (tmp_path / "mlflow.db").exists() and not list(tmp_path.glob("mlflow.db.tmp-*"))


# --- issue 25: after a resume, each (metric, step) is held once

class FakeTracker:
    """A tracker that cannot retract: it keeps every row it is sent."""

    run_id = "fake"

    def __init__(self, fail: bool = False):
        self.rows: list[tuple[str, int, float]] = []
        self.fail = fail

    def log_metric_rows(self, rows) -> None:
        if self.fail:
            raise ConnectionError("server down\n[SQL: long statement]")
        self.rows += [(k, s, v) for s, _, m in rows for k, v in m.items()]

    def last_steps(self, keys):
        return {k: max(s for kk, s, _ in self.rows if kk == k) for k in keys
                if any(kk == k for kk, _, _ in self.rows)}

    def finish(self, status="FINISHED") -> None: ...


def test_journal_sends_only_what_a_checkpoint_covers_and_a_resume_drops_the_rest(tmp_path):
    from rlrun.loggers.journal import JournaledLogger

    tracker = FakeTracker()
    log = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=None)
    for step in (1, 2, 3):
        log.log_metrics({"a": step}, step)
    assert tracker.rows == []  # nothing before a checkpoint
    log.commit(2)
    assert tracker.rows == [("a", 1, 1.0), ("a", 2, 2.0)]
    log.log_metrics({"a": 40}, 4)  # the attempt is then killed: 3 and 4 never checkpointed
    resumed = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=2)
    for step in (3, 4):
        resumed.log_metrics({"a": step * 100}, step)
    resumed.commit(4)
    resumed.finish()
    assert tracker.rows == [("a", 1, 1.0), ("a", 2, 2.0), ("a", 3, 300.0), ("a", 4, 400.0)]
    assert not (tmp_path / "t.journal").exists()


def test_journal_killed_between_send_and_bookkeeping_sends_nothing_twice(tmp_path):
    from rlrun.loggers.journal import JournaledLogger

    tracker = FakeTracker()
    log = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=None)
    for step in (1, 2, 3):
        log.log_metrics({"a": step, "b": -step}, step)
    journal = (tmp_path / "t.journal").read_text()
    log.commit(3)
    # a kill after the send, before the journal was updated: the journal and the marker remain
    (tmp_path / "t.journal").write_text(journal)
    (tmp_path / "t.journal.sending").touch()
    resumed = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=3)
    resumed.finish()
    assert Counter((k, s) for k, s, _ in tracker.rows) == {(k, s): 1 for k in "ab" for s in (1, 2, 3)}


def test_journal_keeps_the_rows_while_the_tracker_fails(tmp_path, capsys):
    from rlrun.loggers.journal import JournaledLogger

    tracker = FakeTracker(fail=True)
    log = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=None)
    log.log_metrics({"a": 1}, 1)
    log.commit(1)  # does not raise: training goes on
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "server down" in err and "SQL" not in err, err
    tracker.fail = False
    log.log_metrics({"a": 2}, 2)
    log.commit(2)
    assert tracker.rows == [("a", 1, 1.0), ("a", 2, 2.0)]


def test_csv_resume_drops_the_rows_past_the_checkpoint(tmp_path):
    logger = CSVLogger(tmp_path, resumed=False)
    for step in (1, 2, 3):
        logger.log_metrics({"frames": step}, step=step)
    logger.finish()
    logger = CSVLogger(tmp_path, resumed=True, resume_step=2)
    logger.log_metrics({"frames": 3}, step=3)
    logger.finish()
    assert frame_rows(tmp_path / "metrics.csv") == [1, 2, 3]


def test_tensorboard_resume_purges_the_events_past_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlrun.loggers.tracking import TensorBoardLogger

    logger = TensorBoardLogger(tmp_path)
    for step in (1, 2, 3, 4):
        logger.log_metrics({"x": step}, step)
    logger.commit(4)
    time.sleep(1.1)  # event files are named by the second they are opened in
    logger = TensorBoardLogger(tmp_path, resumed=True, resume_step=2)
    for step in (3, 4):
        logger.log_metrics({"x": step * 10}, step)
    logger.finish()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("x")] == [(1, 1), (2, 2), (3, 30), (4, 40)]
