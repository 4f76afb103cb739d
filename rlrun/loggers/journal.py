"""Metrics held back until a checkpoint covers them, for trackers that cannot retract a value.

A resumed run continues from its last checkpoint, at step N: whatever a killed attempt
logged after N is superseded. Files can drop those rows (``metrics.csv`` is rewritten,
TensorBoard purges them), but a tracker such as MLflow or W&B cannot delete a logged
metric, least of all on a remote server. So ``JournaledLogger`` appends each call of
``log_metrics`` to a journal in the run directory (one JSON line) and sends rows to the
tracker only once a checkpoint covering their step is committed (``commit(step)``, called
by the run after each checkpoint and at the end), in order, in batches. On resume the
journal keeps only the rows up to the checkpoint's step and sends those not sent yet.

A kill can fall between a send and the journal's update. The journal marks a send in
progress (``<journal>.sending``); the next process then asks the tracker for the last step
it holds per metric (``last_steps``) and sends only later rows, so every (metric, step)
reaches the tracker once. A tracker that cannot say (no ``last_steps``) gets such a batch
again: at least once. A tracker that fails (a server down) keeps the rows in the journal
for the next checkpoint, or the next run of the same command: training goes on.

The tracker therefore shows metrics up to the last checkpoint, with a delay of at most one
checkpoint interval; a run that fails or diverges sends nothing past its last checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from rlrun.loggers import pause_point

BATCH_METRICS = 1000  # MLflow's log_batch takes at most 1000 metrics per request

Row = tuple[int, int, dict[str, float]]  # step, wall time in ms, metrics


class JournaledLogger:
    """Wraps a logger that cannot retract (``inner``) so that it receives each (metric, step) once.

    ``inner`` needs ``log_metrics(metrics, step)``; it may offer ``log_metric_rows(rows)``
    (several steps in one request, each row ``(step, time_ms, metrics)``) and
    ``last_steps(keys) -> {key: last step held}``. Every other call goes to it unchanged.

    Args:
        inner: The tracker's logger.
        path: The journal file, in the run directory (e.g. ``<run_dir>/mlflow.journal``).
        resume_step: None for a fresh start (an old journal is dropped); else the step of the
            checkpoint the run continues from: later rows are dropped, earlier ones sent.
        resend: Keep sent rows too, and send every row up to ``resume_step`` again on resume:
            for a tracker that may lose what a killed process handed it but keeps only the first
            value of a step itself (W&B's service process dies with a SIGKILLed run, unflushed;
            a step it holds already is dropped), at least once is what leaves no gap.
    """

    def __init__(self, inner: Any, path: Path, resume_step: int | None, resend: bool = False):
        self._file = None
        self.inner, self.path = inner, Path(path)
        self._marker = self.path.with_name(self.path.name + ".sending")
        self._pending: list[Row] = []
        self._sent: list[Row] = []  # kept only with ``resend``
        self._resend = resend
        self._last_sent: dict[str, int] = {}
        self._committed: int | None = None
        self._warned = False
        if resume_step is None:
            self.path.unlink(missing_ok=True)
            self._marker.unlink(missing_ok=True)
        else:
            self._pending = [r for r in _read(self.path) if r[0] <= resume_step]
        self._rewrite()  # the rows of an abandoned attempt go; the file is opened for appending
        if resume_step is not None:
            self.commit(resume_step)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def run_id(self) -> str | None:
        return self.inner.run_id  # read when needed: the tracker may make its run meanwhile

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        row = (int(step), int(time.time() * 1000), {k: float(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()  # in the OS's hands: a killed process loses nothing
        self._pending.append(row)

    def commit(self, step: int) -> None:
        """A checkpoint at ``step`` is written: sends every held row up to it."""
        self._committed = max(step, self._committed if self._committed is not None else step)
        due = [r for r in self._pending if r[0] <= step]
        if not due:
            return
        try:
            if self._marker.exists():  # an earlier send may have landed in part
                self._skip_what_the_tracker_holds(due)
            self._marker.touch()
            self._send(due)
            if self._resend:
                self._sent.extend(due)
            self._pending = [r for r in self._pending if r[0] > step]
            self._rewrite()
            self._marker.unlink(missing_ok=True)
        except Exception as err:  # a tracker that fails must not end the training
            from rlrun.loggers.store import error_line

            if not self._warned:
                self._warned = True
                _say(f"[rlrun] the tracker did not take the metrics ({error_line(err)}); they are "
                     f"kept in {self.path} and sent at the next checkpoint")

    def log_params(self, params: dict[str, Any]) -> None:
        self.inner.log_params(params)

    def log_artifact(self, path: str | Path) -> None:
        self.inner.log_artifact(path)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.inner.set_tags(tags)

    def finish(self, status: str = "FINISHED") -> None:
        """Sends what the last checkpoint covers (rows past it were not checkpointed), then ends."""
        if self._committed is not None:
            self.commit(self._committed)
        self._file.close()
        self._sent = []  # the run ended: nothing will need sending again
        left = [r for r in self._pending if self._committed is not None and r[0] <= self._committed]
        if left:
            _say(f"[rlrun] {len(left)} rows of metrics are not yet in the tracker; they are kept in "
                 f"{self.path}: rerun the same command to send them")
        elif not self._pending:
            self.path.unlink(missing_ok=True)
        self.inner.finish(status)

    def _send(self, rows: list[Row]) -> None:
        batch: list[Row] = []
        size = 0
        last = dict(self._last_sent)
        for step, t, metrics in rows:
            # once per (metric, step): a step the tracker already holds is not sent again
            fresh = {k: v for k, v in metrics.items() if step > last.get(k, -1)}
            if not fresh:
                continue
            last.update(dict.fromkeys(fresh, step))
            if size + len(fresh) > BATCH_METRICS and batch:
                self._send_batch(batch)
                batch, size = [], 0
            batch.append((step, t, fresh))
            size += len(fresh)
        if batch:
            self._send_batch(batch)
        self._last_sent = last
        pause_point("journal_send")  # sent, the journal not yet updated

    def _send_batch(self, rows: list[Row]) -> None:
        if hasattr(self.inner, "log_metric_rows"):
            self.inner.log_metric_rows(rows)
        else:
            for step, _, metrics in rows:
                self.inner.log_metrics(metrics, step)

    def _skip_what_the_tracker_holds(self, rows: list[Row]) -> None:
        ask = getattr(self.inner, "last_steps", None)
        if ask is None:
            return  # cannot tell: the batch goes again (at least once)
        keys = sorted({k for _, _, m in rows for k in m})
        for k, s in ask(keys).items():
            self._last_sent[k] = max(s, self._last_sent.get(k, s))

    def _rewrite(self) -> None:
        """Replaces the journal by the rows still held (temp file and ``os.replace``)."""
        if self._file is not None:
            self._file.close()
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in [*self._sent, *self._pending])
        os.replace(tmp, self.path)
        self._file = open(self.path, "a")


def _read(path: Path) -> list[Row]:
    """The journal's rows; a line cut short by a kill mid-write is skipped."""
    rows: list[Row] = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            step, t, metrics = json.loads(line)
            rows.append((int(step), int(t), dict(metrics)))
        except (ValueError, TypeError):
            continue
    return rows


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
    logging.getLogger("rlrun").info(line)
