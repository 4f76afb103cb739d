"""collector.backend=ray: a run on a local Ray instance (started and stopped by the collector).

Ray's start takes 7-60 s on a loaded 2-core machine: two tests, not marked slow, so that the
default ``python -m pytest`` (CI's) runs them; without ray installed they skip.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cli_utils import only_run_dir, run_cli, summary_of
from shared_resources import shared_lock

ray = pytest.importorskip("ray", reason="pip install 'rlrun[ray]'")

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "default_worker.py", "dashboard", "log_monitor")


def ray_processes() -> list[str]:
    """Command lines of this machine's Ray processes (all of them: the tests start the only Ray here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(name in cmd for name in RAY_PROCESSES) and "pytest" not in cmd:
            found.append(f"{entry.name}: {cmd[:120]}")
    return found


def wait_no_ray(timeout_s: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := ray_processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.fixture(autouse=True)
def no_ray_before(monkeypatch, tmp_path_factory):
    # one Ray test at a time across the run's test processes: each counts every Ray process here
    with shared_lock(tmp_path_factory, "ray"):
        if ray.is_initialized() or ray_processes():
            pytest.skip("a Ray instance already runs on this machine")
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        yield


def test_a_run_with_two_ray_workers_finishes_its_frames_and_tracker_run_and_stops_ray(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    code, _, err = run_cli(["algo=impala", "env=cartpole", "seed=0", "collector.backend=ray",
                            "collector.ray_address=null", "collector.workers=2", "env.num_envs=2",
                            "collector.frames_per_batch=64", "collector.rollouts_per_batch=2",
                            "total_frames=1000", "eval.episodes=2", "eval.interval_frames=0",
                            "checkpoint.interval_frames=0", "logger=mlflow"], tmp_path, capsys)
    assert code == 0, err
    summary = summary_of(only_run_dir(tmp_path))
    assert summary["status"] == "finished" and summary["frames"] == 1000
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert "collector/policy_lag" in run.data.metrics  # async batches carry their policy version
    assert not ray.is_initialized()
    assert not wait_no_ray(), "Ray processes outlived the run"


def test_a_killed_ray_worker_is_reported_by_index_and_ray_is_stopped(make_counter_env):
    from collector_fakes import BiasPolicy, counter_env

    from rlrun.collectors_multi import WorkerError
    from rlrun.collectors_ray import RayCollector

    coll = RayCollector(counter_env, BiasPolicy(), 8, 10**9, workers=2, mode="sync", method="forward",
                        timeout_s=60)
    it = iter(coll)
    batch = next(it)
    assert tuple(batch.batch_size) == (4, 2) and set(batch["collector", "worker"][:, 0].tolist()) == {0, 1}
    ray.kill(coll._actors[1])
    with pytest.raises(WorkerError, match="Ray collector worker 1"):
        for _ in range(1000):
            next(it)
    assert not ray.is_initialized()
    assert not wait_no_ray()


def test_joining_a_cluster_sends_the_token_when_a_token_file_exists(tmp_path, monkeypatch):
    from rlrun.collectors_ray import _token_auth_if_configured

    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):  # set first, so that teardown restores the original
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))
    _token_auth_if_configured()
    assert "RAY_AUTH_MODE" not in os.environ  # no token: Ray's own default
    (tmp_path / "auth_token").write_text("0" * 64)
    _token_auth_if_configured()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # an explicit choice is kept
    _token_auth_if_configured()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
