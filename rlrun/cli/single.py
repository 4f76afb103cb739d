"""A single run (``rlrun key=value ...``) with its config composed once.

``hydra.main`` composes a run's config three times (``precheck``'s check of the presets,
``Hydra.get_mode``, ``Hydra.run``: 1.1 s of a 1,024-frame run's start-up). ``run_single``
does what ``hydra.main`` -> ``Hydra.run`` does with one Hydra instance and one compose,
which ``rlrun.cli.compose.precheck`` makes and checks; multiruns, ``--cfg``, ``--help`` and the like
keep Hydra's own path.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from rlrun.core.errors import RlrunError


def run_single(argv: list[str], task: Callable, precheck: Callable, config_error: Callable[[RlrunError], int],
               fallback: Callable[[list[str]], int], interrupted: Callable) -> int:
    """Runs ``task`` on the config ``precheck(argv, hydra)`` composes, as ``Hydra.run`` would.

    Falls back to Hydra's own path (``fallback``) when composing fails without an error of
    precheck's, so that Hydra's message is unchanged.
    """
    from hydra import version
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import (
        create_automatic_config_search_path,
        detect_calling_file_or_module_from_task_function,
        detect_task_name,
        run_and_report,
    )
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    version.setbase("1.3")  # as hydra.main(version_base="1.3") does
    sys.argv = [sys.argv[0], *argv]
    from rlrun.cli.compose import CONF_DIR

    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
    search_path = create_automatic_config_search_path(calling_file, calling_module, str(CONF_DIR))
    hydra = run_and_report(lambda: Hydra.create_main_hydra2(
        task_name=detect_task_name(calling_file, calling_module), config_search_path=search_path))
    try:
        try:
            cfg = precheck(argv, hydra)
        except RlrunError as err:
            return config_error(err)
        if cfg is None:
            GlobalHydra.instance().clear()
            return fallback(argv)

        def run() -> None:
            callbacks = Callbacks(cfg)
            callbacks.on_run_start(config=cfg, config_name="config")
            ret = run_job(hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                          task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                          configure_logging=True)
            callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
            _ = ret.return_value  # raises the task's exception, for run_and_report to print

        try:
            run_and_report(run)
        except KeyboardInterrupt as stop:  # Ctrl-C while Hydra sets the run up: no traceback
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(interrupted(stop), file=sys.stderr, flush=True)
            return 128 + signal.SIGINT
    finally:
        GlobalHydra.instance().clear()
    return 0
