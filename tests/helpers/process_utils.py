"""Process trees from Linux /proc, for tests that check no process is left behind."""

from __future__ import annotations

import os
import time


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) for every process."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(name)] = (int(fields[1]), fields[0])
    return table


def descendants(pid: int) -> set[int]:
    table = _proc_table()
    out, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _) in table.items():
            if ppid == parent and child not in out:
                out.add(child)
                todo.append(child)
    return out


def running(pids: set[int]) -> set[int]:
    """The pids still running (zombies, waiting for a reaper, do not count)."""
    table = _proc_table()
    return {p for p in pids if p in table and table[p][1] != "Z"}


def wait_gone(pids: set[int], timeout_s: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while running(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return running(pids)
