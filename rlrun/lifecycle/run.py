"""The run lifecycle: validate, build (``rlrun.lifecycle.build``), resume, train, save, summarise.

The run directory holds ``config.yaml`` (resolved), ``checkpoint.pt``,
``summary.json`` and, with ``logger=csv``, ``metrics.csv``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rlrun.core import checkpoint, formats, saved
from rlrun.core.config_schema import validate_sections
from rlrun.core.confighash import SAFE_TO_CHANGE, matches
from rlrun.core.errors import CheckpointError, ConfigError
from rlrun.core.registry import build
from rlrun.core.rundir import RunLock, read_tracking, remove_stale_temp_files, write_tracking
from rlrun.core.runfiles import check_tree
from rlrun.core.signals import chain_signal_handler, install_stop_handlers, restore_handlers
from rlrun.distributed import checkpoint as rank_checkpoint
from rlrun.distributed.sync import broadcast_state
from rlrun.lifecycle.build import WORLD_STOP, Run, build_run, resolve_device
from rlrun.lifecycle.load import write_policy_file
from rlrun.lifecycle.writer import CHECKPOINT, write_json
from rlrun.loggers.mlflow_logger import ATTEMPT_TAG
from rlrun.loggers.tracking import say
from rlrun.modules import onednn
from rlrun.trainer.loop import Trainer


def flatten(cfg: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _find_checkpoint(resume: Any, run_dir: Path) -> Path | None:
    if resume in (False, None, "false", "never"):
        return None
    if resume in (True, "auto"):
        path = run_dir / CHECKPOINT
        return path if path.exists() else None
    path = Path(str(resume))
    path = path / CHECKPOINT if path.is_dir() else path
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}", key="resume",
                              fix="give a run directory holding checkpoint.pt, or resume=auto")
    return path


def train(cfg: DictConfig, run_dir: Path, tags: dict[str, str] | None = None) -> dict[str, Any]:
    """Trains the configured run in ``run_dir`` and returns its summary.

    Args:
        cfg: The resolved run config.
        run_dir: Where checkpoints, config and summary go.
        tags: Set on a new tracking run (algo, env, sweep, job number, commit, ...).
    """
    validate_sections(cfg)  # every section against its schema; cross-component rules: rlrun.lifecycle.build
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create the run directory {run_dir} ({err.strerror})",
                          key="hydra.run.dir", fix="run from a writable directory or set "
                          "hydra.run.dir=<a writable path>") from None
    check_tree(run_dir)  # a link in a run directory from elsewhere would make rlrun write outside it
    with RunLock(run_dir):  # one process per run directory; the kernel frees it if we die
        remove_stale_temp_files(run_dir)
        return _train(cfg, run_dir, tags or {})


def _train(cfg: DictConfig, run_dir: Path, tags: dict[str, str]) -> dict[str, Any]:
    """The story of a run: plan the resume, build it whole, restore, open the tracker, train,
    summarise; everything opened is closed once, last opened first (``Run`` as a context manager)."""
    device = resolve_device(cfg.device)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    onednn.use(cfg.get("gemm") or "blas")  # the large MLP products' library (issue 46)
    ckpt_path = _find_checkpoint(cfg.resume, run_dir)
    state = rank_checkpoint.load(ckpt_path) if ckpt_path else None  # alone: checkpoint.load
    # resolved once: config.yaml, the config hash, each checkpoint and the policy file hold it
    config_text = OmegaConf.to_yaml(cfg, resolve=True)
    resume = _resume_plan(cfg, run_dir, state, ckpt_path, config_text)
    # written before the tracker run can exist: a restart before the first checkpoint continues the
    # run tagged with this attempt_id (or run_id) instead of orphaning it
    tracking = {"run_id": resume["run_id"], "attempt_id": resume["attempt_id"],
                "config": _exact_config_hash(config_text)}
    torch.manual_seed(cfg.seed)
    with build_run(cfg, run_dir, device, state, config_text, tracking) as run:
        broadcast_state(run.parts.loss)  # issue 39: ranks start from rank 0's weights (alone: nothing)
        trainer, unit, total = run.trainer, run.parts.budget.unit, run.parts.budget.total
        if state is not None:
            _restore(trainer, state, ckpt_path, resume["unsafe"])
            if run.done >= total and (run_dir / "summary.json").exists():
                return _already_finished(cfg, run_dir, resume, run.done, unit, run)
            _say_resuming(resume, state, ckpt_path, run.done, total, unit, run.parts.buffer is not None)
        _open_logger(cfg, run_dir, tags, resume, run)  # only now: a restore that fails leaves no tracker run
        status = "FAILED"
        # under several ranks a signal asks the hook that stops all ranks together (WorldStop)
        previous = install_stop_handlers(run.trainer.hooks.get(WORLD_STOP, trainer))
        try:  # from here on a failure ends the tracker run FAILED (the finally below), set-up included
            status = _train_logged(cfg, run_dir, run, resume, config_text)
        except KeyboardInterrupt:  # Ctrl-C twice (signals.StopNow): stopped at once, last checkpoint kept
            status = "KILLED"
            raise
        finally:
            restore_handlers(previous)
            run.progress.close()
            summary = _summarise(cfg, run_dir, run, status)
    if trainer.interrupted:
        chain_signal_handler(previous, trainer.stop_signal)
    return summary


def _already_finished(cfg: DictConfig, run_dir: Path, resume: dict, done: int, unit: str,
                      run: Run) -> dict[str, Any]:
    """The summary of a run that had finished; its tracker run finished if a kill left it RUNNING."""
    say(f"[rlrun] {run_dir} already finished {done} {unit}; "
        f"raise total_{unit} to train on, or use resume=false to start afresh")
    run.closing.close()
    summary = saved.load_summary(run_dir / "summary.json", key="resume")
    if resume["run_id"] is not None and summary.get("status") == "finished":
        # a kill between the summary and the tracker's finish() left it RUNNING: finish it
        build("logger", cfg.logger, run_dir=run_dir, run_name=run_dir.name,
              run_id=resume["run_id"], resumed=True, resume_step=done).finish("FINISHED")
    return summary


def _say_resuming(resume: dict, state: dict, ckpt_path: Path | None, done: int, total: int, unit: str,
                  has_buffer: bool) -> None:
    say(f"[rlrun] resuming from {unit[:-1]} {done} of {total} "
        f"({ckpt_path})" + "".join(f"\n[rlrun]   changed: {c}" for c in resume["changes"]))
    if state.get("buffer") is None and has_buffer:
        say("[rlrun] the checkpoint holds no replay buffer (checkpoint.buffer / max_buffer_mb): "
            "training continues with an empty one")


def _open_logger(cfg: DictConfig, run_dir: Path, tags: dict[str, str], resume: dict, run: Run) -> None:
    """Opens the run's tracker, continuing the run ``resume`` names (rows past ``run.done``
    superseded), once ``tracking.json`` says which run it is."""
    where = "-".join(filter(None, [tags.get("algo"), tags.get("env")]))  # e.g. ppo-cartpole
    run_name = " ".join(filter(None, [where, run_dir.name if run_dir.name != "default" else ""])
                        ) or run_dir.name
    # The tracker may make its run while training starts (rlrun.loggers.remote): its id is added
    # to tracking.json once known (CheckpointWriter.note_run_id); W&B's run id stays there.
    write_tracking(run_dir, {**read_tracking(run_dir), **run.writer.tracking})
    run.logger.open(run_dir=run_dir, run_name=run_name, run_id=resume["run_id"],
                    resumed=resume["continues"],  # a fresh start sets old metric files aside
                    resume_step=run.done if resume["continues"] else None,
                    tags={**tags, "seed": str(cfg.seed), "run_dir": str(run_dir.resolve()),
                          ATTEMPT_TAG: resume["attempt_id"], **resume["tags"], **_paper_tags(cfg)})


def _train_logged(cfg: DictConfig, run_dir: Path, run: Run, resume: dict, config_text: str) -> str:
    """Logs the config, trains, saves the last checkpoint and the policy; returns the status."""
    logger, trainer, writer = run.logger, run.trainer, run.writer
    config_file = checkpoint.atomic_write_text(run_dir / "config.yaml", config_text)
    if resume["run_id"] is None:
        logger.log_params(flatten(OmegaConf.to_container(cfg, resolve=True)))
        logger.log_artifact(config_file)
    elif resume["changes"]:
        logger.set_tags({f"resume_change.{c.split(':')[0]}": c for c in resume["changes"]})
    trainer.train()
    _ = logger.run_id  # a tracker that could not make its run fails the run here if not before
    if trainer.diverged:
        return "DIVERGED"  # the last checkpoint stays the last finite one
    # Saved here, not in a hook, so that a signal landing after the checkpoint
    # hook of the last batch still keeps that batch (else it is trained twice).
    writer.save(trainer)
    # the policy alone (config + weights), so that a remote tracking server holds the model
    policy_file = write_policy_file(run_dir, cfg, run.parts.policy, trainer.frames, config_text=config_text)
    logger.log_artifact(policy_file)
    return "KILLED" if trainer.interrupted else "FINISHED"


def _summarise(cfg: DictConfig, run_dir: Path, run: Run, status: str) -> dict[str, Any]:
    """Writes ``summary.json`` and ends the tracker run with ``status``; returns the summary."""
    logger, trainer, writer, parts = run.logger, run.trainer, run.writer, run.parts
    stats = parts.hooks["train_stats"]
    summary = {
        "status": {"KILLED": "interrupted"}.get(status, status.lower()),
        "frames": trainer.frames, "total_frames": cfg.get("total_frames"),
        **({"total_updates": parts.budget.total} if parts.budget.unit == "updates" else {}),
        "stop_reason": trainer.stop_reason,
        "optim_steps": trainer.optim_steps, "wall_time_s": round(trainer.wall_time, 3),
        **parts.hooks["evaluation"].last,
        "train/episode_return_recent": (sum(stats.recent_returns) / len(stats.recent_returns)
                                        if stats.recent_returns else None),
        "mlflow_run_id": _run_id_or_none(logger), "run_dir": str(run_dir),
        formats.CURRENT["summary"][0]: formats.CURRENT["summary"][1],
    }
    try:
        writer.note_run_id(summary["mlflow_run_id"])
        write_json(run_dir / "summary.json", summary)
        if status != "FAILED":
            logger.log_artifact(run_dir / "summary.json")
        if status == "DIVERGED":
            logger.set_tags({"status": "diverged", "diverged": trainer.diverged})
    finally:  # even when a full disk fails the summary: the tracker run ends (never RUNNING for
        # ever); the ExitStack then shuts the workers down
        logger.finish({"DIVERGED": "FAILED"}.get(status, status))
    return summary


def _resume_plan(cfg: DictConfig, run_dir: Path, state: dict | None, ckpt_path: Path | None,
                 config_text: str) -> dict:
    """The tracker run to continue, the config changes to list, the tags to add (``config_text``:
    ``cfg`` as resolved YAML)."""
    plan: dict[str, Any] = {"run_id": None, "changes": [], "unsafe": [], "tags": {}, "continues": False,
                            "attempt_id": uuid.uuid4().hex}
    new = flatten(OmegaConf.to_container(cfg, resolve=True))
    if state is None:
        known = read_tracking(run_dir)
        same = known.get("config") == _exact_config_hash(config_text)
        if cfg.resume not in (False, "false", "never") and same:
            # killed before its first checkpoint: the same tracker run again, by its id if the
            # killed process learned it, else by its attempt_id tag (a str checked by the tracker)
            plan["run_id"] = known.get("run_id") if isinstance(known.get("run_id"), str) else None
            plan["continues"] = plan["run_id"] is not None
            if isinstance(known.get("attempt_id"), str):
                plan["attempt_id"] = known["attempt_id"]
        return plan
    # unresolved: the saved config is data, written resolved; resolving a hostile one's
    # ${oc.env:...} here would copy the environment into the listed changes and the tracker
    # checkpoint.load checked it is a bounded YAML mapping
    old = flatten(saved.parse_yaml(state.get("config") or "{}", f"{ckpt_path} (its config)", key="resume"))
    changes = [(k, old.get(k, "<unset>"), new.get(k, "<unset>")) for k in sorted(set(old) | set(new))
               if old.get(k, "<unset>") != new.get(k, "<unset>")]
    unsafe = [c for c in changes if not matches(c[0], SAFE_TO_CHANGE)]
    if unsafe and not cfg.get("resume_allow_changes"):
        listed = "; ".join(_listed(unsafe[:8]))
        raise ConfigError(
            f"the checkpoint {ckpt_path} was trained with another config ({listed})", key="resume",
            fix="rerun with the values it started with, start afresh with resume=false, or accept the "
            "changes with resume_allow_changes=true (they are then listed and tagged on the run)")
    plan["changes"] = _listed(c for c in changes if c[0] != "resume")
    plan["unsafe"] = _listed(unsafe)  # accepted by resume_allow_changes
    if ckpt_path is not None and ckpt_path.parent.resolve() != run_dir.resolve():
        plan["tags"] = {"resumed_from": str(ckpt_path.resolve()), "resumed_from_frame": str(state["frames"])}
    else:
        plan["run_id"], plan["continues"] = state.get("mlflow_run_id"), True
    return plan


def _run_id_or_none(logger: Any) -> str | None:
    """The tracker run's id for the summary; none if the tracker could not make its run (that
    error is the run's already, or it failed for another reason first)."""
    try:
        return logger.run_id
    except Exception:
        return None


