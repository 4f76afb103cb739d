"""A tiny deterministic gymnasium env whose every observation is identifiable.

Observation: float32 ``[step, marker, episode]``: ``step`` counts steps in the
current episode (0 after reset), ``marker`` is the seed of the sub-env's first
seeded reset (``seed + i`` for sub-env ``i`` of a vector env), ``episode`` counts
resets. Reward: ``(step + 1) * a`` where ``step`` is the count before the step and
``a`` is ``+1/-1`` for Discrete action ``1/0`` (``Counter``) or the action the env
receives (``CounterBox``, Box(-2, 2, (1,))): the first step of an episode pays
the raw action itself. Episodes terminate when ``step`` reaches ``terminate_at``
(an int, or a sequence indexed by ``marker % len``, to desynchronise sub-envs)
and are truncated by the TimeLimit of the registration (``max_episode_steps``).
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

COUNTER_ID = "rlrun-test/Counter-v0"
COUNTER_BOX_ID = "rlrun-test/CounterBox-v0"
DEFAULT_MAX_EPISODE_STEPS = 50


class CounterEnv(gym.Env):
    """Counts steps; see the module docstring for observations and rewards."""

    metadata = {"render_modes": []}

    def __init__(self, terminate_at: int | Sequence[int] = 5, continuous: bool = False,
                 obs_dtype: str = "float32"):
        self.terminate_at = terminate_at
        self.continuous = continuous
        self.obs_dtype = np.dtype(obs_dtype)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), self.obs_dtype)
        if continuous:
            self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        else:
            self.action_space = gym.spaces.Discrete(2)
        self.marker = 0
        self.step_count = 0
        self.episode = -1
        self.received_actions: list = []

    def _limit(self) -> int:
        if isinstance(self.terminate_at, int):
            return self.terminate_at
        return int(self.terminate_at[self.marker % len(self.terminate_at)])

    def _obs(self) -> np.ndarray:
        return np.array([self.step_count, self.marker, self.episode], dtype=self.obs_dtype)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.marker = seed
            self.episode = -1
        self.step_count = 0
        self.episode += 1
        return self._obs(), {}

    def step(self, action):
        self.received_actions.append(np.array(action).copy())
        a = float(np.asarray(action).reshape(-1)[0]) if self.continuous else 2.0 * int(action) - 1.0
        reward = (self.step_count + 1) * a
        self.step_count += 1
        terminated = self.step_count >= self._limit()
        return self._obs(), reward, terminated, False, {}


def episode_return(length: int, a: float) -> float:
    """The return of an episode of ``length`` steps all paying ``(step + 1) * a``."""
    return a * length * (length + 1) / 2


def _register() -> None:
    if COUNTER_ID not in gym.registry:
        gym.register(COUNTER_ID, entry_point=CounterEnv, max_episode_steps=DEFAULT_MAX_EPISODE_STEPS)
    if COUNTER_BOX_ID not in gym.registry:
        gym.register(COUNTER_BOX_ID, entry_point=CounterEnv, max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
                     kwargs={"continuous": True})


_register()
