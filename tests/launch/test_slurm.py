"""Against a real SLURM cluster (.ci/run starts one): a sweep, preemption with requeue, a cancel.

Skipped when there is no cluster (``sinfo`` missing or not answering), except
under ``RLRUN_REQUIRE_SLURM=1`` (set by .ci/run), where that is a failure.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_utils import spawn
from launch_utils import (
    FAST,
    SLOWED,
    SLURM_SMALL,
    UNENDING,
    job_records,
    mlflow_runs,
    read_json,
    wait_for,
)

LONG_JOB = ["total_frames=12288", "collector.frames_per_batch=256", "checkpoint.interval_frames=1024",
            "eval.interval_frames=0", "eval.episodes=1", "progress=false"]


def _checkpoint_frames(run_dir: str) -> int:
    import torch

    try:
        return int(torch.load(Path(run_dir) / "checkpoint.pt", weights_only=True)["frames"])
    except (OSError, RuntimeError, KeyError, EOFError):
        return 0


def _submit(tmp_path: Path, partition: str, args: list[str], env: dict[str, str] | None = None) -> dict:
    """Submits one job without waiting (hydra.launcher.wait=false); returns its job.json once running."""
    proc = spawn(["-m", "hydra/launcher=slurm", f"hydra.launcher.partition={partition}", *SLURM_SMALL,
                  "hydra.launcher.wait=false", f"hydra.sweep.dir={tmp_path / 'sw'}", *args],
                 tmp_path, env=env)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (record,) = job_records(tmp_path / "sw")
    assert record["state"] in ("PENDING", "RUNNING") and record["executor"] == "slurm", record
    return record


def _state(tmp_path: Path) -> dict:
    records = job_records(tmp_path / "sw")
    return records[0] if records else {}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("tasks", [1, 2])
def test_sweep_of_two_jobs_through_slurm_tracks_both_runs(tmp_path, slurm_partition, tasks):
    """`rlrun -m +sweep=smoke hydra/launcher=slurm`: both jobs' runs in the MLflow store, with summaries
    (with 2 tasks a job, each job is one data-parallel run of 2 ranks)."""
    proc = spawn(["-m", "+sweep=smoke", "hydra/launcher=slurm", f"hydra.launcher.partition={slurm_partition}",
                  *SLURM_SMALL, f"hydra.launcher.tasks_per_node={tasks}", *FAST,
                  f"hydra.sweep.dir={tmp_path / 'sw'}"], tmp_path)
    _, err = proc.communicate(timeout=540)
    assert proc.returncode == 0, err[-3000:]
    records = job_records(tmp_path / "sw")
    assert [r["state"] for r in records] == ["COMPLETED", "COMPLETED"]
    client, runs = mlflow_runs(tmp_path / "mlflow.db")
    assert len(runs) == 2
    slurm_ids = {r["job_id"] for r in records}
    for run in runs:
        tags = run.data.tags
        assert run.info.status == "FINISHED" and tags["sweep"] == "sw" and tags["job_num"] in ("0", "1")
        assert tags["slurm_array_job_id"] + "_" + tags["slurm_array_task_id"] in slurm_ids
        assert tags["slurm_job_id"] and len(tags["rlrun_git_commit"]) == 40  # cwd is no repository
        assert "summary.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
        summary = read_json(Path(tags["run_dir"]) / "summary.json")
        assert summary["frames"] == 512 and summary["mlflow_run_id"] == run.info.run_id
    listing = subprocess.run([sys.executable, "-m", "rlrun.launch", "status", str(tmp_path / "sw")],
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0 and listing.stdout.count("COMPLETED") == 2, listing


@pytest.mark.timeout(900)
@pytest.mark.parametrize("tasks", [1, 2])
def test_preempted_job_is_requeued_and_resumes_to_the_configured_total(tmp_path, slurm_partition, tasks):
    """Preempted (submitit's interrupt: SIGTERM + USR2), then timed out (USR2): requeued twice, resumed
    from its checkpoint each time in the same run directory and MLflow run, frames counted once
    (with 2 tasks: every rank stops after the same batch, and the world's frames are counted)."""
    from submitit import SlurmJob

    ranks = f"hydra.launcher.tasks_per_node={tasks}"
    record = _submit(tmp_path, slurm_partition, ["seed=0", ranks, *LONG_JOB], env=SLOWED)
    job = SlurmJob(record["submitit_folder"], record["job_id"])
    run_dir = record["run_dir"]
    stops = []
    for attempt, timeout in ((1, False), (2, True)):
        wait_for(lambda a=attempt: len(_state(tmp_path).get("attempts", [])) == a
                 and _checkpoint_frames(run_dir) > (stops[-1] if stops else 0), 300,
                 f"attempt {attempt} to write a checkpoint")
        assert _state(tmp_path)["state"] == "RUNNING"
        job._interrupt(timeout=timeout)  # submitit's own preemption / time-out simulation
        wait_for(lambda a=attempt: _state(tmp_path).get("state") in ("REQUEUED", "PENDING") or
                 len(_state(tmp_path).get("attempts", [])) > a, 120, "the requeue")
        stops.append(read_json(Path(run_dir) / "summary.json").get("frames") or _checkpoint_frames(run_dir))
    final = wait_for(lambda: _state(tmp_path).get("state") in ("COMPLETED", "FAILED") and _state(tmp_path),
                     400, "the job to finish")
    assert final["state"] == "COMPLETED" and final["frames"] == 12288 and final["run_dir"] == run_dir
    attempts = final["attempts"]
    assert len(attempts) == 3 and [a["resumed_from_checkpoint"] for a in attempts] == [False, True, True]
    assert [a["slurm_restart_count"] for a in attempts] == [None, "1", "2"]  # SLURM requeued it twice
    assert 0 < stops[0] < stops[1] < 12288  # progress kept across both stops
    summary = read_json(Path(run_dir) / "summary.json")
    assert summary["status"] == "finished" and summary["frames"] == 12288
    client, runs = mlflow_runs(tmp_path / "mlflow.db")
    assert len(runs) == 1 and runs[0].info.run_id == summary["mlflow_run_id"]
    assert runs[0].info.status == "FINISHED"
    frames = [m.value for m in client.get_metric_history(runs[0].info.run_id, "frames")]
    assert frames == sorted(set(frames)) and len(frames) == 12288 // 256  # every batch once
    assert summary["optim_steps"] == 12288 // 256 * 10  # 10 epochs of one minibatch: no batch redone


@pytest.mark.timeout(600)
def test_cancelled_job_is_not_requeued(tmp_path, slurm_partition):
    """`scancel` also sends SIGTERM, but a cancel must not come back."""
    record = _submit(tmp_path, slurm_partition, ["seed=1", *LONG_JOB, UNENDING, "logger=none"])
    try:
        wait_for(lambda: _checkpoint_frames(record["run_dir"]) > 0, 300, "a checkpoint")
        subprocess.run(["scancel", record["job_id"]], check=True, timeout=60)
        wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", record["job_id"]], capture_output=True,
                                            text=True).stdout.strip(), 120, "the job to leave the queue")
        # a requeue would show within cred_expire (10 s on the CI cluster): look again after that
        time.sleep(15)
        assert not subprocess.run(["squeue", "-h", "-j", record["job_id"]], capture_output=True,
                                  text=True).stdout.strip()
        state = _state(tmp_path)
        assert len(state["attempts"]) == 1 and state["state"] in ("RUNNING", "INTERRUPTED"), state
        sacct = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", record["job_id"]],
                               capture_output=True, text=True).stdout
        assert sacct.startswith("CANCELLED"), sacct
    finally:  # a failed test leaves no job training on (a second scancel of an ended job does nothing)
        subprocess.run(["scancel", record["job_id"]], timeout=60)


