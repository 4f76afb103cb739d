"""A user's own gymnasium env, in a throwaway package on PYTHONPATH, trained through the CLI."""

from __future__ import annotations

import textwrap

import pytest
from cli_utils import run_cli, summary_of

from rlrun.cli import env_name

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
    from mlflow.tracking import MlflowClient

    code, _, err = run_cli([f"env.id={PACKAGE}:Corridor-v0", "+env.make_kwargs.length=2", *FAST],
                           package, capsys)
    assert code == 0, err
    run_dirs = [p.parent for p in package.glob("runs/**/summary.json")]
    assert len(run_dirs) == 1 and run_dirs[0].parent.name == "ppo-Corridor-v0", run_dirs
    summary = summary_of(run_dirs[0])
    assert summary["frames"] == 256
    run = MlflowClient(f"sqlite:///{package / 'mlflow.db'}").get_run(summary["mlflow_run_id"])
    assert run.data.tags["env"] == "Corridor-v0" and run.data.params["env.make_kwargs.length"] == "2"


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
