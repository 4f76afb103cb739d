"""MLflow in a process of its own, started before the run is built (issue 27).

Importing MLflow and opening its store take 2-3 s of CPU (MLflow's modules, SQLAlchemy's
mappers, alembic's schema check): on the run's critical path they came after the env and the
networks were built. ``prestart`` starts ``python -m rlrun.loggers.remote_worker`` as the run begins;
that process imports MLflow and opens the store (``MLflowLogger.open_store``) on another core
while this one imports torch and builds the run. ``make_mlflow`` then takes it
(``take_prestarted``).

The run does not wait for it to start: creating the tracker run, its params, tags and artifacts
are sent without waiting for their replies, which are read at the first call that needs an
answer (``run_id``, first read when the first checkpoint is written; the journal's sends;
``finish``), so that a short run trains while MLflow is still loading (a 1,024-frame run waited
0.4 s for it). Before that, a quick check in this process stands in for the store's opening:
an embedded store must be absent or start as a SQLite file, a server must answer
(``probe_server``); for anything else, or when the check fails, the run waits for the worker's
verdict before training, as before. A store that passes the check and still cannot be opened (it
holds runs but its schema is half-made; it is locked) fails the run at that first call, with the
same one-line ConfigError. A kill before the reply leaves no orphan: the run's ``attempt_id`` tag
is in ``tracking.json`` before the tracker run exists, and a rerun finds the run by it.

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
from rlrun.core.signals import stop_signals_blocked

_prestarted: dict[tuple, Any] = {}
_early: list[RemoteMLflow] = []  # started by start_early, store not yet named


class RemoteMLflow:
    """``MLflowLogger``'s interface, served by a worker process
    (``python -m rlrun.loggers.remote_worker``)."""

    MAX_UNREAD = 64  # replies left unread at most (each a short line: far below a pipe's buffer)

    def __init__(self, tracking_uri: str | None = None, root: str | None = None,
                 experiment: str | None = None):
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        with stop_signals_blocked():  # a signal to the whole job must not end the tracker's process
            self._proc = subprocess.Popen([sys.executable, "-m", "rlrun.loggers.remote_worker"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                          env=env)
        self.taken = False
        self._where: tuple = (None, None, None)
        self._unread: list[str] = []  # the ops sent without waiting, whose replies come in this order
        self._run_id: str | None = None
        self._failed = False  # the store or the run could not be started: said once, then nothing to end
        atexit.register(self.close)
        if root is not None:
            self.open(tracking_uri, root, experiment or "rlrun")

    def open(self, tracking_uri: str | None, root: str, experiment: str) -> None:
        """Asks the worker to open the store (it imports MLflow meanwhile, if it has not yet)."""
        self._where = (tracking_uri, root, experiment)
        self._send_later("open_store", tracking_uri=tracking_uri, root=root, experiment=experiment)

    def _send(self, op: str, **kwargs: Any) -> None:
        try:
            self._proc.stdin.write(json.dumps({"op": op, "kwargs": kwargs}) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise RuntimeError(f"the MLflow worker process ended (exit code {self._proc.poll()})") from None

    def _send_later(self, op: str, **kwargs: Any) -> None:
        """Sends a request whose reply is read by the next ``settle``."""
        if len(self._unread) >= self.MAX_UNREAD:
            self.settle()
        self._send(op, **kwargs)
        self._unread.append(op)

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

    def settle(self) -> None:
        """Waits for the replies to the requests sent without waiting; raises the first failure."""
        first: Exception | None = None
        while self._unread:
            op = self._unread.pop(0)
            try:
                result = self._reply()
            except (ConfigError, RuntimeError) as err:
                if op in ("open_store", "start_run"):
                    self._failed = True
                first = first or err
                continue
            if op == "start_run":
                self._run_id = result
        if first is not None:
            raise first

    def _call(self, op: str, **kwargs: Any) -> Any:
        self.settle()
        self._send(op, **kwargs)
        return self._reply()

    @property
    def run_id(self) -> str | None:
        """The tracker run's id; waits for the worker to have made it (its failure is raised here, once)."""
        if self._unread and "start_run" in self._unread:
            self.settle()
        return self._run_id

    def start_run(self, run_name: str, run_id: str | None = None, tags: dict[str, str] | None = None) -> None:
        """Makes the tracker run without waiting, if ``store_looks_usable``; else, or to continue
        ``run_id`` (a resume: the store must still hold it), waits for it, so that the store's
        error comes before training."""
        self._send_later("start_run", run_name=run_name, run_id=run_id, tags=tags)
        if run_id is not None or not store_looks_usable(*self._where[:2]):
            self.settle()

    def log_params(self, params: dict[str, Any]) -> None:
        self._send_later("log_params", params={k: str(v) for k, v in params.items()})

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._call("log_metrics", metrics=metrics, step=step)

    def log_metric_rows(self, rows: list[tuple[int, int, dict[str, float]]]) -> None:
        self._call("log_metric_rows", rows=rows)

    def last_steps(self, keys: list[str]) -> dict[str, int]:
        return self._call("last_steps", keys=keys)

    def log_artifact(self, path: Any) -> None:
        self._send_later("log_artifact", path=str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        self._send_later("set_tags", tags={k: str(v) for k, v in tags.items()})

    def commit(self, step: int) -> None: ...

    def finish(self, status: str = "FINISHED") -> None:
        """Ends the tracker run (nothing to end if it never started) and the worker."""
        try:
            if self._failed:
                return
            try:
                self.settle()
            finally:  # a failed log_params or artifact still leaves the run to end
                if not self._failed:
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
            tracking_uri, root, _ = self._where
            if not self.taken and root is not None:  # killed, perhaps while making the store
                from rlrun.loggers.store import embedded_uri, remove_temp_store

                self._proc.wait()
                remove_temp_store(tracking_uri or embedded_uri(Path(root)), self._proc.pid)


def store_looks_usable(tracking_uri: str | None, root: str | None) -> bool:
    """A quick check, in the run's process, that the worker will open this store: an embedded store
    (``tracking_uri`` None or ``sqlite:///``) whose file is absent or starts as a SQLite file, in a
    directory this process may write; an HTTP server that answers (``probe_server``: its failure is
    the run's ConfigError at once). Anything else (another scheme, a check that fails): False, and
    the run waits for the worker's own verdict before it trains."""
    if tracking_uri is not None and tracking_uri.startswith(("http://", "https://")):
        from rlrun.loggers.mlflow_logger import probe_server

        probe_server(tracking_uri)
        return True
    from rlrun.loggers.store import embedded_uri, sqlite_path

    db = sqlite_path(tracking_uri if tracking_uri is not None else embedded_uri(Path(root or os.getcwd())))
    if db is None:
        return False
    folder = next((p for p in [db.parent, *db.parent.parents] if p.exists()), None)
    if folder is None or not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        with open(db, "rb") as f:
            return f.read(16) in (b"SQLite format 3\x00", b"")
    except FileNotFoundError:
        return True
    except OSError:
        return False


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
