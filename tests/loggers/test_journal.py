"""The journal's edges that its end-to-end tests (tests/lifecycle/test_tracking.py) do not reach:
a tracker that cannot say what it holds, the line at ``finish``, and the rows' wall-clock times
(issue 45: each killed a surviving mutant of rlrun/loggers/journal.py, see tests/MUTANTS.md)."""

from __future__ import annotations

import time
from collections import Counter

from rlrun.loggers.journal import JournaledLogger


class PlainTracker:
    """A tracker with only ``log_metrics`` (CSV- or TensorBoard-like): no ``last_steps``, no batches."""

    run_id = "plain"

    def __init__(self, fail: bool = False):
        self.rows: list[tuple[str, int]] = []
        self.fail = fail

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if self.fail:
            raise ConnectionError("server down")
        self.rows += [(k, step) for k in metrics]

    def finish(self, status: str = "FINISHED") -> None: ...


class TimedTracker:
    """Keeps the wall-clock time (ms) each row was logged with."""

    run_id = "timed"

    def __init__(self):
        self.times: list[int] = []

    def log_metric_rows(self, rows) -> None:
        self.times += [t for _, t, _ in rows]

    def finish(self, status: str = "FINISHED") -> None: ...


def test_a_tracker_that_cannot_say_what_it_holds_gets_the_interrupted_batch_again(tmp_path):
    """Killed between the send and the journal's update, with a tracker without ``last_steps``: the
    resumed run sends the batch again (at least once), rather than keeping it back for ever."""
    tracker = PlainTracker()
    log = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=None)
    for step in (1, 2):
        log.log_metrics({"a": step}, step)
    journal = (tmp_path / "t.journal").read_text()
    log.commit(2)
    (tmp_path / "t.journal").write_text(journal)  # the kill: journal and marker as before the update
    (tmp_path / "t.journal.sending").touch()
    resumed = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=2)
    resumed.finish()
    assert Counter(tracker.rows) == {("a", 1): 2, ("a", 2): 2}
    assert not (tmp_path / "t.journal").exists() and not (tmp_path / "t.journal.sending").exists()


def test_finish_says_how_many_checkpointed_rows_the_tracker_lacks(tmp_path, capsys):
    """Rows up to the last checkpoint that a failing tracker did not take are counted at ``finish``
    (rows past the checkpoint are not: they were never checkpointed), and the journal is kept."""
    tracker = PlainTracker(fail=True)
    log = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=None)
    for step in (1, 2, 3):
        log.log_metrics({"a": step}, step)
    log.commit(2)
    capsys.readouterr()
    log.finish()
    err = capsys.readouterr().err
    assert "2 rows of metrics are not yet in the tracker" in err, err
    assert (tmp_path / "t.journal").exists()


def test_rows_carry_the_wall_clock_time_in_milliseconds(tmp_path):
    tracker = TimedTracker()
    log = JournaledLogger(tracker, tmp_path / "t.journal", resume_step=None)
    before = time.time() * 1000
    log.log_metrics({"a": 1.0}, 1)
    log.commit(1)
    log.finish()
    assert len(tracker.times) == 1 and before - 1 <= tracker.times[0] <= time.time() * 1000 + 1
