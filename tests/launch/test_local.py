"""The local parallel launcher: jobs side by side, and submitit's requeue path without SLURM."""

from __future__ import annotations

import csv
import os
import signal
import time

import pytest
from cli_utils import spawn
from launch_utils import job_records, read_json, wait_for

# a few seconds of training per job, so that running side by side can pay for the worker
# processes' start-up; csv logging keeps MLflow's start-up out of the ratio
RATIO_JOB = ["seed=0,1,2,3", "total_frames=16384", "collector.frames_per_batch=1024",
             "eval.interval_frames=0", "eval.episodes=2", "logger=csv", "progress=false"]


def _multirun(tmp_path, name: str, extra: list[str]) -> float:
    t0 = time.perf_counter()
    proc = spawn(["-m", *RATIO_JOB, f"hydra.sweep.dir={tmp_path / name}", *extra], tmp_path)
    _, err = proc.communicate(timeout=900)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, err[-3000:]
    summaries = [read_json(p) for p in (tmp_path / name).glob("*/summary.json")]
    assert len(summaries) == 4 and all(s["status"] == "finished" and s["frames"] == 16384 for s in summaries)
    return elapsed


@pytest.mark.timeout(1200)
def test_parallel_local_multirun_vs_one_after_the_other(tmp_path, record_property, capsys):
    """4 jobs on this machine's cores: hydra/launcher=local (2 at a time) vs Hydra's basic launcher.

    Reported, not asserted: the machines are shared and noisy.
    """
    sequential = _multirun(tmp_path, "sequential", [])
    parallel = _multirun(tmp_path, "parallel", ["hydra/launcher=local", "hydra.launcher.max_parallel=2"])
    records = job_records(tmp_path / "parallel")
    assert len(records) == 4 and {r["state"] for r in records} == {"COMPLETED"}
    ratio = parallel / sequential
    record_property("parallel_over_sequential", round(ratio, 3))
    with capsys.disabled():
        print(f"\n[launch] 4 jobs, {os.cpu_count()} cores: sequential {sequential:.1f} s, "
              f"local parallel {parallel:.1f} s, ratio {ratio:.2f}")


@pytest.mark.timeout(600)
def test_local_job_interrupted_requeues_and_resumes(tmp_path):
    """The warning signal (as at a local time-out): checkpoint, requeue, resume; frames counted once.

    Runs without SLURM (the worker restarts under submitit's local controller); CSV logging, whose
    file a resumed run appends to, shows every batch logged once.
    """
    args = ["-m", "seed=0", "hydra/launcher=local", f"hydra.sweep.dir={tmp_path / 'sw'}", "total_frames=8192",
            "collector.frames_per_batch=256", "checkpoint.interval_frames=512", "eval.interval_frames=0",
            "eval.episodes=1", "progress=false", "logger=csv"]
    proc = spawn(args, tmp_path)
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