@pytest.mark.timeout(600)
def test_a_jobs_slurm_tasks_are_the_ranks_of_one_data_parallel_run(tmp_path, slurm_partition):
    """`hydra/launcher=slurm hydra.launcher.tasks_per_node=2`: the job's two tasks train one policy
    as two ranks (submitit's TorchDistributedEnvironment, as torchrun's): one run directory with
    rank 1's part beside rank 0's checkpoint, a world of 2, the budget counted over both, one
    tracker run and one job record."""
    proc = spawn(["-m", "hydra/launcher=slurm", f"hydra.launcher.partition={slurm_partition}", *SLURM_SMALL,
                  "hydra.launcher.tasks_per_node=2", "hydra.launcher.cpus_per_task=1",
                  "algo=ppo", "env=cartpole", "total_frames=4096", "collector.frames_per_batch=512",
                  "checkpoint.interval_frames=2048", "eval.interval_frames=0", "eval.episodes=1",
                  "progress=false", "threads=1", f"hydra.sweep.dir={tmp_path / 'sw'}"], tmp_path)
    _, err = proc.communicate(timeout=540)
    assert proc.returncode == 0, err[-3000:]
    (record,) = job_records(tmp_path / "sw")
    assert record["state"] == "COMPLETED", record
    run_dir = Path(record["run_dir"])
    assert read_json(run_dir / "world.json")["world_size"] == 2
    import torch

    parts = [torch.load(p, weights_only=True) for p in (run_dir / "checkpoint.pt",
                                                       run_dir / "ranks" / "1" / "checkpoint.pt")]
    assert [p["frames"] for p in parts] == [4096, 4096]  # the world's frames, on each rank
    assert [p["collector"]["frames"] for p in parts] == [2048, 2048]  # each rank collected its half
    assert read_json(run_dir / "summary.json")["frames"] == 4096
    _, runs = mlflow_runs(tmp_path / "mlflow.db")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
