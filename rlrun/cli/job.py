"""One training job: the function Hydra runs on a composed config (``task``), for a single run
(``rlrun.cli.single``) and for each job of Hydra's own path (``hydra_main``: multiruns, launchers).

It trains (``rlrun.lifecycle.run.train``), prints the run's one closing line and ends the process
with the run's exit code: 0, 2 (bad input, ``RlrunError``), 3 (diverged), 4 (a collector worker
died) or 128 + a signal.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from omegaconf import OmegaConf

from rlrun.core.errors import RlrunError
from rlrun.core.rundir import git_commit
from rlrun.core.signals import exit_code as run_exit_code
from rlrun.lifecycle.compose import CONF_DIR, env_name, package_versions, register_resolvers


def run_tags(hc, cfg=None) -> dict[str, str]:
    """Tags identifying and reproducing a run: presets (the env's after ``env.id``), config hash,
    versions (rlrun, torch, tensordict, gymnasium, the env's package), the git commit of the
    directory it was launched from (and rlrun's own when rlrun is a checkout), sweep and job
    number, SLURM job."""
    from hydra.types import RunMode

    from rlrun.core.confighash import config_hash

    choices = hc.runtime.choices
    env_id = cfg.get("env", {}).get("id") if cfg is not None else None
    tags = {"algo": str(choices.get("algo", "")), "env": env_name(str(choices.get("env", "")), env_id),
            **package_versions(env_id)}
    if cfg is not None:
        from rlrun.lifecycle.run import flatten

        tags["config_hash"] = config_hash(flatten(OmegaConf.to_container(cfg, resolve=True)))
    if hc.mode == RunMode.MULTIRUN:
        tags["sweep"] = Path(hc.sweep.dir).name
        tags["job_num"] = str(hc.job.num)
        tags["overrides"] = hc.job.override_dirname
        if cfg is not None and "logger" in cfg:  # under the sweep's parent run (rlrun.launch.sweep_group)
            from rlrun.launch.sweep_group import job_tags

            tags.update(job_tags(str(hc.sweep.dir), OmegaConf.to_container(cfg.logger, resolve=True),
                                 hc.runtime.cwd))
    user, own = git_commit(hc.runtime.cwd), git_commit()
    if user:
        tags["git_commit"] = user
    if own and own != user:
        tags["rlrun_git_commit"] = own
    for var, tag in (("SLURM_JOB_ID", "slurm_job_id"), ("SLURM_ARRAY_JOB_ID", "slurm_array_job_id"),
                     ("SLURM_ARRAY_TASK_ID", "slurm_array_task_id")):
        if var in os.environ:
            tags[tag] = os.environ[var]
    return tags


def task(cfg) -> None:
    """Trains the run ``cfg`` describes in Hydra's job directory; ends the process on a failure."""
    from hydra.core.hydra_config import HydraConfig

    _prestart_tracker(cfg)  # before torch: MLflow opens its store on another core meanwhile
    from rlrun.lifecycle.run import train

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    # A log file that stops taking bytes (a full disk) must not print logging's own traceback
    # per message: the run's next write of its own files fails as one clean error.
    logging.raiseExceptions = False
    try:
        try:
            from rlrun.distributed.launch import joined  # issue 39: this rank's share (alone: as is)

            with joined(cfg, run_dir) as (cfg, run_dir, world):
                summary = train(cfg, run_dir, run_tags(hc, cfg))
        finally:  # a run that ended before making its logger leaves its worker unused
            from rlrun.loggers.remote import discard_prestarted

            discard_prestarted()
    except KeyboardInterrupt as stop:  # Ctrl-C pressed twice, or once before training started
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(interrupted(stop, run_dir), file=sys.stderr, flush=True)
        exit_promptly(128 + signal.SIGINT)
    except (RlrunError, OSError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if isinstance(err, OSError):  # a write outside checkpoint.atomic_write (a logger's file)
            from rlrun.core.checkpoint import write_error

            failed = write_error(err, err.filename or run_dir)
            if failed is None:
                raise
            err = failed
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        sys.exit(err.exit_code)
    from rlrun.loggers.tracking import say

    ret = summary.get("eval/episode_return")
    code = run_exit_code(summary)
    if code:  # stopped by a signal, checkpoint written: 128 + signal (130 Ctrl-C, 143 SIGTERM)
        print(f"[rlrun] interrupted ({summary.get('stop_reason')}) at {summary['frames']}/"
              f"{summary['total_frames']} frames, checkpoint written; rerun the same command to "
              f"continue -> {summary['run_dir']}", file=sys.stderr, flush=True)
        exit_promptly(code)
    if world is None or world.leader:  # issue 39: one closing line, rank 0's
        say(f"[rlrun] {summary['status']}: {summary['frames']} frames, eval return "
            f"{'n/a' if ret is None else f'{ret:.2f}'}, {summary['wall_time_s']:.1f} s "
            f"-> {summary['run_dir']}")
    if summary["status"] == "diverged":
        from rlrun.lifecycle.load import CHECKPOINT

        kept = Path(summary["run_dir"]) / CHECKPOINT
        # say what is true: a run that diverged before its first checkpoint has none to keep
        where = (f"the last finite checkpoint is kept in {kept}" if kept.is_file() else
                 "it diverged before its first checkpoint, so none was written (a rerun starts afresh)")
        print(f"rlrun: error: the run diverged: {summary['stop_reason'].removeprefix('diverged: ')}\n"
              f"  fix: lower optim.lr (or add optim.max_grad_norm); {where}", file=sys.stderr)
        sys.exit(3)


def _prestart_tracker(cfg) -> None:
    """Starts MLflow's worker process (``rlrun.loggers.remote``) for an ``mlflow`` logger node."""
    try:
        logger = cfg.get("logger")
        node = OmegaConf.to_container(logger, resolve=True) if OmegaConf.is_dict(logger) else {}
    except Exception:  # an interpolation that fails: the run's validation reports it
        return
    from rlrun.loggers.remote import prestart

    prestart(node)


def exit_promptly(code: int) -> NoReturn:
    """Exits with ``code`` once a stopped run is closed, without the interpreter's final
    garbage collections over torch's and Hydra's module graphs.

    Those take seconds (4.7 s from the last line to the prompt on this project's 2-core
    machine, 1.3 s this way), while a user who pressed Ctrl-C waits for the prompt. The
    run's garbage is collected here first, so its finalisers still run; only what lives
    until exit anyway (modules) is frozen and left to the OS.
    """
    # The run is closed and its line printed: a Ctrl-C now could only raise inside a finaliser
    # that the collection runs ("Exception ignored ... KeyboardInterrupt") or turn 130 into a
    # death by the signal. The exit takes about a second.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.collect()
    gc.freeze()
    sys.exit(code)


def interrupted(stop: KeyboardInterrupt, run_dir: Path | None = None) -> str:
    """The one line for a run stopped by Ctrl-C without its usual checkpoint-and-exit."""
    from rlrun.core.signals import StopNow

    where = f" -> {run_dir}" if run_dir is not None else ""
    if isinstance(stop, StopNow):
        return (f"[rlrun] interrupted ({signal.Signals(stop.signum).name} twice): stopped at once, without "
                f"a checkpoint of the batch in progress; rerun the same command to continue from the last "
                f"one{where}")
    return (f"[rlrun] interrupted (SIGINT); rerun the same command to continue from the last checkpoint, "
            f"if any{where}")


def hydra_main(argv: list[str]) -> int:
    """Hydra's own path (``hydra.main``): multiruns, ``--cfg``, ``--help``, and a single run on a
    Hydra whose private names moved (``rlrun.core.private.hydra``)."""
    import hydra

    register_resolvers()  # the signature nodes conf/ starts from, and rlrun's resolvers
    main = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(task)
    sys.argv = [sys.argv[0], *argv]
    return exit_code(main)


def exit_code(call: Callable[[], object]) -> int:
    """Runs Hydra's part of a command: 0, or 130 with one line for a Ctrl-C while Hydra sets the
    run up, not a traceback (``HYDRA_FULL_ERROR=1`` keeps the traceback)."""
    try:
        call()
    except KeyboardInterrupt as stop:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(interrupted(stop), file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    return 0
