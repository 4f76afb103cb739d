"""The embedded MLflow store (``sqlite:///<root>/mlflow.db``): made atomically, repaired when half-made.

MLflow creates a new SQLite store's schema in place, through some forty migrations that
take seconds and are not one transaction: a kill in between leaves a store that every
later open fails on ("table ... already exists"), so rerunning can never recover. Here
the schema is made in ``mlflow.db.tmp-<pid>`` beside it (through MLflow itself) and then
moved into place, so ``mlflow.db`` is either absent or complete. Several runs share one
store: creation and repair hold an ``flock`` on the store's directory, and a made store
is linked into place only if none appeared meanwhile.

A store that MLflow cannot open and that holds no runs (one left half-made by an older
rlrun, or by MLflow itself) is set aside as ``mlflow.prev-N.db`` and made anew; one that
holds runs is never touched: the error says so, in one line, with the way out.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlrun.core.errors import ConfigError
from rlrun.loggers import pause_point

LOCK_WAIT_S = 300.0  # a store's creation takes seconds; a holder this slow is stuck


def embedded_uri(root: Path) -> str:
    """The URI of the embedded store under ``root`` (``logger.root``, by default the launch dir)."""
    return f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path | None:
    """The file of a ``sqlite:///<path>`` URI (None for other URIs and in-memory stores)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?")[0]
    return Path(path) if path and path != ":memory:" else None


def error_line(err: BaseException) -> str:
    """An MLflow or SQLAlchemy error in one line: its first line, without the SQL statement
    and the links that SQLAlchemy appends."""
    text = str(err).split("[SQL:")[0].split("(Background on this error")[0]
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return f"{type(err).__name__}: {line[:300]}" if line else type(err).__name__


def open_client(path: Path) -> Any:
    """An ``MlflowClient`` on the SQLite store at ``path``, which is created or repaired first.

    Raises:
        ConfigError: the store cannot be opened and holds runs (or is not a database).
    """
    from mlflow.tracking import MlflowClient

    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{path}"
    with _directory_lock(path.parent) as locked:
        if locked:
            _remove_stale_temp_files(path)
        if not path.exists() or path.stat().st_size == 0:
            _create(path)
    failed_on = _inode(path)
    try:
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)
        return client
    except Exception as err:
        reason = error_line(err)
    _forget_engine(uri)  # its pooled connections would still point at the file set aside
    with _directory_lock(path.parent):
        if _inode(path) == failed_on:  # else another run has repaired it meanwhile
            _repair(path, reason)
    client = MlflowClient(uri)
    client.search_experiments(max_results=1)
    return client


def _repair(path: Path, reason: str) -> None:
    """Sets a half-made store (no runs) aside and makes a new one; refuses to touch one with runs."""
    runs = _count_runs(path)
    where = f"the MLflow store {path}"
    if "locked" in reason or "busy" in reason:
        raise ConfigError(f"{where} is busy ({reason})", key="logger.tracking_uri",
                          fix="another process holds it: wait for it, or log elsewhere with "
                          "logger.root=<another directory> or logger=csv")
    if runs is None:
        raise ConfigError(
            f"{where} is damaged: it is not a readable SQLite database ({reason})",
            key="logger.tracking_uri",
            fix=f"move it aside (mv {path} {path}.damaged) and rerun to start a new store, or log "
            "elsewhere with logger.root=<another directory> or logger=csv")
    if runs > 0:
        raise ConfigError(
            f"{where} holds {runs} runs but cannot be opened ({reason})", key="logger.tracking_uri",
            fix=f"rlrun leaves it as it is: back it up, then `mlflow db upgrade sqlite:///{path}` "
            f"if MLflow says its schema is out of date; if it is damaged, move it aside (mv {path} "
            f"{path}.damaged) and rerun to start a new store")
    n = 1
    while (aside := path.with_name(f"{path.stem}.prev-{n}{path.suffix}")).exists():
        n += 1
    path.rename(aside)
    for extra in ("-journal", "-wal", "-shm"):  # SQLite's side files belong to the file set aside
        side = path.with_name(path.name + extra)
        if side.exists():
            side.rename(aside.with_name(aside.name + extra))
    line = (f"[rlrun] {where} was half-made, with no runs in it ({reason}): kept it as "
            f"{aside.name} and made a new one")
    print(line, file=sys.stderr, flush=True)
    logging.getLogger("rlrun").info(line)
    _create(path)


def temp_store(path: Path, pid: int) -> Path:
    """Where process ``pid`` makes the store ``path`` before moving it into place."""
    return path.with_name(f"{path.name}.tmp-{pid}")


def remove_temp_store(uri: str, pid: int) -> None:
    """Removes the temp store (and its SQLite journal) of process ``pid``, killed while making
    ``uri``'s store: without it the temp file stays until another run makes a store there."""
    path = sqlite_path(uri)
    if path is not None:
        tmp = temp_store(path, pid)
        for p in (tmp, tmp.with_name(tmp.name + "-journal")):
            with contextlib.suppress(OSError):
                p.unlink()


def _create(path: Path) -> None:
    """Makes a complete store in a temp file beside ``path`` and moves it into place."""
    from mlflow.tracking import MlflowClient

    tmp = temp_store(path, os.getpid())
    tmp.unlink(missing_ok=True)
    pause_point("store_create")
    uri = f"sqlite:///{tmp}"
    try:
        MlflowClient(uri).search_experiments(max_results=1)  # schema and default experiment
        _forget_engine(uri)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        pause_point("store_place")
        if path.exists():  # empty (0 bytes): nothing to keep
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # never replaces a store another run made meanwhile
            except FileExistsError:
                pass
        _fsync_dir(path.parent)
    except Exception as err:
        raise ConfigError(f"cannot create the MLflow store {path} ({error_line(err)})",
                          key="logger.tracking_uri",
                          fix="make its directory writable, or log elsewhere with "
                          "logger.root=<another directory> or logger=csv") from None
    finally:
        for p in (tmp, tmp.with_name(tmp.name + "-journal")):
            p.unlink(missing_ok=True)


def _count_runs(path: Path) -> int | None:
    """Rows of the store's ``runs`` table (0 if it has none); None if it is not a database."""
    try:
        con = sqlite3.connect(path, timeout=10)
        try:  # the first read also rolls back a transaction a killed process left (its -journal)
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            return int(con.execute("SELECT count(*) FROM runs").fetchone()[0]) if "runs" in tables else 0
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return None


def _forget_engine(uri: str) -> None:
    """Closes the connections MLflow keeps per store URI (best effort: a private cache)."""
    with contextlib.suppress(Exception):
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()


def _remove_stale_temp_files(path: Path) -> None:
    """Temp stores of killed creators; call with the directory lock held (every creator holds it)."""
    for p in path.parent.glob(f"{path.name}.tmp-*"):
        p.unlink(missing_ok=True)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _directory_lock(directory: Path, wait: float = LOCK_WAIT_S) -> Iterator[bool]:
    """An exclusive ``flock`` on ``directory`` itself (no lock file to leave behind); yields
    False where the file system has no locks (creation then still never replaces a store)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"the MLflow store in {directory} is being created by another process that has "
                        f"not finished in {wait:.0f} s", key="logger.tracking_uri",
                        fix="end that process (a rerun then completes the store), or log elsewhere "
                        "with logger.root=<another directory>") from None
                time.sleep(0.2)
            except OSError:
                yield False
                return
        yield True
    finally:
        os.close(fd)
