"""A child process whose stderr lines are read as they come (the kill harnesses' attempts)."""

from __future__ import annotations

import queue
import subprocess
import threading
from pathlib import Path


class Followed:
    """``cmd`` started in ``cwd``; ``lines`` gets each stderr line (None at its end), ``err`` keeps them."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            self.lines.put(line)
        self.lines.put(None)
