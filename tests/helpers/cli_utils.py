"""Runs the rlrun CLI in-process (fast) or in a fresh process (signals, isolation)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from rlrun.cli.main import main


def run_cli(args: list[str], cwd: Path, capsys) -> tuple[int, str, str]:
    """Runs ``rlrun *args`` in this process with ``cwd``; returns (exit code, stdout, stderr)."""
    old = Path.cwd()
    os.chdir(cwd)
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(old)
    out, err = capsys.readouterr()
    return code, out, err


def spawn(args: list[str], cwd: Path, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    """Starts ``python -m rlrun *args`` in a fresh process (``env`` adds to this one's environment)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "rlrun", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def logged(run_dir: Path, key: str) -> dict[int, float]:
    """``key``'s values in the run's metrics.csv (logger=csv), by step, in logged order."""
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return {int(r["step"]): float(r["value"]) for r in rows if r["key"] == key}


def only_run_dir(cwd: Path) -> Path:
    dirs = [p.parent for p in cwd.glob("runs/**/summary.json")]
    assert len(dirs) == 1, dirs
    return dirs[0]
