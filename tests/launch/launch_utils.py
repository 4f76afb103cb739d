"""Helpers of the launching tests (imported by name: conftest puts this directory on sys.path)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

# a few hundred frames per job: what is tested is the launching, not the learning
FAST = ["total_frames=512", "collector.frames_per_batch=256", "eval.episodes=1", "eval.interval_frames=0",
        "progress=false"]
SLURM_SMALL = ["hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=60"]
# a job a test cancels: hours of training, so that it cannot finish first on any machine (100,000
# frames took 12 s; CI once saw such a job COMPLETED before its scancel, which then did nothing)
UNENDING = "total_frames=1000000000"
# a job a test stops and resumes: each checkpoint waits 0.3 s (rlrun.loggers.pause_point), so that
# the rest of the run outlasts the test's 0.5 s polls however fast the machine trains
SLOWED = {"RLRUN_TEST_PAUSE_AT": "checkpoint_write", "RLRUN_TEST_PAUSE_S": "0.3"}


def slurm_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return "no SLURM here (sinfo not found); .ci/run starts a one-node cluster with .ci/slurm/start.sh"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as err:
        return f"sinfo failed: {err}"
    if out.returncode != 0 or " up" not in out.stdout:
        return f"the SLURM controller does not answer or no partition is up: {out.stderr.strip()[:200]}"
    return None


def wait_for(predicate: Callable[[], object], timeout: float, what: str, proc=None, every: float = 0.5):
    """Polls ``predicate`` until it returns a truthy value (returned); fails after ``timeout`` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None and proc.returncode != 0:
            out, err = proc.communicate()
            pytest.fail(f"process ended ({proc.returncode}) while waiting for {what}:\n{err[-3000:]}")
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def job_records(sweep_dir: Path) -> list[dict]:
    """The job.json records under ``sweep_dir``, by job number."""
    from rlrun.launch.status import find_status

    return find_status(sweep_dir)


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def mlflow_runs(store: Path, parents: bool = False):
    """The client and the jobs' runs of the store's ``rlrun`` experiment (``parents``: sweeps'
    parent runs as well, rlrun.launch.sweep_group)."""
    from mlflow.tracking import MlflowClient

    from rlrun.launch.sweep_group import PARENT_TAG

    client = MlflowClient(f"sqlite:///{store}")
    exp = client.get_experiment_by_name("rlrun")
    runs = client.search_runs([exp.experiment_id]) if exp else []
    return client, [r for r in runs if parents or PARENT_TAG not in r.data.tags]
