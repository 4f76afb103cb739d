"""Tracking stores tell the truth: fresh starts do not append to old files, a dead server fails fast."""

from __future__ import annotations

import csv
import socket
import subprocess
import time

import pytest
from cli_utils import run_cli, spawn

from rlrun.tracking import CSVLogger

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
