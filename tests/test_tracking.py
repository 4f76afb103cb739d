"""Tracking stores tell the truth: fresh starts do not append to old files, a dead server fails fast."""

from __future__ import annotations

import csv

from cli_utils import run_cli

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
