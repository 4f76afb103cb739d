"""A single run (``rlrun key=value ...``): its config composed once and checked, then trained.

``hydra.main`` composes a run's config three times (``Hydra.get_mode``, ``Hydra.run``, and
rlrun's check of the presets before it: 1.1 s of a 1,024-frame run's start-up). ``run_single``
composes once (``rlrun.lifecycle.compose.compose_single``) on a Hydra instance and runs the job
as ``Hydra.run`` does (``rlrun.core.private.hydra``); multiruns, ``--cfg``, ``--help`` and the
like keep Hydra's own path (``rlrun.cli.job.hydra_main``). The compose and its checks run in a
forked process while this one imports torch (``rlrun.cli.beside``); a bad input ends the command
there, before torch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rlrun.core.errors import RlrunError


def run_single(argv: list[str], beside: bool = False) -> int:
    """Composes, checks and trains one run; returns the command's exit code.

    With ``beside`` (the process's own command: a caller of ``rlrun.cli.main.main`` in its own
    process, such as a test, keeps its streams and is never ended by a forked child's exit code),
    the config is composed in a forked process while this one imports torch and the training
    modules, and MLflow's worker starts first.
    """
    from hydra import version

    from rlrun.cli import beside as fork
    from rlrun.cli.job import hydra_main, task
    from rlrun.core.private import hydra as private

    if not private.available():  # this Hydra moved a private name: its public path, same run
        return hydra_main(argv)
    version.setbase("1.3")  # as hydra.main(version_base="1.3") does
    sys.argv = [sys.argv[0], *argv]
    composed: Any = fork.AGAIN
    if beside and _may_log_to_mlflow(argv):
        from rlrun.loggers.remote import start_early

        start_early()
    if beside and fork.available():
        composed = fork.beside(lambda: _compose(argv), _import_training)
    if composed is fork.AGAIN:  # not forked, or the child could not settle it: the same, here
        composed = _compose(argv)
    if isinstance(composed, int):
        return composed
    try:
        _check_run_dir(composed)
    except RlrunError as err:
        return config_error(err)
    from rlrun.cli.job import exit_code
    from rlrun.lifecycle.compose import register_resolvers

    register_resolvers(signatures=False)  # the config's ${...}: composed elsewhere, resolved here
    return exit_code(lambda: private.run(composed, task))


def _compose(argv: list[str]) -> Any:
    """The run's config, or the exit code of a reported error (rlrun's one line, or Hydra's own)."""
    from hydra.core.global_hydra import GlobalHydra

    from rlrun.core.private.hydra import create
    from rlrun.lifecycle.compose import CONF_DIR, compose_single

    hydra = create(CONF_DIR)
    try:
        return compose_single(argv, hydra)
    except RlrunError as err:
        return config_error(err)
    finally:
        GlobalHydra.instance().clear()


def config_error(err: RlrunError) -> int:
    """Prints ``err`` as one line and returns its exit code (``HYDRA_FULL_ERROR=1``: raises it)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(f"rlrun: error: {err.render()}", file=sys.stderr)
    return err.exit_code


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
