"""Shared test setup: registers the fake counter envs (``fake_env``) in every test process."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import fake_env  # noqa: F401  (registers rlrun-test/Counter-v0 and rlrun-test/CounterBox-v0)
import pytest
from fake_env import COUNTER_BOX_ID, COUNTER_ID
from shared_resources import shared_lock

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


def active_site_dirs() -> list[str]:
    """The site-packages directories of the running interpreter: a venv's own, then the base's."""
    dirs = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    dirs += site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    return list(dict.fromkeys(d for d in dirs if Path(d).is_dir()))


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory) -> Path:
    """A venv with rlrun installed from a freshly built wheel (not editable); built once per session.

    It sees the packages of the environment running the tests (torch and the rest), whether
    that is the system interpreter or an activated venv: ``--system-site-packages`` only
    reaches the base interpreter's, so a ``.pth`` file adds the running environment's
    site-packages after the venv's own (plain paths: their ``.pth`` files, such as an
    editable rlrun's, are not run, so the wheel's rlrun is the one imported).
    """
    root = Path(__file__).resolve().parents[1]
    if "PYTEST_XDIST_WORKER" not in os.environ:
        tmp = tmp_path_factory.mktemp("wheel")
        _build_wheel_venv(root, tmp / "wheels", tmp / "venv")
        return tmp / "venv"
    # once per run, not once per test process: the first to get here builds, the others wait
    tmp = tmp_path_factory.getbasetemp().parent / "rlrun-wheel"  # the run's directory, shared
    with shared_lock(tmp_path_factory, "wheel"):
        if not (tmp / "built").is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            _build_wheel_venv(root, tmp / "wheels", tmp / "venv")
            (tmp / "built").touch()
    return tmp / "venv"


def _build_wheel_venv(root: Path, wheels: Path, venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(root)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    own = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    (Path(own) / "_rlrun_test_active_env.pth").write_text("\n".join(active_site_dirs()) + "\n")
    wheel = next(wheels.glob("rlrun-*.whl"))
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True)
