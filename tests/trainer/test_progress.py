"""Progress off a terminal: a line at the start, then one per interval, and the run's log file."""

from __future__ import annotations

import logging

from cli_utils import only_run_dir, run_cli

from rlrun.loggers import tracking
from rlrun.loggers.tracking import Progress


def test_off_a_terminal_lines_print_once_per_interval(capsys, monkeypatch):
    clock = iter([0.0, 3.0, 9.9, 10.5, 25.0, 26.0])
    monkeypatch.setattr(tracking.time, "monotonic", lambda: next(clock))
    progress = Progress(total=600, initial=0, enabled="auto", interval=10.0)  # stderr is not a TTY here
    assert progress.bar is None and progress.enabled
    for frames in (100, 200, 300, 400, 500, 600):
        progress.update(frames, {"fps": 1000.0})
    lines = capsys.readouterr().err.splitlines()
    # t=0 (first batch), t=10.5 (10 s after it), t=25 (again >= 10 s), and the last batch.
    assert lines == ["[rlrun] frames 100/600 (17%) fps=1000", "[rlrun] frames 400/600 (67%) fps=1000",
                     "[rlrun] frames 500/600 (83%) fps=1000", "[rlrun] frames 600/600 (100%) fps=1000"]


def test_progress_false_prints_nothing(capsys):
    progress = Progress(total=10, initial=0, enabled=False)
    progress.update(10, {})
    assert capsys.readouterr().err == ""


def test_the_bar_shows_one_rate(monkeypatch):
    monkeypatch.setattr(tracking.sys.stderr, "isatty", lambda: True, raising=False)
    progress = Progress(total=100, initial=0, enabled="auto")
    progress.update(50, {"fps": 123.0, "return": 7.0})
    assert progress.bar is not None
    assert "fps" not in progress.bar.postfix and "return=7" in progress.bar.postfix
    progress.close()


def test_the_run_log_holds_rlruns_lines(tmp_path, capsys):
    code, _, err = run_cli(["total_frames=512", "logger=none", "eval.episodes=1"], tmp_path, capsys)
    assert code == 0, err
    text = (only_run_dir(tmp_path) / "rlrun.log").read_text()
    assert "frames 512/512 (100%)" in text and "[rlrun] finished: 512 frames" in text
    logging.getLogger("rlrun").handlers.clear()  # Hydra's file handler points into tmp_path
