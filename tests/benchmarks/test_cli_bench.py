"""The cli benchmark's measurement: whole-process wall and CPU time, exit code checked."""

from __future__ import annotations

import pytest

from rlrun.benchmarks import BENCHMARKS, cli


def test_time_command_measures_a_process_and_checks_its_exit_code():
    wall, cpu = cli.time_command(["list", "env"], expect=0)
    assert wall > 0 and 0 < cpu < 60
    with pytest.raises(RuntimeError, match="exited 2, expected 0"):
        cli.time_command(["algo=nope"], expect=0)
    assert "cli" in BENCHMARKS


def test_render_puts_before_and_after_side_by_side():
    rows = [{"case": "list", "command": "rlrun list", "after_s": 0.5, "after_cpu_s": 0.4, "before_s": 3.0,
             "before_cpu_s": 2.9, "ratio": 6.0, "ratio_min": 5.0, "ratio_max": 7.0, "target_s": 1.5}]
    text = cli.render({"reps": 3, "before": "/old", "rows": rows})
    assert "| list | rlrun list | 3.00 | 2.90 | 0.50 | 0.40 | 6.00 | 5.00 | 7.00 | 1.5 |" in text
