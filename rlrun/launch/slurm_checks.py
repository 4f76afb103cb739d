"""SLURM jobs that could never start: requests checked before submitting, hopeless waits stopped.

``check_requests`` compares the launcher's requests (``cpus_per_task``,
``mem_gb``, ``gpus_per_node``, ``timeout_min``, ``partition``) with what the
partition's nodes have (``scontrol show partition/node``) and raises a
``ConfigError`` naming the ``hydra.launcher.*`` key and the largest value that
fits. ``hopeless`` picks, among pending jobs, those whose reason cannot clear
by waiting (``PartitionConfig``, a per-job QOS limit, ...), so that the sweep
stops with the keys to change instead of waiting forever. ``outcome_table``
prints what became of each job.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from rlrun.core.errors import ConfigError

KEY = "hydra.launcher"

# Pending reasons that waiting cannot clear (the request exceeds a limit), and the keys to change.
NEVER_CLEARS = {
    "PartitionConfig": ("cpus_per_task", "mem_gb", "gpus_per_node", "partition"),
    "PartitionTimeLimit": ("timeout_min",),
    "PartitionNodeLimit": ("nodes",),
    "BadConstraints": ("additional_parameters",),
    "DependencyNeverSatisfied": ("additional_parameters",),
    "InvalidAccount": ("additional_parameters",),
    "InvalidQOS": ("additional_parameters",),
}
# Per-job QOS/association limits: the job alone is over them, waiting does not help.
_PER_JOB_LIMIT = re.compile(r"^(QOS|Assoc)Max(\w*?)(PerJob)(Limit)?$")
_LIMIT_KEYS = {"Cpu": "cpus_per_task", "Mem": "mem_gb", "Memory": "mem_gb", "Wall": "timeout_min",
               "GRES": "gpus_per_node", "Node": "nodes"}


class SlurmQueryError(RuntimeError):
    """scontrol/sinfo/squeue did not answer."""


@dataclass
class Node:
    name: str
    cpus: int
    mem_mb: int
    gpus: int


@dataclass
class Partition:
    name: str
    nodes: list[Node]
    max_time_min: float | None  # None: unlimited
    max_mem_per_node_mb: int | None


def _run(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        raise SlurmQueryError(f"{cmd[0]}: {err}") from None
    if out.returncode != 0:
        raise SlurmQueryError(f"{' '.join(cmd)}: {out.stderr.strip()[:300]}")
    return out.stdout


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S*)", line))


def parse_minutes(text: str) -> float | None:
    """SLURM's time (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) in minutes; None: unlimited."""
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = (parts + [0, 0])[:3]
        return int(days) * 1440 + h * 60 + m + s / 60
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return parts[0] + parts[1] / 60
    return parts[0] * 60 + parts[1] + parts[2] / 60


def gres_gpus(gres: str) -> int:
    """GPUs in a node's ``Gres`` (``gpu:4``, ``gpu:a100:2(S:0-1)``, ``(null)``)."""
    total = 0
    for item in gres.split(","):
        item = re.sub(r"\(.*?\)", "", item)
        if item.startswith("gpu"):
            last = item.split(":")[-1]
            total += int(last) if last.isdigit() else 1
    return total


def default_partition() -> str:
    names = _run(["sinfo", "-h", "-o", "%P"]).split()
    default = [n.rstrip("*") for n in names if n.endswith("*")]
    if not default:
        raise ConfigError("the cluster has no default partition", key=f"{KEY}.partition",
                          fix=f"set {KEY}.partition to one of {', '.join(names)}")
    return default[0]


def partition_info(name: str) -> Partition:
    """The partition's limits and nodes, from ``scontrol show partition/node``."""
    try:
        part = _fields(_run(["scontrol", "-o", "show", "partition", name]))
    except SlurmQueryError:
        names = sorted({n.rstrip("*") for n in _run(["sinfo", "-h", "-o", "%P"]).split()})
        raise ConfigError(f"the cluster has no partition {name!r}", key=f"{KEY}.partition",
                          fix=f"use one of: {', '.join(names)}") from None
    nodes = []
    node_list = part.get("Nodes", "")
    if node_list and node_list != "(null)":
        for line in _run(["scontrol", "-o", "show", "node", node_list]).splitlines():
            f = _fields(line)
            if "NodeName" in f:
                nodes.append(Node(f["NodeName"], int(f.get("CPUTot", 0)), int(f.get("RealMemory", 0)),
                                  gres_gpus(f.get("Gres", ""))))
    max_mem = part.get("MaxMemPerNode", "UNLIMITED")
    return Partition(name, nodes, parse_minutes(part.get("MaxTime", "UNLIMITED")),
                     int(max_mem) if max_mem.isdigit() else None)


