"""The MLflow logger itself: ``MlflowClient`` on a store (embedded SQLite by default), one run.

Its own module, apart from ``rlrun.loggers.tracking`` (whose ``make_mlflow`` builds it), so that
the MLflow worker process (``rlrun.loggers.remote_worker``) imports no more of rlrun than this:
not the component registry, OmegaConf or the other loggers (0.2 s of the worker's start, which a
short run waits for at its first logger call; issue 27).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlrun.core.errors import ConfigError
from rlrun.loggers.store import embedded_uri, error_line, open_client, sqlite_path

# MLflow's own telemetry would try the network; this machine class has none.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# A new store's schema set-up logs a dozen INFO lines ("Creating initial MLflow database
# tables", alembic's migrations) that bury rlrun's own; warnings still show.
for _name in ("mlflow.store.db.utils", "alembic.runtime.migration"):
    logging.getLogger(_name).setLevel(logging.WARNING)

PROBE_TIMEOUT_S = 5.0
ATTEMPT_TAG = "attempt_id"  # a new uuid4 per fresh start (``rlrun.lifecycle.run``), kept in tracking.json
ATTEMPT_ID = re.compile(r"[0-9a-f]{32}")  # what a uuid4's hex is; tracking.json is data, never trusted
# While the run is set up, a server that answers but fails gets this many retries of this
# many seconds (MLflow's defaults, 7 retries with backoff, wait minutes); a user's own
# MLFLOW_HTTP_REQUEST_* settings win. During training MLflow's settings apply unchanged.
_STARTUP_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


class MLflowLogger:
    """Logs to MLflow through ``MlflowClient`` (no global active-run state): ``open_store``, then
    ``start_run``, then the logging calls. Each step is its own call so that the caller can turn a
    failure of either into its one-line error (``store_errors``)."""

    run_id: str | None = None

    def open_store(self, tracking_uri: str | None, root: Path, experiment: str) -> None:
        """Opens (or makes) the store and the experiment.

        Args:
            tracking_uri: Any MLflow URI; ``None`` means ``sqlite:///<root>/mlflow.db``.
            root: Where the embedded store and its artifacts live.
            experiment: Experiment name (created if missing).
        """
        from mlflow.tracking import MlflowClient

        root = Path(root).resolve()
        if tracking_uri is None:
            root.mkdir(parents=True, exist_ok=True)
            tracking_uri = embedded_uri(root)
        self.tracking_uri = tracking_uri
        if tracking_uri.startswith(("http://", "https://")):
            probe_server(tracking_uri)
        with _bounded_http_retries():
            db = sqlite_path(tracking_uri)  # a SQLite store is made atomically, repaired if half-made
            self.client = open_client(db) if db is not None else MlflowClient(tracking_uri)
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                artifacts = (root / "mlruns").as_uri() if tracking_uri.startswith("sqlite") else None
                exp_id = self.client.create_experiment(experiment, artifact_location=artifacts)
            else:
                exp_id = exp.experiment_id
        self.experiment_id = exp_id

    def start_run(self, run_name: str, run_id: str | None = None, tags: dict[str, str] | None = None) -> None:
        """Makes the run ``run_name`` with ``tags`` (``run_id`` None) or marks ``run_id`` running
        again (resume). A run of the experiment whose ``attempt_id`` tag equals the one in ``tags``
        is continued instead of making another: the run of a process killed before it learned the
        run's id (its ``tracking.json`` names the attempt; ``rlrun.loggers.remote``)."""
        with _bounded_http_retries():
            attempt = (tags or {}).get(ATTEMPT_TAG, "")
            if run_id is None and ATTEMPT_ID.fullmatch(attempt):
                found = self.client.search_runs([self.experiment_id], f"tags.{ATTEMPT_TAG} = '{attempt}'",
                                                max_results=1)
                run_id = found[0].info.run_id if found else None
            if run_id is not None:
                self.client.update_run(run_id, status="RUNNING")
                self.run_id = run_id
            else:
                run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags or {})
                self.run_id = run.info.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow accepts at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.log_metric_rows([(step, int(time.time() * 1000), metrics)])

    def log_metric_rows(self, rows: list[tuple[int, int, dict[str, float]]]) -> None:
        """Several steps' metrics, each row ``(step, time_ms, metrics)``, in one request."""
        from mlflow.entities import Metric

        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), t, step)
                                                    for step, t, m in rows for k, v in m.items()])

    def last_steps(self, keys: list[str]) -> dict[str, int]:
        """The last step the run holds for each of ``keys`` (absent: none)."""
        held = {}
        for key in keys:
            steps = [m.step for m in self.client.get_metric_history(self.run_id, key)]
            if steps:
                held[key] = max(steps)
        return held

    def log_artifact(self, path: str | Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, v)

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


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


@contextlib.contextmanager
def store_errors(tracking_uri: str | None, run_id: str | None) -> Iterator[None]:
    """Turns a failure to open the store or its run into one ConfigError naming ``logger.tracking_uri``."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as err:  # bad URI, unreachable server, corrupt store
        if run_id is not None and "not found" in str(err).lower():
            raise ConfigError(f"MLflow run {run_id} of this checkpoint is not in {tracking_uri}",
                              key="logger.tracking_uri",
                              fix="point logger.tracking_uri at the store the run started in") from None
        raise ConfigError(f"cannot open the MLflow store {tracking_uri or '(embedded)'} ({error_line(err)})",
                          key="logger.tracking_uri",
                          fix="check logger.tracking_uri (sqlite:///<file>, http://host:port), or use "
                          "logger=csv to log without MLflow") from None
