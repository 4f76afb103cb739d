"""Experiment tracking: MLflow (embedded SQLite store by default), CSV, or nothing.

Every algorithm logs the same metric names (``train/episode_return``,
``eval/episode_return``, ``loss/*``, ``time/fps``, ``frames``) with the frame
count as step, so runs compare across algorithms in one store.
"""

from __future__ import annotations

import csv
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from rlrun.core.contracts import Logger
from rlrun.core.errors import ConfigError
from rlrun.core.registry import PositiveInt, register
from rlrun.core.runfiles import check_file, check_tree, open_write
from rlrun.loggers.journal import JournaledLogger
from rlrun.loggers.mlflow_logger import MLflowLogger, store_errors

log = logging.getLogger("rlrun")
"""rlrun's own messages; Hydra's job log file (``<run dir>/rlrun.log``) receives them."""


def say(line: str) -> None:
    """Prints a message of rlrun to stderr and writes it to the run's log file (``log``)."""
    print(line, file=sys.stderr, flush=True)
    log.info(line)


class NullLogger(Logger):
    """Records nothing (``logger=none``)."""


def set_aside(path: Path) -> Path | None:
    """Renames ``path`` to the first free ``<stem>.prev-N<suffix>``; returns the new path (None if absent)."""
    if not path.exists():
        return None
    n = 1
    while (aside := path.with_name(f"{path.stem}.prev-{n}{path.suffix}")).exists():
        n += 1
    path.rename(aside)
    return aside


