"""Imports every module that registers rlrun's built-in components."""

from rlrun import collectors, collectors_multi, exploration, tracking  # noqa: F401
from rlrun.algos import a2c, dqn, ppo, sac, td3  # noqa: F401
from rlrun.buffers import factory  # noqa: F401
from rlrun.envs import atari, gym  # noqa: F401
from rlrun.launch import pruning  # noqa: F401
from rlrun.modules import cnn, models  # noqa: F401
from rlrun.trainer import hooks, optim  # noqa: F401
