"""A run directory's own bookkeeping: one process at a time, its tracker run, no stale temp files.

- ``RunLock``: an exclusive ``flock`` on ``<run dir>/.rlrun.lock`` for the whole
  run. The kernel drops it when its process dies, however it dies, so a lock
  left by a killed run is taken over safely; a second live process gets one
  line naming the holder and how to run a separate copy.
- ``tracking.json``: the tracker run's id, written as soon as the run exists
  (before any training), so that a restart after a kill re-attaches to that run
  instead of leaving it orphaned in RUNNING and starting another.
- Temp files of interrupted atomic writes (``.checkpoint.pt.tmp-<pid>``) are
  removed at start, under the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from rlrun.core.errors import RlrunError

LOCK_FILE = ".rlrun.lock"
TRACKING_FILE = "tracking.json"


class RunDirInUse(RlrunError):
    """Another live process holds the run directory."""


class RunLock:
    """Holds ``<run_dir>/.rlrun.lock`` exclusively while the run lives.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> with RunLock(d):
        ...     RunLock(d).acquire()
        Traceback (most recent call last):
        rlrun.core.rundir.RunDirInUse: ...
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirInUse(
                f"run directory {self.path.parent} is in use by {holder}", key="hydra.run.dir",
                fix="wait for that run to end (rerunning the same command then continues it), or run a "
                "separate copy elsewhere: add hydra.run.dir=<another dir> (or change an override)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"process {info['pid']} on {info['host']} (since {info['since']})"
    except (ValueError, KeyError, OSError):
        return "another process"


def remove_stale_temp_files(run_dir: Path) -> list[Path]:
    """Deletes temp files of interrupted atomic writes; call with the lock held."""
    stale = [p for p in Path(run_dir).glob(".*.tmp*") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def read_tracking(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / TRACKING_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}  # data: a run directory may hold anything


def write_tracking(run_dir: Path, info: dict[str, Any]) -> None:
    from rlrun.core.checkpoint import atomic_write_text  # torch, which it imports, is loaded by then

    atomic_write_text(Path(run_dir) / TRACKING_FILE, json.dumps(info, indent=2))


def git_commit(where: Path | str | None = None, mark_dirty: bool = False) -> str | None:
    """The commit checked out at ``where`` (default: rlrun's own source tree), for run tags and
    reports; ``mark_dirty`` appends ``+dirty`` when tracked files have local changes. None outside git."""
    where = Path(__file__).parent if where is None else where

    def git(*args: str) -> str | None:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=where)
        return done.stdout.strip() if done.returncode == 0 else None

    try:
        commit = git("rev-parse", "HEAD")
        if commit and mark_dirty and git("status", "--porcelain", "--untracked-files=no", "--", "."):
            commit += "+dirty"
        return commit
    except (OSError, subprocess.SubprocessError):
        return None
