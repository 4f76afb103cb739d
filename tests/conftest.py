"""Shared test setup: registers the fake counter envs (``fake_env``) in every test process."""

from __future__ import annotations

import fake_env  # noqa: F401  (registers rlrun-test/Counter-v0 and rlrun-test/CounterBox-v0)
import pytest
from fake_env import COUNTER_BOX_ID, COUNTER_ID

from rlrun.envs.gym import GymVecEnv


@pytest.fixture
def make_counter_env():
    """Builds GymVecEnvs over the counter envs and closes them after the test."""
    envs: list[GymVecEnv] = []

    def make(num_envs: int = 2, continuous: bool = False, **kwargs) -> GymVecEnv:
        make_kwargs = {k: kwargs.pop(k) for k in ("terminate_at", "obs_dtype") if k in kwargs}
        env = GymVecEnv(COUNTER_BOX_ID if continuous else COUNTER_ID, num_envs=num_envs,
                        make_kwargs=make_kwargs, **kwargs)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()
