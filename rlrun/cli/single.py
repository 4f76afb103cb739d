"""A single run (``rlrun key=value ...``) with its config composed once, beside torch's import.

``hydra.main`` composes a run's config three times (``precheck``'s check of the presets,
``Hydra.get_mode``, ``Hydra.run``: 1.1 s of a 1,024-frame run's start-up). ``run_single``
does what ``hydra.main`` -> ``Hydra.run`` does with one Hydra instance and one compose,
which ``rlrun.lifecycle.compose.precheck`` makes and checks; multiruns, ``--cfg``, ``--help`` and the like
keep Hydra's own path. The compose and its checks run in a forked process while this one
imports torch (``rlrun.cli.beside``); a bad input ends the command there, before torch.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from rlrun.core.errors import RlrunError


def run_single(argv: list[str], task: Callable, precheck: Callable, config_error: Callable[[RlrunError], int],
               fallback: Callable[..., int], interrupted: Callable,
               meanwhile: Callable[[], None] | None = None) -> int:
    """Runs ``task`` on the config ``precheck(argv, hydra)`` composes, as ``Hydra.run`` would.

    Falls back to Hydra's own path (``fallback(argv)``) when composing fails without an error of
    precheck's, so that Hydra's message is unchanged. With ``meanwhile`` (importing torch), that
    runs in this process while a forked one composes (``rlrun.cli.beside``), unless turned off.
    """
    from hydra import version

    from rlrun.cli import beside

    version.setbase("1.3")  # as hydra.main(version_base="1.3") does
    sys.argv = [sys.argv[0], *argv]
    composed: Any = beside.AGAIN
    if meanwhile is not None and beside.available():
        def in_child() -> Any:  # the fallback's task must not train in the child: the parent does
            return _compose(argv, task, precheck, config_error, lambda a: fallback(a, task=_hand_back))

        composed = beside.beside(in_child, meanwhile)
    if composed is beside.AGAIN:
        composed = _compose(argv, task, precheck, config_error, fallback)
    if isinstance(composed, int):
        return composed
    cfg, task_name = composed
    try:
        _check_run_dir(cfg)
    except RlrunError as err:
        return config_error(err)
    return _run(cfg, task_name, task, interrupted)


def _check_run_dir(cfg: Any) -> None:
    """Refuses a run directory holding a link or non-regular file before Hydra writes ``.hydra/``
    and ``rlrun.log`` into it (``rlrun.core.runfiles``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals
    from omegaconf import OmegaConf

    from rlrun.core.runfiles import check_tree

    if not OmegaConf.has_resolver("hydra"):  # ${hydra:...} and ${now:...}: Hydra registers them in run_job
        setup_globals()
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} in hydra.run.dir; run_job sets it again
    try:
        run_dir = str(cfg.hydra.run.dir)
    except Exception:  # noqa: BLE001 - e.g. an rlrun resolver the job registers: train() checks before the lock
        return
    check_tree(run_dir)


def _hand_back(cfg: Any) -> None:
    """The fallback's task in the forked child: Hydra's own path must train in the parent."""
    from rlrun.cli.beside import Again

    raise Again()


def _compose(argv: list[str], task: Callable, precheck: Callable, config_error: Callable[[RlrunError], int],
             fallback: Callable[[list[str]], int]) -> Any:
    """``(cfg, task name)`` of the run, or the exit code of a reported error."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import (
        create_automatic_config_search_path,
        detect_calling_file_or_module_from_task_function,
        detect_task_name,
        run_and_report,
    )
    from hydra.core.global_hydra import GlobalHydra

    from rlrun.lifecycle.compose import CONF_DIR

    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
    search_path = create_automatic_config_search_path(calling_file, calling_module, str(CONF_DIR))
    task_name = detect_task_name(calling_file, calling_module)
    hydra = run_and_report(lambda: Hydra.create_main_hydra2(task_name=task_name,
                                                            config_search_path=search_path))
    try:
        try:
            cfg = precheck(argv, hydra)
        except RlrunError as err:
            return config_error(err)
    finally:
        GlobalHydra.instance().clear()
    if cfg is None:
        return fallback(argv)
    return cfg, task_name


def _run(cfg: Any, task_name: str, task: Callable, interrupted: Callable) -> int:
    """Runs ``task`` on the composed ``cfg`` as ``Hydra.run`` does (a job in ``hydra.run.dir``)."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.utils import run_and_report
    from hydra.core.utils import JobRuntime, configure_log, run_job, setup_globals
    from hydra.types import HydraContext

    from rlrun.lifecycle.compose import register_resolvers

    register_resolvers(signatures=False)  # the config's ${...}: composed elsewhere, resolved here
    setup_globals()  # Hydra's ${now:...} and ${hydra:...}, as its Hydra instance registers them
    JobRuntime.instance().set("name", task_name)
    configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)  # as compose_config did where it ran

    def run() -> None:
        callbacks = Callbacks(cfg)
        callbacks.on_run_start(config=cfg, config_name="config")
        # run_job reads no config loader: the config is composed already
        ret = run_job(hydra_context=HydraContext(config_loader=None, callbacks=callbacks),
                      task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                      configure_logging=True)
        callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
        _ = ret.return_value  # raises the task's exception, for run_and_report to print

    return exit_code(lambda: run_and_report(run), interrupted)


def exit_code(call: Callable[[], object], interrupted: Callable[[KeyboardInterrupt], str]) -> int:
    """Runs Hydra's part of a command: 0, or 130 with one line (``interrupted``) for a Ctrl-C while
    Hydra sets the run up, not a traceback (``HYDRA_FULL_ERROR=1`` keeps the traceback)."""
    try:
        call()
    except KeyboardInterrupt as stop:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(interrupted(stop), file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    return 0
