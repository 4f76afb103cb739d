"""A sweep as one group in the trackers: an MLflow parent run per sweep, its jobs the children.

A Hydra multirun (any launcher) or an Optuna search calls ``SweepGroup.on_multirun_start``
once, in the driver, before any job (registered under ``hydra.callbacks`` in
``conf/config.yaml``). With an MLflow logger it creates the sweep's parent run (named after
the sweep directory, tagged ``rlrun.sweep_parent``) and records it in
``<sweep dir>/sweep.json``; rerunning the same sweep directory (an Optuna study continued, a
sweep rerun to finish its jobs) reuses it. Each job finds the parent through its own sweep
directory (``job_tags``, called by ``rlrun.cli.job.run_tags``), whatever process or node it runs
on, and its MLflow run gets ``mlflow.parentRunId``: MLflow's UI shows the sweep as one
expandable row. Nothing enters the config, so config hashes do not change.

The other trackers group by what a job already knows: W&B by ``group=`` the sweep's name
(``rlrun.loggers.wandb``), TensorBoard by directory (each job's event files lie under the
sweep directory: ``tensorboard --logdir <sweep dir>`` shows one sweep).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlrun.core import saved

log = logging.getLogger(__name__)

GROUP_FILE = "sweep.json"
PARENT_TAG = "rlrun.sweep_parent"
"""Tag of a sweep's parent run (``rlrun report`` leaves these out: they hold no training)."""


def mlflow_target(logger: dict[str, Any] | None, cwd: str | Path | None = None) -> dict[str, str] | None:
    """The MLflow store and experiment a logger config writes to (``logger=mlflow`` or an
    MLflow member of ``logger=multi``), as ``{"tracking_uri", "experiment", "root"}``; else None."""
    if not logger:
        return None
    if logger.get("name") == "multi":
        members = [m for m in (logger.get("loggers") or {}).values() if m and m.get("name") == "mlflow"]
        return mlflow_target(members[0], cwd) if members else None
    if logger.get("name") != "mlflow":
        return None
    from rlrun.loggers.store import embedded_uri

    root = Path(logger.get("root") or cwd or os.getcwd()).resolve()
    return {"tracking_uri": logger.get("tracking_uri") or embedded_uri(root),
            "experiment": logger.get("experiment") or "rlrun", "root": str(root)}


def open_experiment(target: dict[str, str]) -> tuple[Any, str]:
    """An ``MlflowClient`` on the target's store and its experiment's id (both created if missing,
    the artifacts where ``rlrun.loggers.tracking`` puts them)."""
    from mlflow.tracking import MlflowClient

    from rlrun.loggers.store import open_client, sqlite_path

    uri = target["tracking_uri"]
    if uri.startswith(("http://", "https://")):  # a dead server fails in seconds, not MLflow's minutes
        from rlrun.loggers.mlflow_logger import probe_server

        probe_server(uri)
    db = sqlite_path(uri)
    # the embedded store is made aside and moved into place, as a run's own first open does
    client = open_client(db) if db is not None else MlflowClient(uri)
    exp = client.get_experiment_by_name(target["experiment"])
    if exp is not None:
        return client, exp.experiment_id
    artifacts = (Path(target["root"]) / "mlruns").as_uri() if uri.startswith("sqlite") else None
    return client, client.create_experiment(target["experiment"], artifact_location=artifacts)


def read_group(sweep_dir: Path) -> dict[str, Any]:
    try:
        return saved.check_fields(saved.load_json(Path(sweep_dir) / GROUP_FILE), {}, GROUP_FILE)
    except saved.SavedFileError:
        return {}


