"""Who this process is among the ranks: read from the environment torchrun sets.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``
(as submitit's ``TorchDistributedEnvironment().export()`` does in a SLURM task of
``hydra/launcher=slurm`` with ``tasks_per_node``/``nodes``: ``rlrun.launch.submitit_launch``). SLURM's own
``SLURM_PROCID``/``SLURM_NTASKS`` are deliberately not read: ``hydra/launcher=slurm_ray`` runs
one rlrun on an N-task allocation, which must not wait for N - 1 ranks that never come.

The backend follows the device: gloo on CPU, NCCL on CUDA with each
rank on its ``LOCAL_RANK``'s GPU.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rlrun.core.errors import ConfigError

# a rank that dies or hangs leaves the others blocked in a collective: they give up after this
DEFAULT_TIMEOUT_S = 120.0


class WorldError(ConfigError):
    """A world that cannot start: ``key`` names the setting, ``fix`` what to do (exit 2)."""


@dataclass(frozen=True)
class World:
    """This process's place among the ranks."""

    rank: int
    size: int
    local_rank: int
    backend: str

    @property
    def leader(self) -> bool:
        """Rank 0 owns the run's face: run directory, tracker, progress line, evaluation."""
        return self.rank == 0


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        if env.get(name, "") != "":
            return int(env[name])
    return None


def world_from_env(device: str = "cpu", env: Mapping[str, str] | None = None,
                   cpus: int | None = None, gpus: int | None = None) -> World | None:
    """The world this process belongs to, or None where it runs alone (no launcher, or 1 rank).

    Raises ``WorldError`` for a world this machine cannot hold: more ranks on the node than
    cores (CPU) or GPUs (CUDA), or CUDA asked for without a GPU.
    """
    env = os.environ if env is None else env
    size = _int(env, "WORLD_SIZE")
    if size is None or size <= 1:
        return None
    rank = _int(env, "RANK") or 0
    local_rank = _int(env, "LOCAL_RANK") or 0
    local_size = _int(env, "LOCAL_WORLD_SIZE") or size
    cuda = device.startswith("cuda")
    if cuda:
        gpus = torch.cuda.device_count() if gpus is None else gpus
        if gpus == 0:
            raise WorldError("NCCL needs CUDA GPUs and this machine has none", key="device",
                             fix="device=cpu (gloo)")
        if local_size > gpus:
            raise WorldError(f"{local_size} ranks on this node but {gpus} GPUs", key="nproc-per-node",
                             fix=f"torchrun --nproc-per-node {gpus} (one rank per GPU)")
    elif env.get("RLRUN_RANKS_FROM") != "slurm":  # SLURM gave each task its CPUs (rlrun.launch)
        cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) \
            if cpus is None else cpus
        if local_size > cpus:
            raise WorldError(f"{local_size} ranks on this node but {cpus} CPU cores", key="nproc-per-node",
                             fix=f"torchrun --nproc-per-node {cpus} or fewer")
    return World(rank=rank, size=size, local_rank=local_rank, backend="nccl" if cuda else "gloo")


def start(world: World, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Joins the process group; every collective then fails after ``timeout_s`` on a dead rank."""
    if world.backend == "nccl":
        torch.cuda.set_device(world.local_rank)
    try:
        dist.init_process_group(world.backend, rank=world.rank, world_size=world.size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError) as err:  # DistNetworkError is a RuntimeError
        if "EADDRINUSE" not in str(err) and "address already in use" not in str(err).lower():
            raise
        port = os.environ.get("MASTER_PORT", "?")
        raise WorldError(f"port {port} (MASTER_PORT) on {os.environ.get('MASTER_ADDR', 'this machine')} is "
                         "in use by another process, so rank 0 cannot open the group's store there",
                         key="MASTER_PORT", fix="a free port: MASTER_PORT=<port> (torchrun --master-port "
                         "<port>, or --standalone to pick one)") from None


def stop() -> None:
    """Leaves the process group (a no-op where none is up)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """Rank ``rank``'s seed: the run's seed plus a rank offset far above any env-count offset."""
    return int(seed) + 1_000_003 * int(rank)


def shard(total: int, world: World | None, key: str) -> int:
    """This rank's share of ``total`` (a batch, a budget), which must divide by the world size."""
    if world is None:
        return total
    if total % world.size:
        raise WorldError(f"{total} does not divide by the world size {world.size}", key=key,
                         fix=f"a multiple of {world.size}")
    return total // world.size
