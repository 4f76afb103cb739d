"""torchrun's worker processes by rank, from Linux /proc (for the rank kill tests)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def rank_pids(parent: int) -> dict[int, int]:
    """rank -> pid of torchrun's workers (their RANK environment variable)."""
    out = {}
    for pid in subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = [e.split(b"=", 1)[1] for e in env if e.startswith(b"RANK=")]
        if rank:
            out[int(rank[0])] = int(pid)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
