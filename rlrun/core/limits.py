"""How many collector workers this machine can hold: its memory and open-file limit, read without
third-party packages (Linux ``/proc`` and cgroups), against what each worker costs.

The config check compares what a run would start with these figures and refuses up
front, naming them, instead of letting the kernel's OOM killer or ``EMFILE`` stop the
run halfway through its start (``collector.workers=1000`` spawned until it failed).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

from rlrun.core.errors import ConfigError

_CGROUP_V2 = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current"))
_CGROUP_V1 = (Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
              Path("/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2, no limit) reads as None


def available_memory() -> int | None:
    """Bytes this process's new children can still use, or None where that cannot be read.

    The kernel's ``MemAvailable`` (free memory plus what caches give back), capped by the
    container's cgroup limit less its usage: in a container ``/proc/meminfo`` shows the host.
    """
    figures = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    figures.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for limit_path, usage_path in (_CGROUP_V2, _CGROUP_V1):
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit is not None and usage is not None and limit < 2**60:  # v1 writes ~2^63 for "none"
            figures.append(max(0, limit - usage))
    return min(figures) if figures else None


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a SLURM allocation's), not the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def open_files_limit() -> int | None:
    """The soft limit on this process's open files (``ulimit -n``), or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def open_files() -> int:
    """Files this process holds open now."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def gb(nbytes: float) -> str:
    """Bytes as ``1.5 GB`` (decimal gigabytes, as ``free -g`` users read them)."""
    return f"{nbytes / 1e9:.1f} GB"


@dataclass(frozen=True)
class WorkerCost:
    """What the collector's workers cost this machine: per worker, and once for the backend."""

    memory: float        # bytes per worker process (resident set)
    memory_once: float   # bytes once (the forkserver; a local Ray's own daemons)
    open_files: int      # files the main process holds open per worker
    what: str            # how the figures were measured, for the message


# Measured on Linux x86-64, torch 2.13, a CartPole-v1 worker with 8 sub-envs after five
# rollouts (/proc/<pid>/smaps_rollup): a forkserver worker's RSS is 188 MB (the forkserver
# 242 MB, once; a fork shares most pages with it until Python's reference counts dirty them),
# and the main process holds 7.5 files per worker (queues, sentinel, slots). A Ray actor's RSS is
# 332 MB (its own interpreter, torch imported again); a local Ray's daemons (GCS, raylet,
# dashboard head and agent, runtime-env agent, monitor) take 560 MB together. Larger envs and
# networks cost more: these are lower bounds, so a refused count would surely not fit.
# tests/collectors/test_multiprocess.py re-measures the local worker's RSS against this figure.
COSTS = {
    "local": WorkerCost(memory=190e6, memory_once=240e6, open_files=8,
                        what="190 MB per worker process, measured for a CartPole worker"),
    "ray": WorkerCost(memory=330e6, memory_once=560e6, open_files=0,
                      what="330 MB per Ray actor and 560 MB for a local Ray, measured for CartPole"),
}


def max_workers(backend: str) -> int | None:
    """The most workers of ``backend`` ("local", or "ray" for a local Ray) this machine can hold now,
    or None where its figures cannot be read."""
    cost, bounds = COSTS[backend], []
    free = available_memory()
    if free is not None:
        bounds.append(int((free - cost.memory_once) // cost.memory))
    files = open_files_limit()
    if files is not None and cost.open_files:
        bounds.append((files - open_files() - 64) // cost.open_files)  # 64: logs, datasets, trackers
    return max(0, min(bounds)) if bounds else None


def check_workers_fit(workers: int, backend: str, key: str) -> None:
    """Raises ConfigError naming the figures when ``workers`` would not fit this machine."""
    cost = COSTS[backend]
    most = max_workers(backend)
    if most is None or workers <= most:
        return
    free, files = available_memory(), open_files_limit()
    need = cost.memory_once + workers * cost.memory
    reasons = []
    if free is not None and need > free:
        reasons.append(f"need about {gb(need)} of memory ({cost.what}), this machine has {gb(free)} "
                       "available")
    if files is not None and cost.open_files and workers * cost.open_files > files - open_files() - 64:
        reasons.append(f"would hold {workers * cost.open_files} open files, over the limit of {files} "
                       "(ulimit -n)")
    raise ConfigError(f"{workers} workers do not fit this machine: they " + " and ".join(reasons)
                      + f" ({cpu_count()} CPUs)", key=key,
                      fix=f"set {key} to at most {most}" + (", or free memory" if free is not None else ""))
