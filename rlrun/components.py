"""Imports every module that registers rlrun's built-in components."""

from rlrun import collectors, tracking  # noqa: F401
from rlrun.algos import ppo, sac  # noqa: F401
from rlrun.buffers import factory  # noqa: F401
from rlrun.envs import gym  # noqa: F401
from rlrun.modules import models  # noqa: F401
from rlrun.trainer import hooks, optim  # noqa: F401