class CSVLogger(Logger):
    """Writes ``step,key,value`` rows to ``<run_dir>/metrics.csv``.

    A resumed run continues the file from its checkpoint's step: rows logged after it
    (by the attempt that was killed) are dropped first, in an atomic rewrite. A fresh start
    in a directory that has one (``resume=false``, or another config) moves the old
    ``metrics.csv`` and ``params.csv`` aside as ``*.prev-N.csv`` and starts new ones.
    """

    def __init__(self, run_dir: Path, resumed: bool = False, resume_step: int | None = None):
        self.path = Path(run_dir) / "metrics.csv"
        if not resumed:
            for old in (self.path, self.path.with_name("params.csv")):
                if (aside := set_aside(old)) is not None:
                    print(f"[rlrun] fresh start: kept the previous {old.name} as {aside.name}",
                          file=sys.stderr)
        elif resume_step is not None and self.path.exists():
            _keep_rows_up_to(self.path, resume_step)
        new = not self.path.exists()
        self._file = open_write(self.path, "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(["step", "key", "value"])

    def log_params(self, params: dict[str, Any]) -> None:
        with open_write(self.path.with_name("params.csv"), "w", newline="") as f:
            csv.writer(f).writerows(sorted(params.items()))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._writer.writerows([step, k, v] for k, v in metrics.items())
        self._file.flush()  # in the OS's hands at once: a kill loses nothing logged

    def finish(self, status: str = "FINISHED") -> None:
        self._file.close()


def _keep_rows_up_to(path: Path, step: int) -> None:
    """Rewrites a ``step,key,value`` file without the rows past ``step`` (temp file, ``os.replace``)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    kept = [r for i, r in enumerate(rows) if i == 0 or (len(r) == 3 and r[0].isdigit() and int(r[0]) <= step)]
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        csv.writer(f).writerows(kept)
    os.replace(tmp, path)


@register("logger", "mlflow")
def make_mlflow(run_dir: Path, run_name: str, root: str | None = None,
                tracking_uri: str | None = None, experiment: str = "rlrun",
                run_id: str | None = None, tags: dict | None = None,
                resume_step: int | None = None) -> JournaledLogger:
    """MLflow; embedded SQLite store under ``root`` unless ``tracking_uri`` is set.

    Metrics reach MLflow through ``<run_dir>/mlflow.journal`` once a checkpoint covers them
    (``rlrun.loggers.journal``): MLflow cannot delete what a killed attempt logged.
    """
    from rlrun.loggers.remote import take_prestarted

    where = (tracking_uri, str(Path(root) if root else Path.cwd()), experiment)
    inner = take_prestarted(*where)  # MLflow in its own process, opened while the run was built
    if inner is not None:
        try:
            inner.start_run(run_name, run_id, tags)
        except BaseException:  # the store cannot be opened: its worker ends now, not at exit
            inner.close()
            raise
    else:
        inner = MLflowLogger()
        with store_errors(tracking_uri, run_id):
            inner.open_store(tracking_uri, Path(where[1]), experiment)
        with store_errors(tracking_uri, run_id):
            inner.start_run(run_name, run_id, tags)
    return JournaledLogger(inner, Path(run_dir) / "mlflow.journal", resume_step if run_id else None)


@register("logger", "csv")
def make_csv(run_dir: Path, resumed: bool = False, resume_step: int | None = None) -> CSVLogger:
    """Metrics as rows of ``<run_dir>/metrics.csv``."""
    return CSVLogger(run_dir, resumed, resume_step)


@register("logger", "none")
def make_none() -> Logger:
    """No tracking (the summary and checkpoints are still written)."""
    return NullLogger()


class Progress:
    """Progress of a run: a live bar on a terminal, else a line every ``interval`` seconds.

    Off a terminal (nohup, SLURM logs) ``enabled="auto"`` prints ``[rlrun] frames ...``
    lines to stderr (and the run's log); on one, a tqdm bar whose own rate is the only
    rate shown (the trainer's ``fps`` is left out of its postfix, as the two disagree:
    tqdm smooths over updates, ``fps`` is the last batch's). The bar's state also goes
    to the log file every ``interval`` seconds.
    """

    def __init__(self, total: int, initial: int, enabled: bool | str = "auto", interval: float = 10.0,
                 unit: str = "frames"):
        tty = sys.stderr.isatty()
        self.unit = unit
        self.enabled = True if enabled == "auto" else bool(enabled)
        self.bar = None
        if self.enabled and tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit=unit, unit_scale=True,
                            dynamic_ncols=True)
        self.total, self.frames, self.interval = total, initial, interval
        self._last_print = -float("inf")  # the first batch prints: the run has started

    def line(self, frames: int, info: dict[str, float]) -> str:
        """The plain progress line: frames (or updates), percent, then ``key=value`` for each of ``info``."""
        shown = "".join(f" {k}={v:.4g}" for k, v in info.items())
        return f"[rlrun] {self.unit} {frames}/{self.total} ({frames / max(self.total, 1):.0%}){shown}"

    def update(self, frames: int, info: dict[str, float]) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        due = now - self._last_print >= self.interval or frames >= self.total
        if self.bar is not None:
            self.bar.update(frames - self.frames)
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in info.items() if k != "fps"}, refresh=False)
            if due:
                log.info(self.line(frames, info))
        elif due:
            say(self.line(frames, info))
        if due:
            self._last_print = now
        self.frames = frames

    def close(self) -> None:
        if self.bar is not None:  # once: the run closes it when training ends and on any exit
            self.bar.close()
            self.bar = None


class TensorBoardLogger(Logger):
    """Scalars to TensorBoard event files in ``<run_dir>/tensorboard`` (``torch.utils.tensorboard``).

    Params are written once as a Markdown table under the text tag ``config``; artifacts
    are not copied (they stay in the run directory, which TensorBoard does not serve).
    A resumed run purges the events past its checkpoint's step (``purge_step``: TensorBoard
    then drops what the killed attempt wrote there); a fresh start sets an old folder aside.
    """

    def __init__(self, run_dir: Path, subdir: str = "tensorboard", flush_secs: int = 10,
                 resumed: bool = False, resume_step: int | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ConfigError(f"TensorBoard is not installed ({err})", key="logger.name",
                              fix="pip install 'rlrun[tensorboard]', or use logger=mlflow|csv") from None
        folder = Path(run_dir) / subdir
        if not resumed and folder.is_dir() and any(folder.iterdir()):
            aside = set_aside(folder)
            print(f"[rlrun] fresh start: kept the previous {subdir}/ as {aside.name}/", file=sys.stderr)
        purge = resume_step + 1 if resumed and resume_step is not None else None
        check_tree(folder)
        if folder.is_symlink():
            check_file(folder)
        self.writer = SummaryWriter(log_dir=str(folder), flush_secs=flush_secs, purge_step=purge)

    def commit(self, step: int) -> None:
        self.writer.flush()  # events wait in the writer's queue up to flush_secs

    def log_params(self, params: dict[str, Any]) -> None:
        rows = "\n".join(f"| {k} | {str(v).replace('|', '/')} |" for k, v in sorted(params.items()))
        self.writer.add_text("config", f"| key | value |\n|---|---|\n{rows}")

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, float(value), step)

    def finish(self, status: str = "FINISHED") -> None:
        self.writer.add_text("status", status)
        self.writer.close()


class LoggerGroup(Logger):
    """Several loggers at once: every call goes to each, in order.

    ``run_id`` is the first member's that has one (MLflow's, kept in checkpoints to resume
    the same tracking run).
    """

    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers

    @property
    def run_id(self) -> str | None:  # type: ignore[override]
        return next((lg.run_id for lg in self.loggers if lg.run_id is not None), None)

    def log_params(self, params: dict[str, Any]) -> None:
        for lg in self.loggers:
            lg.log_params(params)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for lg in self.loggers:
            lg.log_metrics(metrics, step)

    def log_artifact(self, path: str | Path) -> None:
        for lg in self.loggers:
            lg.log_artifact(path)

    def set_tags(self, tags: dict[str, str]) -> None:
        for lg in self.loggers:
            lg.set_tags(tags)

    def commit(self, step: int) -> None:
        for lg in self.loggers:
            lg.commit(step)

    def finish(self, status: str = "FINISHED") -> None:
        for lg in self.loggers:
            lg.finish(status)


@register("logger", "tensorboard")
def make_tensorboard(run_dir: Path, subdir: str = "tensorboard", flush_secs: PositiveInt = 10,
                     resumed: bool = False, resume_step: int | None = None) -> TensorBoardLogger:
    """TensorBoard event files in ``<run_dir>/<subdir>`` (``tensorboard --logdir runs`` shows all runs)."""
    return TensorBoardLogger(run_dir, subdir, flush_secs, resumed, resume_step)


@register("logger", "multi")
def make_multi(run_dir: Path, run_name: str, loggers: dict[str, dict] | None = None,
               run_id: str | None = None, tags: dict | None = None, resumed: bool = False,
               resume_step: int | None = None) -> LoggerGroup:
    """Several loggers at once, e.g. MLflow and TensorBoard (``logger.loggers.<name>`` nodes)."""
    from rlrun.core.registry import build

    if not loggers:
        raise ConfigError("no loggers listed", key="logger.loggers",
                          fix="list them, e.g. logger=multi (MLflow and TensorBoard)")
    return LoggerGroup([build("logger", node, key=f"logger.loggers.{name}", run_dir=run_dir,
                              run_name=run_name, run_id=run_id, tags=tags, resumed=resumed,
                              resume_step=resume_step)
                        for name, node in loggers.items() if node])
