"""The ``rlrun`` command: Hydra entry point, component listing, clear errors.

    rlrun [overrides]            train (Hydra: -m for multirun, --cfg job, --help)
    rlrun list [kind]            registered components and config presets
    rlrun explain [overrides]    the composed run: capabilities, loop settings, hooks per point
    rlrun report ...             tables and learning curves from finished runs
    rlrun dataset make|list      offline datasets (Minari's layout) made with D4RL's recipe
    rlrun eval <run> [key=value] evaluate a run's policy (episodes=, seed=, deterministic=, video=)
    rlrun export <run> [--format pt2|onnx] [--out FILE]   a self-contained policy file

Config mistakes are caught before Hydra composes (unknown preset, misspelt
key) or while building (wrong type, bad value) and reported as one message
naming the key and the fix, with exit code 2. ``HYDRA_FULL_ERROR=1`` shows the
full traceback instead.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

from omegaconf import OmegaConf

from rlrun.core.errors import RlrunError
from rlrun.core.rundir import git_commit
from rlrun.core.signals import exit_code
from rlrun.lifecycle.compose import (
    CONF_DIR,
    SIGNATURE_GROUP,
    env_name,
    list_components,
    package_versions,
    precheck,
    register_resolvers,
)


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


def _task(cfg) -> None:
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
        print(_interrupted(stop, run_dir), file=sys.stderr, flush=True)
        _exit_promptly(128 + signal.SIGINT)
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
    code = exit_code(summary)
    if code:  # stopped by a signal, checkpoint written: 128 + signal (130 Ctrl-C, 143 SIGTERM)
        print(f"[rlrun] interrupted ({summary.get('stop_reason')}) at {summary['frames']}/"
              f"{summary['total_frames']} frames, checkpoint written; rerun the same command to "
              f"continue -> {summary['run_dir']}", file=sys.stderr, flush=True)
        _exit_promptly(code)
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


def _exit_promptly(code: int) -> NoReturn:
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


def _interrupted(stop: KeyboardInterrupt, run_dir: Path | None = None) -> str:
    """The one line for a run stopped by Ctrl-C without its usual checkpoint-and-exit."""
    from rlrun.core.signals import StopNow

    where = f" -> {run_dir}" if run_dir is not None else ""
    if isinstance(stop, StopNow):
        return (f"[rlrun] interrupted ({signal.Signals(stop.signum).name} twice): stopped at once, without "
                f"a checkpoint of the batch in progress; rerun the same command to continue from the last "
                f"one{where}")
    return (f"[rlrun] interrupted (SIGINT); rerun the same command to continue from the last checkpoint, "
            f"if any{where}")


def use_huge_pages_for_large_tensors() -> None:
    """Backs torch's CPU tensors of 2 MB and more with transparent huge pages, unless the user set
    ``THP_MEM_ALLOC_ENABLE`` already.

    Collected batches and replay storage are large, fresh allocations: with 4 KB pages, faulting
    them in costs more than writing them (216 MB on this project's 2-core machine: 0.17 s to
    allocate and write, 0.04 s to write again, 0.06 s to allocate and write with huge pages).
    torch reads the variable once, at its first allocation of 2 MB or more, so this runs before
    anything is built; worker processes inherit it.
    """
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def skip_the_final_garbage_collection() -> None:
    """At exit, moves every object into the generation the collector never visits (``gc.freeze``),
    so that the interpreter's last collection skips the heap: with torch imported that pass alone
    held the exit 1.5-4 s on this project's 2-core machine (a dead collector worker stopped the run
    in 3.9 s instead of about one). Other ``atexit`` handlers run as before, and runs close their
    files and trackers explicitly; what the skipped pass would have freed, the OS frees."""
    if not _AT_EXIT:
        _AT_EXIT.append(gc.freeze)
        atexit.register(gc.freeze)


_AT_EXIT: list = []


def main(argv: list[str] | None = None) -> int:
    """``rlrun``: exit code 0, 2 (bad input, see ``RlrunError``), 3 (diverged), 4 (a collector worker
    died, ``WorkerError``) or 128 + a signal."""
    command = argv is None  # the process's own command (rlrun, python -m rlrun), not a caller's
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv, command)
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (set-up, eval, export, report): one line
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print("\n[rlrun] interrupted (SIGINT)", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


def _main(argv: list[str], command: bool = False) -> int:
    use_huge_pages_for_large_tensors()
    skip_the_final_garbage_collection()
    if argv[:1] == ["list"]:
        return list_components(argv[1:])
    if argv[:1] == ["explain"]:
        from rlrun.lifecycle.explain import main as explain_main

        return explain_main(argv[1:])
    if argv[:1] in (["eval"], ["export"]):
        from rlrun.cli.evaluate import main as eval_main
        from rlrun.cli.export import main as export_main

        return (eval_main if argv[0] == "eval" else export_main)(argv[1:])
    if argv[:1] == ["dataset"]:
        from rlrun.cli.dataset import main as dataset_main

        return dataset_main(argv[1:])
    if argv[:1] == ["report"]:
        from rlrun.report.cli import main as report_main

        return report_main(argv[1:])
    info_only = any(a in ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c",
                          "--shell-completion", "-sc") or a.startswith("--cfg") for a in argv)
    single = not info_only and _single_run(argv)
    if single:  # composed once (beside torch's import), then run as Hydra.run would
        return _run_single(argv, beside=command)
    register_resolvers()
    if not info_only:
        try:
            precheck(argv)
        except RlrunError as err:
            return _config_error(err)
    if "--help" in argv or "-h" in argv:
        return _app_help(argv)
    return _run_hydra_main(argv)


def _app_help(argv: list[str]) -> int:
    """Hydra's ``--help`` without the ``signature/*`` groups: those hold each component's factory
    defaults for presets to start from (``compose._store_signatures``), not choices to make on a
    command line. Hydra's help lists every group but its own (a fixed predicate in its
    ``get_help``), so its printed text is filtered."""
    import contextlib
    import io

    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            return _run_hydra_main(argv)
    finally:
        sys.stdout.write("".join(line for line in text.getvalue().splitlines(keepends=True)
                                 if not line.startswith(f"{SIGNATURE_GROUP}/")))
        sys.stdout.flush()


def _config_error(err: RlrunError) -> int:
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(f"rlrun: error: {err.render()}", file=sys.stderr)
    return err.exit_code


def _single_run(argv: list[str]) -> bool:
    """Only overrides, none of them Hydra's mode: one run, which ``_run_single`` composes once."""
    return all(not a.startswith("-") and not a.lstrip("+~").startswith("hydra.mode") for a in argv)


