"""The startup benchmark's measurement: whole processes, exit codes checked, excess over import torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrun.benchmarks import BENCHMARKS, startup


def test_time_checks_the_exit_code(tmp_path: Path):
    assert startup._time(["-c", "pass"], 0, tmp_path, None) > 0
    with pytest.raises(RuntimeError, match="exited 3, expected 0"):
        startup._time(["-c", "import sys; sys.exit(3)"], 0, tmp_path, None)
    assert "startup" in BENCHMARKS


def test_render_shows_the_excess_over_import_torch():
    rows = [{"case": "run_none", "side": "after", "command": "python -m rlrun", "wall_s": 2.5,
             "excess_s": 0.6, "ratio": 1.4, "target_excess_s": 0.7}]
    text = startup.render({"reps": 3, "before": None, "rows": rows})
    assert "| run_none | after | 2.50 | 0.60 | 1.40 | 0.7 |" in text
