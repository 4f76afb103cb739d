"""Shared test setup: registers the fake counter envs (``fake_env``) in every test process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory) -> Path:
    """A venv with rlrun installed from a freshly built wheel (not editable); built once per session.

    System site packages provide torch and the rest; the wheel's own rlrun shadows the editable one.
    """
    root = Path(__file__).resolve().parents[1]
    tmp = tmp_path_factory.mktemp("wheel")
    wheels, venv = tmp / "wheels", tmp / "venv"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(root)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    wheel = next(wheels.glob("rlrun-*.whl"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--force-reinstall", str(wheel)], check=True, capture_output=True)
    return venv
