"""The startup benchmark's measurement: whole processes, exit codes checked, excess over import torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrun.benchmarks import BENCHMARKS, startup
from rlrun.benchmarks.cli import time_python


def test_time_checks_the_exit_code(tmp_path: Path):
    assert time_python(["-c", "pass"], 0, tmp_path)[0] > 0
    with pytest.raises(RuntimeError, match="exited 3, expected 0"):
        time_python(["-c", "import sys; sys.exit(3)"], 0, tmp_path)
    assert "startup" in BENCHMARKS


def test_the_warm_up_may_write_bytecode_where_the_environment_forbids_it(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    writes = ["-c", "import sys; sys.exit(3 if sys.dont_write_bytecode else 0)"]
    time_python(writes, 0, tmp_path, write_bytecode=True)
    time_python(writes, 3, tmp_path)  # timed runs keep the environment as it is


def test_render_shows_the_excess_over_import_torch():
    rows = [{"case": "run_none", "side": "after", "command": "python -m rlrun", "wall_s": 2.5,
             "excess_s": 0.6, "ratio": 1.4, "target_excess_s": 0.7}]
    text = startup.render({"reps": 3, "before": None, "rows": rows})
    assert "| run_none | after | 2.50 | 0.60 | 1.40 | 0.7 |" in text
