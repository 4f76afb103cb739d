"""``hydra/launcher=slurm_ray``: each job is an N-node SLURM allocation that runs a Ray cluster.

submitit submits one sbatch job per run with ``--nodes=N --ntasks-per-node=1`` and
starts one task per node through ``srun``. In every task this launcher's job side
runs first:

- rank 0 (the allocation's first node) starts the Ray head (``ray start --head``),
  waits until the other N - 1 nodes have joined, runs the rlrun job there with
  ``collector.backend=ray collector.ray_address=<first node>:<ray_port>`` added to
  its overrides, then writes ``<job id>_ray_done`` in the submitit folder and stops Ray;
- every other rank waits for the head's port, joins with ``ray start --address``
  and holds its node until that file appears (or the head goes away), then stops Ray.

Each node offers ``cpus_per_task`` CPUs to Ray; the collector's actors take one each,
so ``collector.workers`` up to ``nodes x cpus_per_task`` (minus what the learner needs)
fit. Preemption and time-outs requeue the whole allocation, which resumes from the
run's checkpoint as with ``hydra/launcher=slurm``.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun.launch.submitit_launch import SlurmConf, SlurmLauncherBase

RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]  # the job's own interpreter's ray, not PATH's


@dataclass
class SlurmRayConf(SlurmConf):
    """``hydra/launcher=rlrun_slurm_ray``: SlurmConf with ``nodes`` per job and the Ray head's port."""

    _target_: str = "hydra_plugins.rlrun_launch.plugins.SlurmRayLauncher"
    nodes: int = 2
    tasks_per_node: int = 1
    ray_port: int = 6379
    ray_start_timeout_s: int = 600  # for all nodes to join (srun starts them one by one)


def head_command(port: int, cpus: int) -> list[str]:
    """The command rank 0 runs on the first node."""
    return [*RAY_CLI, "start", "--head", f"--port={port}", f"--num-cpus={cpus}", "--include-dashboard=false",
            "--disable-usage-stats"]


def worker_command(address: str, cpus: int) -> list[str]:
    """The command every other rank runs on its node."""
    return [*RAY_CLI, "start", f"--address={address}", f"--num-cpus={cpus}", "--disable-usage-stats"]


def stop_command() -> list[str]:
    return [*RAY_CLI, "stop", "--force"]


def auth_env(token_path: Path) -> dict[str, str]:
    """Ray's token authentication, explicit in every process of the allocation, with the job's own token.

    Ray 2.60 starts a head with token authentication by default, but a driver or a
    worker node that connects with ``address=...`` only sends a token when
    ``RAY_AUTH_MODE=token`` is set (seen here: "Authentication token is missing or
    incorrect" otherwise). The token lives in the submitit folder, which every node sees.
    """
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


def write_token(token_path: Path) -> None:
    token_path.unlink(missing_ok=True)
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def job_overrides(overrides: list[str], address: str) -> list[str]:
    """The run's overrides with the collector pointed at the allocation's Ray cluster."""
    ours = ("collector.backend=", "collector.ray_address=")
    own = [o for o in overrides if not o.lstrip("+~").startswith(ours)]
    return [*own, "collector.backend=ray", f"collector.ray_address={address}"]


def cpus_per_node() -> int:
    return int(os.environ.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def _wait(what: str, ready: Any, timeout_s: float, poll_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"slurm_ray: {what} within {timeout_s:.0f} s "
                               "(raise hydra.launcher.ray_start_timeout_s?)")
        time.sleep(poll_s)


class SlurmRayLauncherBase(SlurmLauncherBase):
    """A SLURM job per run over ``nodes`` nodes, with a Ray head on the first and Ray workers on the rest."""

    _OWN_PARAMS = ("wait", "ray_port", "ray_start_timeout_s")
    _TASKS_ARE_RANKS = False  # its tasks hold Ray nodes; one rlrun runs on the first

    def __call__(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: dict, status_file: str | None = None) -> Any:
        import submitit

        env = submitit.JobEnvironment()
        port = int(self.options.get("ray_port", 6379))
        timeout_s = float(self.options.get("ray_start_timeout_s", 600))
        head = env.hostnames[0]
        address = f"{head}:{port}"
        folder = Path(env.paths.folder)
        done, token = folder / f"{env.job_id}_ray_done", folder / f"{env.job_id}_ray_token"
        os.environ.update(auth_env(token))  # for the ray commands and this process's ray.init
        if env.global_rank != 0:
            return self._hold_worker_node(head, port, address, done, token, timeout_s)
        done.unlink(missing_ok=True)  # a requeued job starts a fresh cluster, with a fresh token
        write_token(token)
        subprocess.run(head_command(port, cpus_per_node()), check=True)
        try:
            if env.num_nodes > 1:
                import ray

                ray.init(address=address, configure_logging=False)
                try:
                    _wait(f"{env.num_nodes - 1} Ray worker node(s) did not join",
                          lambda: sum(n["Alive"] for n in ray.nodes()) >= env.num_nodes, timeout_s)
                finally:
                    ray.shutdown()
            return super().__call__(job_overrides(list(sweep_overrides), address), job_dir_key, job_num,
                                    job_id, singleton_state, status_file)
        finally:
            done.touch()
            subprocess.run(stop_command(), check=False)

    @staticmethod
    def _hold_worker_node(head: str, port: int, address: str, done: Path, token: Path,
                          timeout_s: float) -> None:
        _wait(f"the Ray head at {address} did not start", lambda: token.exists() and _reachable(head, port),
              timeout_s)
        subprocess.run(worker_command(address, cpus_per_node()), check=True)
        try:
            _wait("never", lambda: done.exists() or not _reachable(head, port), float("inf"), poll_s=5.0)
        finally:
            subprocess.run(stop_command(), check=False)
        return None