def open_parent(sweep_dir: Path, target: dict[str, str], tags: dict[str, str]) -> str:
    """The sweep's MLflow parent run id: the one ``sweep.json`` records if its store still has it,
    else a new run. Several drivers of one sweep directory take turns (a file lock)."""
    sweep_dir = Path(sweep_dir).resolve()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / f".{GROUP_FILE}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = read_group(sweep_dir).get("mlflow") or {}
        client, exp_id = open_experiment(target)
        same_store = (known.get("tracking_uri"), known.get("experiment")) == (
            target["tracking_uri"], target["experiment"])
        if same_store and known.get("parent_run_id"):
            try:
                client.update_run(known["parent_run_id"], status="RUNNING")
                return known["parent_run_id"]
            except Exception as err:  # deleted from the store: a new parent
                log.info("the sweep's parent run %s is gone (%s): creating another",
                         known["parent_run_id"], err)
        run = client.create_run(exp_id, run_name=sweep_dir.name,
                                tags={PARENT_TAG: "true", "sweep": sweep_dir.name,
                                      "sweep_dir": str(sweep_dir), **tags})
        record = {**read_group(sweep_dir), "mlflow": {
            "parent_run_id": run.info.run_id, "tracking_uri": target["tracking_uri"],
            "experiment": target["experiment"]}}
        tmp = sweep_dir / f".{GROUP_FILE}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, sweep_dir / GROUP_FILE)
        return run.info.run_id


def job_tags(sweep_dir: str | Path, logger: dict[str, Any] | None, cwd: str | Path | None = None
             ) -> dict[str, str]:
    """Tags that put a job's run under its sweep's parent (``mlflow.parentRunId``), when the sweep
    has one in the store and experiment this job logs to."""
    parent = read_group(Path(cwd or ".") / sweep_dir).get("mlflow") or {}
    target = mlflow_target(logger, cwd)
    if not parent.get("parent_run_id") or target is None:
        return {}
    where = (target["tracking_uri"], target["experiment"])
    if (parent.get("tracking_uri"), parent.get("experiment")) != where:
        return {}  # this job logs elsewhere: MLflow nests runs of one experiment only
    return {"mlflow.parentRunId": parent["parent_run_id"]}


def sweep_filter(sweep: str) -> str:
    """The MLflow search filter for one sweep's jobs: ``sweep`` is its parent run id, its sweep
    directory (whose ``sweep.json`` names the parent) or that directory's name (tag ``sweep``)."""
    if re.fullmatch(r"[0-9a-f]{32}", sweep):
        parent = sweep
    else:
        parent = (read_group(Path(sweep)).get("mlflow") or {}).get("parent_run_id")
    if parent:
        return f"tags.`mlflow.parentRunId` = '{parent}'"
    return f"tags.sweep = '{Path(sweep).name}'"


class SweepGroup(Callback):
    """Hydra callback (``hydra.callbacks.sweep_group``): opens the sweep's parent run at the start
    of a multirun and marks it finished at its end. Hydra turns an exception here into a warning:
    a store that cannot be reached leaves the jobs ungrouped, and the jobs report it themselves."""

    def __init__(self) -> None:
        self.parent: tuple[dict[str, str], str] | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        hydra_config = HydraConfig.instance()
        saved = hydra_config.cfg
        hydra_config.set_config(config)  # not set yet in the driver: ${hydra:runtime.cwd} needs it
        try:
            logger = OmegaConf.to_container(config.logger, resolve=True) if "logger" in config else None
        finally:
            hydra_config.cfg = saved
        target = mlflow_target(logger, config.hydra.runtime.cwd)
        if target is None:
            return
        hc = config.hydra
        tags = {"overrides": " ".join(str(o) for o in hc.overrides.task)[:5000],
                "algo": str(hc.runtime.choices.get("algo", "")), "kind": "sweep"}
        if "study_name" in hc.sweeper:
            tags["optuna.study"] = str(hc.sweeper.study_name)
        sweep_dir = Path(hc.runtime.cwd) / str(hc.sweep.dir)
        self.parent = (target, open_parent(sweep_dir, target, tags))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.parent is not None:
            target, run_id = self.parent
            open_experiment(target)[0].set_terminated(run_id, status="FINISHED")
