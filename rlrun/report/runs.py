"""Reads training runs from an MLflow store into a tidy DataFrame, one row per run.

The store is opened read-only in spirit: a missing SQLite file or run folder is
reported (never created), and only search and history calls are made.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd

from rlrun.core.confighash import NOT_CONFIG, config_hash, experiment_params  # noqa: F401 (re-exported)
from rlrun.core.errors import RlrunError

# MLflow's own telemetry would try the network; this machine class has none.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

EVAL_KEY = "eval/episode_return"
EVAL_STD_KEY = "eval/episode_return_std"
FRAMES_KEY = "frames"
PAGE_SIZE = 1000
COLUMNS = ["run_id", "experiment", "run_name", "status", "start_time", "seed", "final_return",
           "final_return_std", "frames", "total_frames", "partial", "failed", "config_hash",
           "curve_steps", "curve_values", "tags", "params"]


class ReportError(RlrunError):
    """A report cannot be made from the given input; rendered on one line."""

    def render(self) -> str:
        return f"{self.message}; fix: {self.fix}" if self.fix else self.message


def default_tracking_uri(cwd: str | Path | None = None) -> str:
    """The store ``rlrun`` writes by default: ``sqlite:///<cwd>/mlflow.db``."""
    return f"sqlite:///{Path(cwd or Path.cwd()).resolve() / 'mlflow.db'}"


def normalize_uri(uri: str | None) -> str:
    """Turns a bare path into a URI: ``x.db`` or a folder holding ``mlflow.db`` -> sqlite."""
    if uri is None:
        return default_tracking_uri()
    if "://" in uri or uri.startswith("databricks"):
        return uri
    path = Path(uri).expanduser().resolve()
    if path.is_dir() and (path / "mlflow.db").exists():
        return f"sqlite:///{path / 'mlflow.db'}"
    if path.suffix in (".db", ".sqlite", ".sqlite3") or not path.exists():
        return f"sqlite:///{path}"
    return path.as_uri()  # a file store folder (mlruns/)


def check_store(uri: str) -> None:
    """Raises ReportError when a local store does not exist (instead of creating it)."""
    fix = "pass --tracking-uri with the store the runs were logged to, e.g. sqlite:///path/to/mlflow.db"
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_file():
            raise ReportError(f"no MLflow store at {path}", fix=fix)
        try:
            with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as db:
                found = db.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                   "AND name='experiments'").fetchone()
        except sqlite3.Error as err:
            raise ReportError(f"{path} is not a readable SQLite file ({err})", fix=fix) from None
        if found is None:
            raise ReportError(f"{path} is not an MLflow store (no experiments table)", fix=fix)
    elif uri.startswith("file:") or "://" not in uri:
        path = Path(urlparse(uri).path if uri.startswith("file:") else uri)
        if not path.is_dir():
            raise ReportError(f"no MLflow store at {path}", fix=fix)


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def experiment_ids(client, uri: str, names: list[str] | None) -> dict[str, str]:
    """Maps experiment id -> name: the named ones, or every active experiment."""
    if names:
        out = {}
        for name in names:
            exp = client.get_experiment_by_name(name)
            if exp is None:
                known = ", ".join(sorted(e.name for e in client.search_experiments())) or "none"
                raise ReportError(f"no experiment named {name!r} in {uri} (it has: {known})",
                                  fix="pass an existing name to --experiment, or drop the flag")
            out[exp.experiment_id] = exp.name
        return out
    out, token = {}, None
    while True:
        page = client.search_experiments(max_results=PAGE_SIZE, page_token=token)
        out.update({e.experiment_id: e.name for e in page})
        token = page.token
        if not token:
            return out


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def eval_curve(history: list) -> tuple[np.ndarray, np.ndarray]:
    """Sorts a metric history by step; a step logged twice (resume) keeps its latest value."""
    latest: dict[int, tuple[int, float]] = {}
    for m in history:
        if m.step not in latest or m.timestamp >= latest[m.step][0]:
            latest[m.step] = (m.timestamp, m.value)
    steps = np.array(sorted(latest), dtype=float)
    return steps, np.array([latest[int(s)][1] for s in steps], dtype=float)


