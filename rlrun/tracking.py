"""Experiment tracking: MLflow (embedded SQLite store by default), CSV, or nothing.

Every algorithm logs the same metric names (``train/episode_return``,
``eval/episode_return``, ``loss/*``, ``time/fps``, ``frames``) with the frame
count as step, so runs compare across algorithms in one store.
"""

from __future__ import annotations

import contextlib
import csv
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlrun.errors import ConfigError
from rlrun.registry import register

# MLflow's own telemetry would try the network; this machine class has none.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

PROBE_TIMEOUT_S = 5.0
# While the run is set up, a server that answers but fails gets this many retries of this
# many seconds (MLflow's defaults, 7 retries with backoff, wait minutes); a user's own
# MLFLOW_HTTP_REQUEST_* settings win. During training MLflow's settings apply unchanged.
_STARTUP_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


class Logger:
    """The tracking interface; this base class records nothing (``logger=none``)."""

    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: str | Path) -> None: ...

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...


class MLflowLogger(Logger):
    """Logs to MLflow through ``MlflowClient`` (no global active-run state).

    Args:
        tracking_uri: Any MLflow URI; ``None`` means ``sqlite:///<root>/mlflow.db``.
        root: Where the embedded store and its artifacts live.
        experiment: Experiment name (created if missing).
        run_name: Display name of the run.
        run_id: Continue this run (resume) instead of creating one.
        tags: Tags set on a new run.
    """

    def __init__(self, tracking_uri: str | None, root: Path, experiment: str, run_name: str,
                 run_id: str | None = None, tags: dict[str, str] | None = None):
        from mlflow.tracking import MlflowClient

        root = Path(root).resolve()
        if tracking_uri is None:
            root.mkdir(parents=True, exist_ok=True)
            tracking_uri = f"sqlite:///{root / 'mlflow.db'}"
        self.tracking_uri = tracking_uri
        if tracking_uri.startswith(("http://", "https://")):
            probe_server(tracking_uri)
        with _bounded_http_retries():
            self.client = MlflowClient(tracking_uri)
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                artifacts = (root / "mlruns").as_uri() if tracking_uri.startswith("sqlite") else None
                exp_id = self.client.create_experiment(experiment, artifact_location=artifacts)
            else:
                exp_id = exp.experiment_id
            if run_id is not None:
                self.client.update_run(run_id, status="RUNNING")
                self.run_id = run_id
            else:
                run = self.client.create_run(exp_id, run_name=run_name, tags=tags or {})
                self.run_id = run.info.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow accepts at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step)
                                                    for k, v in metrics.items()])

    def log_artifact(self, path: str | Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, v)

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


def set_aside(path: Path) -> Path | None:
    """Renames ``path`` to the first free ``<stem>.prev-N<suffix>``; returns the new path (None if absent)."""
    if not path.exists():
        return None
    n = 1
    while (aside := path.with_name(f"{path.stem}.prev-{n}{path.suffix}")).exists():
        n += 1
    path.rename(aside)
    return aside


def probe_server(uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raises ConfigError unless an HTTP server answers at ``uri`` within ``timeout`` seconds.

    Any HTTP answer counts (an MLflow server says OK at ``/health``; a proxy in
    front of one may say 401 or 404): only a refused, unresolvable or silent
    address fails, so a dead server stops the run at once instead of after
    MLflow's minutes of retries.
    """
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as err:  # URLError, refused, timeout, bad URL
        reason = getattr(err, "reason", err)
        raise ConfigError(
            f"no tracking server answers at {uri} within {timeout:.0f} s ({reason})",
            key="logger.tracking_uri",
            fix="start the server (e.g. `mlflow server --port 5000`) or point logger.tracking_uri at "
            "a running one; leave it unset for the embedded store, or use logger=csv") from None


@contextlib.contextmanager
def _bounded_http_retries() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in _STARTUP_HTTP}
    os.environ.update({k: v for k, v in _STARTUP_HTTP.items() if saved[k] is None})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


class CSVLogger(Logger):
    """Writes ``step,key,value`` rows to ``<run_dir>/metrics.csv``.

    A resumed run appends to the file; a fresh start in a directory that has
    one (``resume=false``, or killed before its first checkpoint) moves the old
    ``metrics.csv`` and ``params.csv`` aside as ``*.prev-N.csv`` and starts new ones.
    """

    def __init__(self, run_dir: Path, resumed: bool = False):
        self.path = Path(run_dir) / "metrics.csv"
        if not resumed:
            for old in (self.path, self.path.with_name("params.csv")):
                if (aside := set_aside(old)) is not None:
                    print(f"[rlrun] fresh start: kept the previous {old.name} as {aside.name}",
                          file=sys.stderr)
        new = not self.path.exists()
        self._file = open(self.path, "a", newline="")
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(["step", "key", "value"])

    def log_params(self, params: dict[str, Any]) -> None:
        with open(self.path.with_name("params.csv"), "w", newline="") as f:
            csv.writer(f).writerows(sorted(params.items()))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._writer.writerows([step, k, v] for k, v in metrics.items())
        self._file.flush()

    def finish(self, status: str = "FINISHED") -> None:
        self._file.close()


@register("logger", "mlflow")
def make_mlflow(run_dir: Path, run_name: str, root: str | None = None,
                tracking_uri: str | None = None, experiment: str = "rlrun",
                run_id: str | None = None, tags: dict | None = None) -> MLflowLogger:
    """MLflow; embedded SQLite store under ``root`` unless ``tracking_uri`` is set."""
    try:
        return MLflowLogger(tracking_uri, Path(root) if root else Path.cwd(), experiment,
                            run_name, run_id, tags)
    except ConfigError:
        raise
    except Exception as err:  # bad URI, unreachable server, corrupt store
        if run_id is not None and "not found" in str(err).lower():
            raise ConfigError(f"MLflow run {run_id} of this checkpoint is not in {tracking_uri}",
                              key="logger.tracking_uri",
                              fix="point logger.tracking_uri at the store the run started in") from None
        raise ConfigError(f"cannot open the MLflow store ({type(err).__name__}: {err})",
                          key="logger.tracking_uri",
                          fix="use a valid tracking URI, or logger=csv to log without MLflow"
                          ) from None


@register("logger", "csv")
def make_csv(run_dir: Path, resumed: bool = False) -> CSVLogger:
    """Metrics as rows of ``<run_dir>/metrics.csv``."""
    return CSVLogger(run_dir, resumed)


@register("logger", "none")
def make_none() -> Logger:
    """No tracking (the summary and checkpoints are still written)."""
    return Logger()


class Progress:
    """A live bar of frames, fps and recent return (a plain line per batch off a TTY)."""

    def __init__(self, total: int, initial: int, enabled: bool | str = "auto"):
        tty = sys.stderr.isatty()
        self.enabled = bool(enabled) if enabled != "auto" else tty
        self.bar = None
        if self.enabled and tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="frames", unit_scale=True,
                            dynamic_ncols=True)
        self.total, self.frames = total, initial
        self._last_print = 0.0

    def update(self, frames: int, info: dict[str, float]) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(frames - self.frames)
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in info.items()}, refresh=False)
        elif time.monotonic() - self._last_print > 10 or frames >= self.total:
            self._last_print = time.monotonic()
            shown = " ".join(f"{k}={v:.4g}" for k, v in info.items())
            print(f"[rlrun] frames {frames}/{self.total} {shown}", file=sys.stderr, flush=True)
        self.frames = frames

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
