"""A user's own gymnasium env, in a throwaway package on PYTHONPATH, trained through the CLI."""

from __future__ import annotations

import textwrap

import pytest
from cli_utils import run_cli, summary_of

from rlrun.lifecycle.compose import env_name

PACKAGE = "rlrun_test_corridor"
CORRIDOR = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np


    class Corridor(gym.Env):
        """Step right ``length`` times to reach the end (reward 1)."""

        def __init__(self, length: int = 4):
            self.length = length
            self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
            self.action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.pos = max(0, self.pos + (1 if action == 1 else -1))
            done = self.pos >= self.length
            return np.array([self.pos / self.length], np.float32), float(done), done, False, {}


    if "Corridor-v0" not in gym.registry:
        gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20)
''')
FAST = ["algo=ppo", "total_frames=256", "eval.episodes=2", "eval.interval_frames=0", "progress=false"]


@pytest.fixture
def package(tmp_path, monkeypatch):
    """Writes the package to ``tmp_path/lib`` and puts that folder on the path."""
    lib = tmp_path / "lib" / PACKAGE
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(CORRIDOR)
    monkeypatch.syspath_prepend(str(lib.parent))
    monkeypatch.setenv("PYTHONPATH", str(lib.parent))
    return tmp_path


def test_module_colon_id_trains_and_names_the_run_after_the_env(package, capsys):
    import subprocess

    import gymnasium
    import torch
    from mlflow.tracking import MlflowClient

    from rlrun.report.runs import config_hash

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(package)]
    subprocess.run([*git[:-2], "init", "-q", str(package)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "user project"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    code, _, err = run_cli([f"env.id={PACKAGE}:Corridor-v0", "+env.make_kwargs.length=2", *FAST],
                           package, capsys)
    assert code == 0, err
    run_dirs = [p.parent for p in package.glob("runs/**/summary.json")]
    assert len(run_dirs) == 1 and run_dirs[0].parent.name == "ppo-Corridor-v0", run_dirs
    summary = summary_of(run_dirs[0])
    assert summary["frames"] == 256
    run = MlflowClient(f"sqlite:///{package / 'mlflow.db'}").get_run(summary["mlflow_run_id"])
    tags = run.data.tags
    assert tags["env"] == "Corridor-v0" and run.data.params["env.make_kwargs.length"] == "2"
    assert run.info.run_name.startswith("ppo-Corridor-v0 ")
    # Receipts: the user's commit (not rlrun's), versions, the env's own package, the config hash.
    assert tags["git_commit"] == head and tags.get("rlrun_git_commit") != head
    assert tags["version.torch"] == torch.__version__ and tags["version.gymnasium"] == gymnasium.__version__
    assert "version.tensordict" in tags and "version.rlrun-test-corridor" not in tags  # not a distribution
    assert tags["config_hash"] == config_hash(run.data.params)


def test_imports_list_registers_the_env(package, capsys):
    code, _, err = run_cli([f"env.imports=[{PACKAGE}]", "env.id=Corridor-v0", "logger=none", *FAST],
                           package, capsys)
    assert code == 0, err
    assert [p.parent.parent.name for p in package.glob("runs/**/summary.json")] == ["ppo-Corridor-v0"]


def test_a_missing_module_is_one_message_naming_the_key(package, capsys):
    code, _, err = run_cli(["env.imports=[no_such_pkg_xyz]", "logger=none", *FAST], package, capsys)
    assert code == 2 and "env.imports" in err and "no_such_pkg_xyz" in err and "Traceback" not in err


def test_presets_keep_their_name_and_ids_drop_the_module():
    assert env_name("cartpole", "CartPole-v1") == "cartpole"
    assert env_name("cartpole", "mypkg.envs:Corridor-v0") == "Corridor-v0"
    assert env_name("pong", "ALE/Pong-v5") == "pong"
    assert env_name("pong", "ALE/Breakout-v5") == "ALE_Breakout-v5"


def test_the_env_package_recorded_for_builtin_ids():
    from rlrun.lifecycle.compose import env_package

    assert env_package("HalfCheetah-v5") == "mujoco"
    assert env_package("CartPole-v1") is None  # gymnasium itself, recorded anyway
    assert env_package("Nope-v0") is None
