"""env.backend=envpool: the gymnasium backend's semantics on EnvPool's vector stepping.

The MuJoCo tests run the same actions through both backends from the same initial state
(``reset_noise_scale=0``: the two backends draw reset noise from different generators)
and compare what the collector records: observations, true final observations, rewards,
terminated and truncated. Skipped without EnvPool (pip install 'rlrun[envpool]').
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("envpool")

from rlrun.collectors.sync import SyncCollector  # noqa: E402
from rlrun.core.errors import ConfigError  # noqa: E402
from rlrun.core.registry import build  # noqa: E402
from rlrun.envs.envpool import EnvPoolAtariVecEnv, EnvPoolVecEnv  # noqa: E402
from rlrun.envs.gym import GymVecEnv  # noqa: E402

NO_NOISE = {"reset_noise_scale": 0.0}


@pytest.fixture
def make_env():
    envs: list = []

    def make(node: dict):
        envs.append(build("env", {"name": "gym", "num_envs": 2, **node}, key="env"))
        return envs[-1]

    yield make
    for env in envs:
        env.close()


def pair(make_env, id: str, **node) -> tuple[GymVecEnv, EnvPoolVecEnv]:
    gym_env = make_env({"id": id, "make_kwargs": NO_NOISE, **node})
    pool_env = make_env({"id": id, "make_kwargs": NO_NOISE, "backend": "envpool", **node})
    assert type(gym_env) is GymVecEnv and type(pool_env) is EnvPoolVecEnv
    return gym_env, pool_env


def collect(env, policy, frames: int = 120):
    return SyncCollector(env, policy, frames_per_batch=frames, total_frames=frames, seed=0).collect()


def lean(action_dim: int):
    """A fixed deterministic policy: pushes hard one way, so Hopper and the pendulum fall."""
    def policy(obs: torch.Tensor) -> dict[str, torch.Tensor]:
        push = 0.9 + 0.1 * torch.tanh(obs[:, :1])
        return {"action": push.expand(len(obs), action_dim).contiguous()}
    return policy


@pytest.mark.parametrize("id, limit, ends", [
    ("Hopper-v5", None, "terminated"),             # falls over
    ("InvertedPendulum-v5", None, "terminated"),   # pole falls; actions rescaled [-1, 1] -> [-3, 3]
    ("HalfCheetah-v5", 25, "truncated"),            # the time limit
])
def test_collector_batches_agree_across_backends(make_env, id, limit, ends):
    gym_env, pool_env = pair(make_env, id, max_episode_steps=limit)
    policy = lean(gym_env.spec.action_dim)
    a, b = collect(gym_env, policy), collect(pool_env, policy)
    assert (a["next", ends].sum() >= 2) and (a["next", ends] == b["next", ends]).all()
    other = "truncated" if ends == "terminated" else "terminated"
    assert not a["next", other].any() and not b["next", other].any()
    for key in ("observation", ("next", "observation"), ("next", "reward"), "action"):
        assert a[key].dtype == b[key].dtype
        torch.testing.assert_close(b[key], a[key], atol=1e-4, rtol=1e-4, msg=f"{key} differs")
    assert (a["collector", "traj_ids"] == b["collector", "traj_ids"]).all()
    # where an episode ended, next.observation is the true final state, and the next step starts
    # from a reset (identical initial states: no reset noise)
    done = b["next", "done"].squeeze(-1)
    env_i, t = done[:, :-1].nonzero(as_tuple=True)
    first = b["observation"][:, 0]
    for i, s in zip(env_i.tolist(), t.tolist()):
        assert not torch.allclose(b["next", "observation"][i, s], b["observation"][i, s + 1])
        assert torch.equal(b["observation"][i, s + 1], first[i])


def test_halfcheetah_same_actions_agree_then_drift_chaotically(make_env):
    """1000 steps of the same random actions: the backends agree to rounding, then drift.

    EnvPool 1.2.5 steps MuJoCo 3.6.0, gymnasium the mujoco package installed (4.0.0 here),
    same model and frame skip: the first steps agree to ~1e-15 (float32 observations:
    bit-identical), and the difference then grows as in any chaotic system (measured: max
    |obs diff| ~1e-12 after 10 steps, ~1e-5 after 100, O(1-10) after 1000). Both truncate at
    step 1000 and restart from the same initial state.
    """
    gym_env, pool_env = pair(make_env, "HalfCheetah-v5")
    actions = np.random.default_rng(0).uniform(-1, 1, (1000, 2, 6)).astype(np.float32)
    first = gym_env.reset(seed=0)
    np.testing.assert_array_equal(pool_env.reset(seed=0), first)
    diffs = []
    for t in range(1000):
        ga, pa = gym_env.step(actions[t]), pool_env.step(actions[t])
        diffs.append(np.abs(ga[0] - pa[0]).max())
        assert (ga[2] == pa[2]).all() and (ga[3] == pa[3]).all(), f"flags differ at step {t}"
    assert max(diffs[:50]) < 1e-5, max(diffs[:50])
    assert pa[3].all() and not pa[2].any()  # truncated at 1000, not terminated
    np.testing.assert_array_equal(pa[4], first)  # restarted from the initial state
    np.testing.assert_array_equal(ga[4], first)


def test_the_step_after_an_episode_end_is_a_real_step(make_env):
    """EnvPool's own autoreset would ignore this step's action (NEXT_STEP): the adapter must not."""
    gym_env, pool_env = pair(make_env, "HalfCheetah-v5", max_episode_steps=3)
    for env in (gym_env, pool_env):
        env.reset(seed=0)
        for _ in range(3):
            out = env.step(np.zeros((2, 6), np.float32))
        assert out[3].all()
    push = np.ones((2, 6), np.float32)
    after_gym, after_pool = gym_env.step(push), pool_env.step(push)
    assert not after_pool[3].any()
    np.testing.assert_allclose(after_pool[0], after_gym[0], atol=1e-6)
    assert not np.allclose(after_pool[0], pool_env.reset(seed=5))  # it moved


def test_actions_are_rescaled_and_out_of_range_ones_act_as_in_gymnasium(make_env):
    gym_env, pool_env = pair(make_env, "InvertedPendulum-v5")
    assert pool_env.spec == gym_env.spec
    for action in (np.full((2, 1), 5.0, np.float32), np.full((2, 1), 0.5, np.float32)):
        gym_env.reset(seed=0), pool_env.reset(seed=0)
        for _ in range(3):
            g, p = gym_env.step(action), pool_env.step(action)
        np.testing.assert_allclose(p[0], g[0], atol=1e-6)


def test_a_seeded_reset_replays_the_same_episodes_and_other_seeds_differ(make_env):
    env = make_env({"id": "Hopper-v5", "backend": "envpool"})
    runs = []
    for seed in (3, 3, 4):
        obs = [env.reset(seed=seed)]
        for _ in range(5):
            obs.append(env.step(np.full((2, 3), 0.3, np.float32))[0])
        runs.append(np.stack(obs))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], runs[2])
    assert not np.allclose(runs[0][0, 0], runs[0][0, 1])  # sub-envs are seeded apart


def test_factory_rebuilds_the_same_envpool_env(make_env):
    env = make_env({"id": "HalfCheetah-v5", "backend": "envpool", "max_episode_steps": 7})
    copy = env.factory()
    try:
        assert type(copy) is EnvPoolVecEnv and copy.spec == env.spec and copy.num_envs == 2
        np.testing.assert_array_equal(copy.reset(seed=1), env.reset(seed=1))
    finally:
        copy.close()


@pytest.mark.parametrize("node, key", [
    ({"id": "CartPoleNope-v1"}, "env.id"),
    ({"id": "HalfCheetah-v5", "make_kwargs": {"no_such_option": 1}}, "env.make_kwargs"),
    ({"id": "HalfCheetah-v5", "backend": "jax"}, "env.backend"),
])
def test_bad_envpool_input_is_a_config_error_naming_the_key(node, key):
    with pytest.raises(ConfigError) as err:
        build("env", {"name": "gym", "backend": "envpool", **node}, key="env")
    assert err.value.key == key and err.value.fix


# --- Atari ----------------------------------------------------------------------------------

def make_atari(**node) -> EnvPoolAtariVecEnv:
    return build("env", {"name": "atari", "id": "ALE/Breakout-v5", "num_envs": 2, "backend": "envpool",
                         "reward_clip": "sign", **node}, key="env")


def test_atari_frames_spec_and_life_loss_as_learning_only_terminal():
    pytest.importorskip("ale_py")
    env = make_atari(fire_reset=True)
    ref = build("env", {"name": "atari", "id": "ALE/Breakout-v5", "num_envs": 2}, key="env")
    try:
        assert type(env) is EnvPoolAtariVecEnv
        assert env.spec == ref.spec and env.spec.observation_shape == (4, 84, 84)
        obs = env.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        rng = np.random.default_rng(0)
        lost = ended = 0
        lives = np.full(2, 5)
        for _ in range(2000):
            next_obs, reward, term, trunc, start = env.step(rng.integers(0, 4, 2))
            assert next_obs.dtype == np.uint8 and reward.shape == (2,)
            # a lost life ends the learning signal only: the episode and the frames go on
            assert not (env.learning_terminal & (term | trunc)).any()
            lost += env.learning_terminal.sum()
            np.testing.assert_array_equal(start[~(term | trunc)], next_obs[~(term | trunc)])
            lives = lives - env.learning_terminal
            for i in np.flatnonzero(term):  # game over: the 5th life, after 4 learning-only terminals
                assert lives[i] == 1 and not trunc[i] and not np.array_equal(start[i], next_obs[i])
                ended += 1
            lives = np.where(term | trunc, 5, lives)
            if ended >= 2:
                break
        assert ended >= 2 and lost >= 8  # two games over: 4 lost lives each before the last
        assert env.learning_reward(torch.tensor([0.0, 4.0])).tolist() == [0.0, 1.0]  # raw stays raw
    finally:
        env.close(), ref.close()


def test_atari_time_limit_counts_agent_steps_and_truncates():
    env = make_atari(max_episode_steps=40)  # 40 frames = 10 agent steps at frame skip 4
    try:
        env.reset(seed=0)
        flags = [env.step(np.zeros(2, np.int64))[2:4] for _ in range(10)]
        assert [bool(tr.any()) for _, tr in flags] == [False] * 9 + [True]
        assert not any(te.any() for te, _ in flags)
    finally:
        env.close()


@pytest.mark.parametrize("node, key", [({"noop_max": 0}, "env.noop_max"),
                                       ({"grayscale": False}, "env.grayscale")])
def test_atari_settings_envpool_cannot_honour_are_config_errors(node, key):
    with pytest.raises(ConfigError) as err:
        make_atari(**node)
    assert err.value.key == key and "backend=gymnasium" in err.value.fix


# --- whole runs -----------------------------------------------------------------------------

def test_a_ppo_run_on_envpool_trains_evaluates_and_loads(tmp_path, capsys):
    """Collector, evaluator and checkpoint on EnvPool; ``rlrun.load`` maps actions through gymnasium."""
    from cli_utils import only_run_dir, run_cli, summary_of

    from rlrun.lifecycle.load import load

    args = ["env=hopper", "env.backend=envpool", "env.num_envs=2", "total_frames=256",
            "collector.frames_per_batch=128", "buffer.batch_size=64", "eval.episodes=2", "eval.max_envs=2",
            "logger=none", "progress=false"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    summary = summary_of(run_dir)
    assert summary["status"] == "finished" and summary["frames"] == 256
    assert summary["eval/episodes"] == 2
    policy = load(run_dir)
    action = policy(np.zeros(11, np.float32))
    assert action.shape == (3,) and np.all(np.abs(action) <= 1)


def test_a_bad_backend_on_the_command_line_is_one_line_and_exit_2(tmp_path, capsys):
    from cli_utils import run_cli

    code, out, err = run_cli(["env=hopper", "env.backend=jax", "logger=none"], tmp_path, capsys)
    assert code == 2 and "env.backend" in err and "Traceback" not in err + out


def test_the_backend_benchmark_times_both_backends_with_one_actor():
    from rlrun.benchmarks.collection import bench_backends, render_backends

    row = bench_backends("HalfCheetah-v5", 2, "actor", batches=1, reps=1, frames_per_batch=40)
    assert row["fps_gymnasium"] > 0 and row["fps_envpool"] > 0 and row["ratio"] > 0
    assert len(row["times_s"]["envpool"]) == len(row["cpu_s"]["gymnasium"]) == 1
    assert "| HalfCheetah-v5 | 2 | actor |" in render_backends({"rows": [row], "notes": []})


class StubAtariPool:
    """Replays scripted EnvPool Atari steps (obs id, reward, done, trunc, game over, lives) per sub-env."""

    def __init__(self, script: dict):
        self.script, self.calls = script, []

    def step(self, action, env_id=None):
        ids = np.arange(2) if env_id is None else np.asarray(env_id)
        self.calls.append((np.asarray(action).tolist(), ids.tolist()))
        rows = [self.script[("fire" if env_id is not None else "step", int(i))] for i in ids]
        obs, reward, done, trunc, over, lives = (np.array(c) for c in zip(*rows))
        info = {"terminated": over.astype(np.int32), "lives": lives.astype(np.int32)}
        return obs, reward.astype(np.float32), done & ~trunc, trunc, info


def stub_atari(script: dict, fire_reset: bool) -> EnvPoolAtariVecEnv:
    env = object.__new__(EnvPoolAtariVecEnv)  # the adapter's step logic without a real pool
    env.num_envs, env.fire_reset, env.terminal_on_life_loss = 2, fire_reset, True
    env._lives, env._pool = np.array([3, 3]), StubAtariPool(script)
    return env


def test_game_over_on_the_last_allowed_step_is_terminated_not_truncated():
    # sub-env 0: game over exactly at the time limit (EnvPool: trunc); sub-env 1: the limit alone
    env = stub_atari({("step", 0): (0, 1.0, True, True, True, 0),
                      ("step", 1): (1, 0.0, True, True, False, 3)}, fire_reset=False)
    _, _, term, trunc = env._after_step(*env._pool.step(np.zeros(2)))
    assert term.tolist() == [True, False] and trunc.tolist() == [False, True]
    assert not env.learning_terminal.any()


def test_fire_after_a_lost_life_steps_only_that_sub_env_and_adds_its_reward():
    env = stub_atari({("step", 0): (10, 1.0, False, False, False, 2),   # lost a life
                      ("step", 1): (11, 4.0, False, False, False, 3),
                      ("fire", 0): (20, 7.0, False, False, False, 2)}, fire_reset=True)
    obs, reward, term, trunc = env._after_step(*env._pool.step(np.zeros(2)))
    assert env._pool.calls[-1] == ([1], [0])  # FIRE, sub-env 0 only
    assert obs.tolist() == [20, 11] and reward.tolist() == [8.0, 4.0]
    assert env.learning_terminal.tolist() == [True, False] and not (term | trunc).any()
    assert env._lives.tolist() == [2, 3]
