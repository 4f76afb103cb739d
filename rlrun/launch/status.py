"""Per-job status files (``<run dir>/job.json``) and the sweep status listing.

The launcher writes a job's file before submitting it (state ``SUBMITTING``,
or ``QUEUED`` for a local job waiting for a worker) and adds the scheduler's
job id once submitted (``PENDING``); the job itself then
records ``RUNNING`` (one entry in ``attempts`` per start, so requeues show),
``REQUEUED``, and finally ``COMPLETED``, ``FAILED`` or ``INTERRUPTED``. Both
sides merge into the file under an exclusive lock, so neither loses the
other's fields.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from rlrun.core import runfiles, saved

STATUS_FILE = "job.json"
FINAL_STATES = ("COMPLETED", "FAILED", "INTERRUPTED")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def read_status(path: Path) -> dict[str, Any]:
    """The content of a status file, ``{}`` if it is missing or unreadable."""
    try:
        return saved.check_fields(saved.load_json(path), {}, path)
    except saved.SavedFileError:
        return {}


def update_status(path: Path, fresh: bool = False, **fields: Any) -> dict[str, Any]:
    """Merges ``fields`` into the status file at ``path`` and returns the result.

    Args:
        path: The status file.
        fresh: Start from an empty record (a new submission of the same run
            directory replaces the old record).
        **fields: Keys to set. Two are special: ``if_unset_state`` sets
            ``state`` only while it is missing or still ``SUBMITTING`` (the
            job may already have reported ``RUNNING``), and ``attempt`` is
            appended to the ``attempts`` list.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with runfiles.open_write(path.with_name(f".{path.name}.lock"), "a", key="hydra.sweep.dir") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the job and the launcher may write at the same moment
        data = {} if fresh else read_status(path)
        if_unset = fields.pop("if_unset_state", None)
        if if_unset is not None and data.get("state") in (None, "SUBMITTING"):
            data["state"] = if_unset
        attempt = fields.pop("attempt", None)
        if attempt is not None:
            data["attempts"] = [*data.get("attempts", []), attempt]
        data.update(fields)
        data["updated_at"] = now()
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        with runfiles.open_write(tmp, "w", key="hydra.sweep.dir") as f:
            f.write(json.dumps(data, indent=2, default=str))
        os.replace(tmp, path)  # readers never see a half-written file
    return data


def find_status(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's status record under ``sweep_dir``, by job number."""
    records = []
    for path in Path(sweep_dir).rglob(STATUS_FILE):
        data = read_status(path)
        if data:
            records.append({**data, "status_file": str(path)})
    return sorted(records, key=lambda r: (r.get("job_num", 1 << 30), r.get("run_dir", "")))


def scheduler_states(job_ids: list[str]) -> dict[str, str]:
    """SLURM's view of ``job_ids`` (``sacct``, else ``squeue``); ``{}`` if neither answers."""
    if not job_ids:
        return {}
    ids = ",".join(job_ids)
    for cmd in (["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ids],
                ["squeue", "-h", "-o", "%i|%T", "-j", ids]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0:
            states = {}
            for line in out.stdout.splitlines():
                if "|" in line:
                    jid, state = line.split("|", 1)
                    states[jid.strip()] = state.split()[0] if state.strip() else ""
            return states
    return {}


def refresh(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adds ``scheduler_state`` to unfinished SLURM jobs (a job killed hard never writes its end)."""
    live = [r["job_id"] for r in records if r.get("executor") == "slurm" and r.get("job_id")
            and r.get("state") not in FINAL_STATES]
    states = scheduler_states(live)
    for r in records:
        if r.get("job_id") in states:
            r["scheduler_state"] = states[r["job_id"]]
    return records


def format_table(records: list[dict[str, Any]]) -> str:
    """One line per job: number, job id, state (and SLURM's), attempts, frames, run dir."""
    lines = [f"{'job':>4} {'job_id':<12} {'state':<24} {'tries':>5} {'frames':>10}  run_dir"]
    for r in records:
        state = r.get("state", "?")
        if r.get("scheduler_state") and r["scheduler_state"] != state:
            state = f"{state} (slurm: {r['scheduler_state']})"
        frames = r.get("frames")
        lines.append(f"{r.get('job_num', '?'):>4} {str(r.get('job_id', '-')):<12} {state:<24} "
                     f"{len(r.get('attempts', [])):>5} {'-' if frames is None else frames:>10}  "
                     f"{r.get('run_dir', '?')}")
    return "\n".join(lines)