def _run_single(argv: list[str], beside: bool = False) -> int:
    """A single run with its config composed once (``rlrun.cli.single``).

    With ``beside`` (the process's own command: a caller of ``main`` in its own process, such as
    a test, keeps its streams and is never ended by a forked child's exit code), the config is
    composed in a forked process while this one imports torch and the training modules, and
    MLflow's worker starts first."""
    from rlrun.cli.single import run_single

    if beside and _may_log_to_mlflow(argv):
        from rlrun.loggers.remote import start_early

        start_early()
    return run_single(argv, _task, precheck, _config_error, _run_hydra_main, _interrupted,
                      meanwhile=_import_training if beside else None)


def _may_log_to_mlflow(argv: list[str]) -> bool:
    """Whether the command line leaves the logger at the default (MLflow) or picks MLflow: its
    worker is then worth starting before the config is composed (``rlrun.loggers.remote.start_early``;
    one the composed config does not use is ended)."""
    for arg in argv:
        key, _, value = arg.lstrip("+~").partition("=")
        if key == "logger" and value != "mlflow":
            return False
    return True


def _import_training() -> None:
    import rlrun.lifecycle.run  # noqa: F401 -- torch and the training modules, while the config is composed


def _run_hydra_main(argv: list[str], task=None) -> int:
    import hydra

    from rlrun.cli.single import exit_code

    hydra_main = hydra.main(version_base="1.3", config_path=str(CONF_DIR),
                            config_name="config")(task or _task)
    sys.argv = [sys.argv[0], *argv]
    return exit_code(hydra_main, _interrupted)


if __name__ == "__main__":
    sys.exit(main())
