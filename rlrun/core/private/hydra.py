"""Hydra's private names (``hydra._internal``): a single run composed once, then run as ``Hydra.run`` runs it.

Hydra's public entry, ``hydra.main``, composes one run's config three times (``Hydra.get_mode``,
``Hydra.run``, and rlrun's own check of the presets before it); its public ``hydra.compose`` makes
no run (no job directory, ``.hydra/`` files or log configuration). rlrun composes once on a
``Hydra`` instance and hands the config to the public ``hydra.core.utils.run_job``, which needs
the private ``Callbacks`` of the config's ``hydra.callbacks``. The names:

- ``hydra._internal.hydra.Hydra`` (``create_main_hydra2``, ``compose_config``): the one compose,
  with the run's log configuration;
- ``hydra._internal.utils.create_automatic_config_search_path``: rlrun's config tree on the
  search path, with the search-path plugins (``rlrun/sweeps``);
- ``hydra._internal.utils.run_and_report``: Hydra's own message (and exit 1) for a config that
  does not compose, as ``hydra.main`` prints it;
- ``hydra._internal.callbacks.Callbacks``: the config's ``hydra.callbacks`` around the job.

Figure: ``rlrun total_frames=1024 progress=false logger=csv``, whole process, 5 interleaved
paired runs on this project's shared 2-core machine (2026-12-05): 1.49 s of CPU (median wall
3.19 s) with these names, 1.63 s of CPU (wall 4.30 s) on the public path (``hydra.main``).

Guard: ``available()`` looks the names up once. On a Hydra where one moved it says so in one
line and returns False; ``rlrun.cli.single`` then runs ``hydra.main`` (the public path), which
composes three times and is otherwise the same run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_NAMES: dict[str, Any] = {}
_CHECKED: list[bool] = []


_LOOKUP = {"Hydra": ("hydra._internal.hydra", "Hydra"),
           "Callbacks": ("hydra._internal.callbacks", "Callbacks"),
           "search_path": ("hydra._internal.utils", "create_automatic_config_search_path"),
           "report": ("hydra._internal.utils", "run_and_report")}
"""Each private name rlrun uses: (module, name)."""
_MEMBERS = (("Hydra", "create_main_hydra2"), ("Hydra", "compose_config"), ("Callbacks", "on_run_start"),
            ("Callbacks", "on_run_end"))


def available() -> bool:
    """Whether this Hydra still has the private names; if not, one line says so (once)."""
    if not _CHECKED:
        import importlib

        try:
            found = {key: getattr(importlib.import_module(module), name)
                     for key, (module, name) in _LOOKUP.items()}
            for key, member in _MEMBERS:
                getattr(found[key], member)
        except (ImportError, AttributeError) as err:
            import hydra

            print(f"rlrun: note: Hydra {hydra.__version__} lacks a private name rlrun uses ({err}); "
                  "single runs take Hydra's public path (hydra.main: the config is composed three "
                  "times, about 1 s more start-up)", file=sys.stderr, flush=True)
            _CHECKED.append(False)
        else:
            _NAMES.update(found)
            _CHECKED.append(True)
    return _CHECKED[0]


def _name(key: str) -> Any:
    """A private name found by ``available()`` (callers take the public path when it is False)."""
    if not available():
        raise RuntimeError(f"hydra's private {key} is not available here: use the public path")
    return _NAMES[key]


def create(conf_dir: Path, task_name: str = "main") -> Any:
    """A ``Hydra`` instance on ``conf_dir`` (and the search-path plugins), as ``hydra.main`` makes it."""
    search_path = _name("search_path")(None, None, str(conf_dir))
    return report(lambda: _name("Hydra").create_main_hydra2(task_name=task_name,
                                                             config_search_path=search_path))


def report(call: Callable[[], Any]) -> Any:
    """``call()``; an exception becomes Hydra's own message and exit 1, as under ``hydra.main``."""
    return _name("report")(call)


def run(cfg: Any, task: Callable[[Any], None], task_name: str = "main") -> None:
    """Runs ``task`` on the composed ``cfg`` as ``Hydra.run`` does: a job in ``hydra.run.dir``, its
    ``.hydra/`` files and log configured, the config's callbacks around it."""
    from hydra.core.utils import JobRuntime, configure_log, run_job, setup_globals
    from hydra.types import HydraContext

    setup_globals()  # Hydra's ${now:...} and ${hydra:...}, as its Hydra instance registers them
    JobRuntime.instance().set("name", task_name)
    configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)  # as compose_config did where it ran

    def job() -> None:
        callbacks = _name("Callbacks")(cfg)
        callbacks.on_run_start(config=cfg, config_name="config")
        # run_job reads no config loader: the config is composed already
        ret = run_job(hydra_context=HydraContext(config_loader=None, callbacks=callbacks),
                      task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                      configure_logging=True)
        callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
        _ = ret.return_value  # raises the task's exception, for report() to print

    report(job)
