"""MLflow in a process of its own, started before the run is built (issue 27).

Importing MLflow and opening its store take 2-3 s of CPU (MLflow's modules, SQLAlchemy's
mappers, alembic's schema check): on the run's critical path they came after the env and the
networks were built. ``prestart`` starts ``python -m rlrun.record.remote_worker`` as the run begins;
that process imports MLflow and opens the store (``MLflowLogger.open_store``) on another core
while this one imports torch and builds the run. ``make_mlflow`` then takes it
(``take_prestarted``): creating the run is one request, and every later call of the logger is
one request and its reply, each as synchronous as it was in-process. A store that cannot be
opened is reported at the same point as before, before training, as the same ConfigError.

The protocol is one JSON line per request on the worker's stdin and one per reply on a pipe of
its own (its stdout, which it points at stderr for anything else that prints). The worker
ignores SIGINT and SIGTERM (the run's own handlers decide when to stop, and still log through
it) and dies with the run's process (``PR_SET_PDEATHSIG``), or on end of input.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rlrun.core.errors import ConfigError
from rlrun.lifecycle.signals import stop_signals_blocked

_prestarted: dict[tuple, Any] = {}
_early: list[RemoteMLflow] = []  # started by start_early, store not yet named


class RemoteMLflow:
    """``MLflowLogger``'s interface, served by a worker process (``python -m rlrun.record.remote_worker``)."""

    run_id: str | None = None

    def __init__(self, tracking_uri: str | None = None, root: str | None = None,
                 experiment: str | None = None):
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        with stop_signals_blocked():  # a signal to the whole job must not end the tracker's process
            self._proc = subprocess.Popen([sys.executable, "-m", "rlrun.record.remote_worker"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                          env=env)
        self._opened = self.taken = False
        atexit.register(self.close)
        if root is not None:
            self.open(tracking_uri, root, experiment or "rlrun")

    def open(self, tracking_uri: str | None, root: str, experiment: str) -> None:
        """Asks the worker to open the store (it imports MLflow meanwhile, if it has not yet)."""
        self._send("open_store", tracking_uri=tracking_uri, root=root, experiment=experiment)

    def _send(self, op: str, **kwargs: Any) -> None:
        self._proc.stdin.write(json.dumps({"op": op, "kwargs": kwargs}) + "\n")
        self._proc.stdin.flush()

    def _reply(self) -> Any:
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the MLflow worker process ended (exit code {self._proc.poll()})")
        reply = json.loads(line)
        if "config_error" in reply:
            raise ConfigError(reply["config_error"], key=reply["key"], fix=reply["fix"])
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply.get("result")

    def _call(self, op: str, **kwargs: Any) -> Any:
        try:
            self._send(op, **kwargs)
        except (BrokenPipeError, ValueError):
            raise RuntimeError(f"the MLflow worker process ended (exit code {self._proc.poll()})") from None
        return self._reply()

    def opened(self) -> None:
        """Waits for the store to be open; raises its ConfigError if it cannot be."""
        if not self._opened:
            self._reply()
            self._opened = True

    def start_run(self, run_name: str, run_id: str | None = None, tags: dict[str, str] | None = None) -> None:
        self.opened()
        self.run_id = self._call("start_run", run_name=run_name, run_id=run_id, tags=tags)

    def log_params(self, params: dict[str, Any]) -> None:
        self._call("log_params", params={k: str(v) for k, v in params.items()})

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._call("log_metrics", metrics=metrics, step=step)

    def log_metric_rows(self, rows: list[tuple[int, int, dict[str, float]]]) -> None:
        self._call("log_metric_rows", rows=rows)

    def last_steps(self, keys: list[str]) -> dict[str, int]:
        return self._call("last_steps", keys=keys)

    def log_artifact(self, path: Any) -> None:
        self._call("log_artifact", path=str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        self._call("set_tags", tags={k: str(v) for k, v in tags.items()})

    def commit(self, step: int) -> None: ...

    def finish(self, status: str = "FINISHED") -> None:
        try:
            self._call("finish", status=status)
        finally:
            self.close()

    def close(self) -> None:
        """Ends the worker (end of input); kills it if it does not end within 10 s, or at once if
        the run never took it (it failed before its logger was made: no store of its own making)."""
        if self._proc.poll() is None:
            if not self.taken:
                self._proc.kill()
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
            self._proc.stdout.close()


def start_early() -> None:
    """Starts a worker before the run's config is composed (the command line leaves the logger
    at MLflow, the default): it imports MLflow while the config is composed and torch imported,
    and waits for ``prestart`` to name the store. Importing MLflow is the longest part of its start
    (2-3 s of CPU, against 0.2 s for opening the store)."""
    if os.environ.get("RLRUN_MLFLOW_IN_PROCESS") != "1" and not _early:
        _early.append(RemoteMLflow())


def prestart(node: dict) -> None:
    """Starts the MLflow worker for a ``logger`` node of ``mlflow`` (nothing for other loggers),
    or opens the store in the one ``start_early`` started; ends that one if the node is another logger."""
    early = _early.pop() if _early else None
    if node.get("name") != "mlflow" or os.environ.get("RLRUN_MLFLOW_IN_PROCESS") == "1":
        if early is not None:
            early.close()
        return
    key = _key(node.get("tracking_uri"), node.get("root"), node.get("experiment", "rlrun"))
    if key in _prestarted:
        if early is not None:
            early.close()
        return
    if early is None:
        early = RemoteMLflow()
    early.open(*key)
    _prestarted[key] = early


def take_prestarted(tracking_uri: str | None, root: str, experiment: str) -> RemoteMLflow | None:
    """The worker ``prestart`` started for this store, if any (each is taken once)."""
    worker = _prestarted.pop(_key(tracking_uri, root, experiment), None)
    if worker is not None:
        worker.taken = True
    return worker


def discard_prestarted() -> None:
    """Ends the workers that no logger took (the run ended before making it)."""
    while _prestarted:
        _prestarted.popitem()[1].close()
    while _early:
        _early.pop().close()


def _key(tracking_uri: str | None, root: str | None, experiment: str) -> tuple:
    return (tracking_uri, str(Path(root)) if root else os.getcwd(), experiment)
