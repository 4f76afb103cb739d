"""Imports every module that registers rlrun's built-in components.

Algorithm modules are found by listing ``rlrun.algos``: adding an algorithm is
its module and its ``conf/algo`` YAML, with no list to edit here.
"""

import importlib
import pkgutil

from rlrun import (  # noqa: F401
    algos,
    collectors,
    collectors_marl,
    collectors_multi,
    collectors_ray,
    exploration,
    sources,
    tracking,
)
from rlrun.buffers import factory  # noqa: F401
from rlrun.envs import atari, envpool, gym, vmas  # noqa: F401
from rlrun.launch import pruning  # noqa: F401
from rlrun.loggers import wandb  # noqa: F401  (imports the wandb package only when logger=wandb is built)
from rlrun.modules import cnn, group_models, models  # noqa: F401
from rlrun.trainer import hooks, optim  # noqa: F401

for _module in pkgutil.iter_modules(algos.__path__):
    importlib.import_module(f"{algos.__name__}.{_module.name}")