def run_record(client, run, experiment: str) -> dict[str, Any]:
    """One row of the runs table for an MLflow ``Run``."""
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")}
    params = dict(run.data.params)
    steps, values = eval_curve(client.get_metric_history(run.info.run_id, EVAL_KEY))
    metrics = run.data.metrics
    frames = _number(metrics.get(FRAMES_KEY, steps[-1] if len(steps) else None))
    total = _number(params.get("total_frames"))
    seed = tags.get("seed", params.get("seed"))
    status = run.info.status
    return {
        "run_id": run.info.run_id, "experiment": experiment, "run_name": run.info.run_name,
        "status": status, "start_time": run.info.start_time or 0,
        "seed": None if seed is None else str(seed),
        "final_return": float(values[-1]) if len(values) else float("nan"),
        "final_return_std": _number(metrics.get(EVAL_STD_KEY)),
        "frames": frames, "total_frames": total,
        "partial": bool(status != "FINISHED" or (not np.isnan(total) and not frames >= total)),
        # A run that raised, or whose evaluation went non-finite (diverged).
        "failed": bool(status == "FAILED" or not np.isfinite(values).all()),
        "config_hash": config_hash(params),
        "curve_steps": steps, "curve_values": values, "tags": tags, "params": params,
    }


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def _search(client, exp_ids: list[str], filter_string: str | None, token: str | None):
    from mlflow.exceptions import MlflowException

    try:
        return client.search_runs(exp_ids, filter_string or "", max_results=PAGE_SIZE, page_token=token)
    except MlflowException as err:
        if filter_string and err.error_code == "INVALID_PARAMETER_VALUE":
            raise ReportError(f"invalid filter {filter_string!r} ({_first_line(err)})",
                              fix="fix --filter (MLflow search syntax, e.g. \"tags.algo = 'sac'\")") from None
        raise


def load_runs(tracking_uri: str | None = None, experiments: list[str] | None = None,
              filter_string: str | None = None) -> pd.DataFrame:
    """Reads every matching run of a store.

    Args:
        tracking_uri: Any MLflow URI or a path to ``mlflow.db``; ``None`` means
            ``sqlite:///<cwd>/mlflow.db``.
        experiments: Experiment names; ``None`` means all active experiments.
        filter_string: MLflow search syntax, e.g. ``"tags.algo = 'sac'"`` or
            ``"params.`paper.table` = 'table1'"``.

    Returns:
        One row per run with the columns of ``COLUMNS``: ``final_return`` is the last
        ``eval/episode_return`` (by step), ``frames`` the last ``frames`` value,
        ``partial`` is true unless the run is FINISHED with ``frames >= total_frames``,
        ``failed`` when it is FAILED or an evaluation return is not finite (diverged),
        ``config_hash`` identifies its config but for the seed and ``NOT_CONFIG``,
        and ``curve_steps``/``curve_values`` hold the eval curve (numpy arrays).

    Raises:
        ReportError: The store does not exist, an experiment is unknown, or the filter is invalid.
    """
    uri = normalize_uri(tracking_uri)
    check_store(uri)
    try:
        client = _client(uri)
        exps = experiment_ids(client, uri, experiments)
        rows, token = [], None
        while exps:
            page = _search(client, list(exps), filter_string, token)
            rows += [run_record(client, r, exps[r.info.experiment_id]) for r in page]
            token = page.token
            if not token:
                break
    except ReportError:
        raise
    except Exception as err:  # unreachable server, unsupported schema, corrupt store
        raise ReportError(f"cannot read runs from {uri} ({type(err).__name__}: {_first_line(err)})",
                          fix="check --tracking-uri") from None
    return pd.DataFrame(rows, columns=COLUMNS)


def lookup(row: pd.Series | dict, key: str) -> str | None:
    """A run's value for a group key: a tag, else a param (``tags.X``/``params.X`` to choose).

    ``config_hash`` is the hash the report computes from the run's params (``config_hash``).
    """
    if key == "config_hash" and "config_hash" in row:
        return row["config_hash"]
    if key.startswith("tags."):
        return row["tags"].get(key[5:])
    if key.startswith("params."):
        return row["params"].get(key[7:])
    if key in row["tags"]:
        return row["tags"][key]
    return row["params"].get(key)
