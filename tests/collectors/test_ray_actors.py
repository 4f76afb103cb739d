"""collector.backend=ray: a run on a local Ray instance (started and stopped by the collector).

Ray's start takes 7-100 s on a loaded 2-core machine: four tests start one, not marked slow, so
that the default ``python -m pytest`` (CI's) runs them; without ray installed they skip.
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from cli_utils import only_run_dir, run_cli, spawn, summary_of
from process_utils import descendants
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

    from rlrun.collectors.multiprocess import WorkerError
    from rlrun.collectors.ray_actors import RayCollector

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
    from rlrun.collectors.ray_actors import _token_auth_if_configured

    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):  # set first, so that teardown restores the original
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "auth_token"))
    monkeypatch.delitem(sys.modules, "ray", raising=False)  # as in a process that has not imported Ray
    _token_auth_if_configured()
    assert "RAY_AUTH_MODE" not in os.environ  # no token: Ray's own default
    (tmp_path / "auth_token").write_text("0" * 64)
    monkeypatch.setitem(sys.modules, "ray", object())  # Ray imported: its driver read the mode already
    _token_auth_if_configured()
    assert "RAY_AUTH_MODE" not in os.environ  # setting it now would reach only the processes it starts
    monkeypatch.delitem(sys.modules, "ray")
    _token_auth_if_configured()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # an explicit choice is kept
    _token_auth_if_configured()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"


# ------------------------------------------------------------------ what a local Ray listens on (issue 25 §4)

def _address(hexaddr: str) -> tuple[str, int]:
    """An address of /proc/net/tcp{,6} (hex, 32-bit words in host order, i.e. little-endian here)."""
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw), int(port, 16)


def listening_sockets(pids: set[int]) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, command) of every listening TCP socket the processes ``pids`` hold."""
    listening = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                listening[int(fields[9])] = _address(fields[1])
    found = []
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        for link in links:
            if link.startswith("socket:[") and int(link[8:-1]) in listening:
                found.append((*listening[int(link[8:-1])], pid, cmd[:90].strip()))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


RAY_RUN = ["algo=impala", "env=cartpole", "seed=0", "collector.backend=ray", "collector.ray_address=null",
           "collector.workers=2", "env.num_envs=2", "collector.frames_per_batch=64",
           "collector.rollouts_per_batch=2", "eval.episodes=1", "eval.interval_frames=0", "logger=csv",
           "progress=false"]


def _wait_for(predicate, proc, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the Ray run did not get going in time"
        time.sleep(0.5)


def _actors(pid: int) -> set[int]:
    out = set()
    for p in descendants(pid):
        try:
            if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"ray::_Worker"):
                out.add(p)
        except OSError:
            pass
    return out


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net")
def test_a_local_ray_run_listens_on_loopback_only_and_starts_no_dashboard(tmp_path):
    proc = spawn([*RAY_RUN, "total_frames=10000000", "checkpoint.interval_frames=0"], tmp_path)
    try:
        _wait_for(lambda: len(_actors(proc.pid)) == 2 and list(tmp_path.glob("runs/*/*/metrics.csv")), proc)
        seen: dict[tuple, tuple] = {}
        for _ in range(6):  # agents and metrics servers open their ports a little after the start
            for addr, port, pid, cmd in listening_sockets(descendants(proc.pid) | {proc.pid}):
                seen[(addr, port)] = (pid, cmd)
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    listed = "\n".join(f"{a}:{p} {pid} {cmd}" for (a, p), (pid, cmd) in sorted(seen.items()))
    outside = {k: v for k, v in seen.items() if not is_loopback(k[0])}
    assert not outside, f"listening beyond this machine:\n{listed}"
    owners = " ".join(cmd for _, cmd in seen.values())
    for part in ("gcs_server", "raylet", "ray::_Worker", "DashboardAgent"):  # the measurement saw them
        assert part in owners, listed
    assert proc.pid in {pid for pid, _ in seen.values()}, listed  # the driver's own server
    assert 8265 not in {port for _, port in seen}, listed  # no dashboard web UI
    assert not wait_no_ray(), "Ray processes outlived the run"


def test_a_killed_ray_actor_stops_the_run_with_one_line_exit_4_and_keeps_its_checkpoint(tmp_path):
    proc = spawn([*RAY_RUN, "total_frames=10000000", "checkpoint.interval_frames=256"], tmp_path)
    _wait_for(lambda: list(tmp_path.glob("runs/*/*/checkpoint.pt")) and len(_actors(proc.pid)) == 2, proc)
    victim = max(_actors(proc.pid))
    start = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    proc.wait(timeout=60)
    stopped_after = time.monotonic() - start
    err = proc.stderr.read()
    # measured on the loaded 2-core machine: 4.8 s (Ray takes 1-2 s to report the death and 1-2 s
    # to stop its daemons); the bound leaves room for load
    assert stopped_after < 20, f"the run took {stopped_after:.1f} s to stop after its actor died"
    assert proc.returncode == 4, err
    errors = [line for line in err.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert len(errors) == 1 and re.match(r"rlrun: error: Ray collector worker \d died", errors[0]), err
    assert "rerun the same command" in errors[0]
    run_dir = only_run_dir(tmp_path)
    failed = summary_of(run_dir)
    assert failed["status"] == "failed"
    import torch

    assert 0 < torch.load(run_dir / "checkpoint.pt", weights_only=False)["frames"] <= failed["frames"]
    assert not wait_no_ray(), "Ray processes outlived the run"


@pytest.mark.parametrize("address, says", [("127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1"),
                                           ("notahost:abc", "must be auto, null or host:port")])
def test_a_bad_ray_address_fails_within_seconds_naming_the_key(tmp_path, capsys, address, says):
    start = time.monotonic()
    code, _, err = run_cli(["algo=impala", "env=cartpole", "collector.backend=ray",
                            f"collector.ray_address={address}", "total_frames=1000", "logger=none",
                            "progress=false"], tmp_path, capsys)
    assert time.monotonic() - start < 30  # it hung before (Ray retries an unanswered address for minutes)
    assert code == 2, err
    assert err.startswith("rlrun: error: collector.ray_address: ") and says in err, err
    assert len(err.strip().splitlines()) == 2 and "Traceback" not in err, err
    assert not ray.is_initialized() and not ray_processes()


def test_sigterm_stops_a_ray_run_with_exit_143_and_the_rerun_line(tmp_path):
    """Ray's driver handler (``sys.exit(signum)``) made it exit 15 with no line: rlrun's stays."""
    proc = spawn(["algo=impala", "env=cartpole", "seed=0", "collector.backend=ray",
                  "collector.ray_address=null", "collector.workers=2", "env.num_envs=2",
                  "collector.frames_per_batch=64",
                  "collector.rollouts_per_batch=2", "total_frames=10000000", "eval.episodes=1",
                  "eval.interval_frames=0", "checkpoint.interval_frames=64", "logger=none", "progress=false"],
                 tmp_path)
    deadline = time.time() + 240
    while time.time() < deadline and not list(tmp_path.glob("runs/*/*/checkpoint.pt")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "interrupted (signal SIGTERM)" in err and "rerun the same command" in err, err[-2000:]
    assert not wait_no_ray(), "Ray processes outlived the run"
