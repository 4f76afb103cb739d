"""rlrun's Hydra plugins: search path for ``sweeps/``, the local and SLURM launchers, the Optuna sweeper.

Hydra only instantiates plugins defined under ``hydra_plugins`` and imports
every module here at start-up, so this module stays light: the classes are
thin subclasses of the implementations in ``rlrun.launch``, which are imported
as modules (importing their classes here would list them as plugins too).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.plugins.search_path_plugin import SearchPathPlugin

from rlrun.launch import local as _local
from rlrun.launch import pruning as _pruning  # noqa: F401  (registers the hook optuna_pruning)
from rlrun.launch import slurm_ray as _slurm_ray
from rlrun.launch import submitit_launch as _submitit
from rlrun.launch import sweeper as _sweeper

SWEEPS_SEARCH_PATH = "pkg://rlrun.sweeps"


class RlrunSearchPathPlugin(SearchPathPlugin):
    """Adds the checked-in sweeps (groups ``sweep`` and ``hpo``) to rlrun's config search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        conf = Path(str(files("rlrun.conf"))).resolve()
        # every Hydra app in this environment loads this plugin: touch rlrun's search path only
        if any(_is_dir(e.path, conf) for e in search_path.get_path()):
            search_path.append(provider="rlrun-sweeps", path=SWEEPS_SEARCH_PATH)


def _is_dir(path: str | None, target: Path) -> bool:
    if not path:
        return False
    for prefix in ("file://", "pkg://"):
        if path.startswith(prefix):
            if prefix == "pkg://":
                return path[len(prefix):].replace("/", ".") == "rlrun.conf"
            path = path[len(prefix):]
    try:
        return Path(path).resolve() == target
    except OSError:
        return False


class LocalLauncher(_local.LocalLauncherBase):
    """A sweep's jobs on ``max_parallel`` local worker processes (submitit's local executor)."""


class SlurmLauncher(_submitit.SlurmLauncherBase):
    """SLURM job arrays through submitit, requeued on preemption and time-out."""


class SlurmRayLauncher(_slurm_ray.SlurmRayLauncherBase):
    """SLURM jobs of ``nodes`` nodes each, with a Ray cluster across them for ``collector.backend=ray``."""


class OptunaSweeper(_sweeper.OptunaSweeperBase):
    """Optuna search: YAML search space, several seeds per trial, pruning, shared SQLite study."""


_store = ConfigStore.instance()
_store.store(group="hydra/launcher", name="rlrun_local", node=_submitit.LocalConf, provider="rlrun")
_store.store(group="hydra/launcher", name="rlrun_slurm", node=_submitit.SlurmConf, provider="rlrun")
_store.store(group="hydra/launcher", name="rlrun_slurm_ray", node=_slurm_ray.SlurmRayConf, provider="rlrun")
_store.store(group="hydra/sweeper", name="rlrun_optuna", node=_sweeper.OptunaSweeperConf, provider="rlrun")