def check_requests(params: dict[str, Any], part: Partition) -> None:
    """Raises ConfigError when no node of ``part`` can ever run a job with these launcher params."""
    where = f"partition {part.name!r}"
    if not part.nodes:
        raise ConfigError(f"{where} has no nodes", key=f"{KEY}.partition", fix="choose another partition")
    n_nodes = int(params.get("nodes") or 1)
    if n_nodes > len(part.nodes):
        raise ConfigError(f"asks for {n_nodes} nodes, {where} has {len(part.nodes)}", key=f"{KEY}.nodes",
                          fix=f"set {KEY}.nodes={len(part.nodes)} or less")
    tasks = int(params.get("tasks_per_node") or 1)
    cpus = int(params.get("cpus_per_task") or 1) * tasks
    mem_mb = float(params["mem_gb"]) * 1024 if params.get("mem_gb") else 0
    gpus = int(params.get("gpus_per_node") or 0)
    timeout = params.get("timeout_min")

    def mem_of(n: Node) -> int:
        return min(n.mem_mb, part.max_mem_per_node_mb or n.mem_mb)

    biggest_cpus = max(n.cpus for n in part.nodes)
    if cpus > biggest_cpus:
        raise ConfigError(f"asks for {cpus} CPUs per node, the largest node of {where} has {biggest_cpus}",
                          key=f"{KEY}.cpus_per_task",
                          fix=f"set {KEY}.cpus_per_task={biggest_cpus // tasks} or less, or pick another "
                          "partition")
    biggest_mem = max(mem_of(n) for n in part.nodes)
    if mem_mb > biggest_mem:
        raise ConfigError(f"asks for {params['mem_gb']} GB, the largest node of {where} has "
                          f"{biggest_mem} MB", key=f"{KEY}.mem_gb",
                          fix=f"set {KEY}.mem_gb={biggest_mem // 1024} or less"
                          + ("" if biggest_mem >= 1024 else " (or null: SLURM's default memory)"))
    biggest_gpus = max(n.gpus for n in part.nodes)
    if gpus > biggest_gpus:
        raise ConfigError(f"asks for {gpus} GPUs per node, the nodes of {where} have at most {biggest_gpus}",
                          key=f"{KEY}.gpus_per_node",
                          fix=(f"set {KEY}.gpus_per_node={biggest_gpus} or less" if biggest_gpus else
                               f"set {KEY}.gpus_per_node=null, or a partition with GPUs"))
    if timeout is not None and part.max_time_min is not None and float(timeout) > part.max_time_min:
        raise ConfigError(f"asks for {timeout} min, the time limit of {where} is {part.max_time_min:g} min",
                          key=f"{KEY}.timeout_min",
                          fix=f"set {KEY}.timeout_min={int(part.max_time_min)} or less (jobs requeue and "
                          "resume at their time limit)")
    if not any(n.cpus >= cpus and mem_of(n) >= mem_mb and n.gpus >= gpus for n in part.nodes):
        raise ConfigError(f"no single node of {where} has {cpus} CPUs, {mem_mb / 1024:g} GB and {gpus} GPUs "
                          "at once", key=f"{KEY}.cpus_per_task",
                          fix=f"lower {KEY}.cpus_per_task, {KEY}.mem_gb or {KEY}.gpus_per_node")


def preflight(params: dict[str, Any]) -> None:
    """``check_requests`` against the partition the jobs go to; skipped where SLURM cannot be asked.

    Without ``srun``/``sbatch`` (a machine that is no SLURM node) nothing can be submitted: one line
    naming the missing command, not submitit's traceback (``Could not detect "srun"``)."""
    missing = [c for c in ("srun", "sbatch") if shutil.which(c) is None]
    if missing:
        raise ConfigError(f"the SLURM launcher submits through SLURM, and `{missing[0]}` is not on this "
                          "machine's PATH", key="hydra/launcher",
                          fix="run on a SLURM login node (srun and sbatch on PATH), or drop "
                          "hydra/launcher=... to run the sweep here")
    if shutil.which("scontrol") is None or shutil.which("sinfo") is None:
        return
    try:
        part = partition_info(str(params.get("partition") or default_partition()))
    except SlurmQueryError:
        return  # submitting will report an unreachable controller itself
    check_requests(params, part)


def keys_for(reason: str) -> tuple[str, ...] | None:
    """The launcher keys to change for a pending reason that cannot clear; None if waiting may help."""
    if reason in NEVER_CLEARS:
        return NEVER_CLEARS[reason]
    m = _PER_JOB_LIMIT.match(reason)
    if m:
        return (_LIMIT_KEYS.get(m.group(2), "additional_parameters"),)
    return None


def pending_reasons(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """``job id -> (state, reason)`` from squeue, array tasks one by one; {} if squeue does not answer."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    if not arrays:
        return {}
    try:
        out = _run(["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i|%T|%r"])
    except SlurmQueryError:
        return {}
    rows = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            rows[parts[0]] = (parts[1], parts[2])
    return rows


def hopeless(job_ids: list[str]) -> dict[str, str]:
    """``job id -> reason`` for the jobs that are pending for a reason that cannot clear."""
    return {j: reason for j, (state, reason) in pending_reasons(job_ids).items()
            if state == "PENDING" and keys_for(reason) is not None}


def hopeless_error(stuck: dict[str, str], n_jobs: int) -> ConfigError:
    reason = next(iter(stuck.values()))
    keys = keys_for(reason) or ()
    return ConfigError(
        f"{len(stuck)} of {n_jobs} job(s) can never start: PENDING ({reason}); the sweep's jobs were "
        "cancelled", key=f"{KEY}.{keys[0]}" if keys else KEY,
        fix=f"change {', '.join(f'{KEY}.{k}' for k in keys)} to fit the partition "
        "(see `scontrol show partition` and `sinfo -N -l`)")


def outcome_table(rows: list[tuple[int, str, str, str, str]]) -> str:
    """Rows of (job number, job id, SLURM state, rlrun state, run dir) as a table."""
    lines = [f"{'job':>4} {'job_id':<14} {'slurm':<12} {'rlrun':<12} run_dir"]
    lines += [f"{n:>4} {jid:<14} {s:<12} {r:<12} {d}" for n, jid, s, r, d in rows]
    return "\n".join(lines)
