"""The local parallel launcher: jobs side by side, and submitit's requeue path without SLURM."""

from __future__ import annotations

import csv
import os
import signal

import pytest
from cli_utils import spawn
from launch_utils import SLOWED, job_records, read_json, wait_for

TINY_JOBS = ["seed=0,1,2,3", "total_frames=1024", "collector.frames_per_batch=256",
             "eval.interval_frames=0", "eval.episodes=1", "logger=csv", "progress=false"]


@pytest.mark.timeout(600)
def test_local_launcher_runs_four_jobs_two_at_a_time(tmp_path):
    """hydra/launcher=local with max_parallel=2: four jobs, each COMPLETED with its own run, two
    worker processes taking turns. (How much faster than one after the other is a benchmark's
    question, not a test's: the machines are shared and noisy.)"""
    proc = spawn(["-m", *TINY_JOBS, f"hydra.sweep.dir={tmp_path / 'sw'}", "hydra/launcher=local",
                  "hydra.launcher.max_parallel=2"], tmp_path)
    _, err = proc.communicate(timeout=540)
    assert proc.returncode == 0, err[-3000:]
    records = job_records(tmp_path / "sw")
    assert len(records) == 4 and {r["state"] for r in records} == {"COMPLETED"}
    summaries = [read_json(p) for p in (tmp_path / "sw").glob("*/summary.json")]
    assert len(summaries) == 4 and all(s["status"] == "finished" and s["frames"] == 1024 for s in summaries)
    assert len({r["attempts"][0]["pid"] for r in records}) == 2  # max_parallel=2: two workers took turns


@pytest.mark.timeout(600)
def test_local_job_interrupted_requeues_and_resumes(tmp_path):
    """The warning signal (as at a local time-out): checkpoint, requeue, resume; frames counted once.

    Runs without SLURM (the worker restarts under submitit's local controller); CSV logging, whose
    file a resumed run appends to, shows every batch logged once.
    """
    args = ["-m", "seed=0", "hydra/launcher=local", f"hydra.sweep.dir={tmp_path / 'sw'}", "total_frames=8192",
            "collector.frames_per_batch=256", "checkpoint.interval_frames=512", "eval.interval_frames=0",
            "eval.episodes=1", "progress=false", "logger=csv"]
    proc = spawn(args, tmp_path, env=SLOWED)
    run_dir = wait_for(lambda: next((r["run_dir"] for r in job_records(tmp_path / "sw")
                                     if r.get("state") == "RUNNING"), None), 300, "the job to run", proc)
    wait_for(lambda: os.path.exists(os.path.join(run_dir, "checkpoint.pt")), 300, "a checkpoint", proc)
    (record,) = job_records(tmp_path / "sw")
    os.kill(record["attempts"][-1]["pid"], signal.SIGUSR2)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    (record,) = job_records(tmp_path / "sw")
    assert record["state"] == "COMPLETED" and record["frames"] == 8192 and record["run_dir"] == run_dir
    first, second = record["attempts"]
    assert first["pid"] != second["pid"] and second["resumed_from_checkpoint"]
    summary = read_json(os.path.join(run_dir, "summary.json"))
    assert summary["status"] == "finished" and summary["optim_steps"] == 8192 // 256 * 10  # no batch redone
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        frames = [float(row["value"]) for row in csv.DictReader(f) if row["key"] == "frames"]
    assert frames == sorted(set(frames)) and frames[-1] == 8192 and len(frames) == 8192 // 256