def _listed(changes: Iterable[tuple[str, Any, Any]]) -> list[str]:
    """``key: old -> new`` per (key, old, new) config change."""
    return [f"{k}: {a!r} -> {b!r}" for k, a, b in changes]


def _exact_config_hash(config_text: str) -> str:
    """Every key, seed included (``config_text``: the resolved config's YAML): re-attaching a killed
    run needs the very same config (``rlrun.core.confighash`` leaves out the seed and logging
    keys, to group runs for reports)."""
    return hashlib.sha256(config_text.encode()).hexdigest()[:16]


def _paper_tags(cfg: DictConfig) -> dict[str, str]:
    paper = cfg.get("paper")
    return {f"paper.{k}": str(v) for k, v in paper.items()} if paper else {}


def _restore(trainer: Trainer, state: dict, path: Path, unsafe: list[str]) -> None:
    """Loads ``state`` into the trainer; a state that does not fit is one ``CheckpointError`` whose
    fix names the likely cause (``unsafe``: config changes accepted with resume_allow_changes)."""
    try:
        trainer.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as err:
        if unsafe:
            fix = (f"the changes accepted with resume_allow_changes=true alter what is saved "
                   f"({'; '.join(unsafe[:4])}): rerun without them, or start afresh with resume=false")
        else:  # the config was checked equal (up to safe keys) before: the code that saved it differs
            fix = ("the config is the one it was saved with, so an rlrun whose saved state differs "
                   "(another version) wrote it: resume it with that version, or start afresh with "
                   "resume=false")
        raise CheckpointError(
            f"checkpoint {path} does not fit this run ({type(err).__name__}: "
            f"{checkpoint.error_reason(err)[:300]})", key="resume", fix=fix) from None
