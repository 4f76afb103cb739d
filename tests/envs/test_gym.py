"""GymVecEnv: SAME_STEP autoreset, termination vs truncation, action/observation transforms, errors."""

from __future__ import annotations

import numpy as np
import pytest
from fake_env import COUNTER_BOX_ID, COUNTER_ID

from rlrun.core.errors import ConfigError
from rlrun.core.registry import build
from rlrun.core.specs import EnvSpec
from rlrun.envs.gym import GymVecEnv, make_gym_env

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ONES = np.ones(3, dtype=np.int64)


def test_episode_end_puts_final_obs_in_next_obs_and_reset_obs_last(make_counter_env):
    env = make_counter_env(3, terminate_at=[2, 3, 4])
    obs = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [[0, 0, 0], [0, 1, 0], [0, 2, 0]])
    next_obs, reward, term, trunc, obs = env.step(ONES)
    np.testing.assert_array_equal(next_obs, [[1, 0, 0], [1, 1, 0], [1, 2, 0]])
    np.testing.assert_array_equal(obs, next_obs)
    next_obs, reward, term, trunc, obs = env.step(ONES)  # sub-env 0 terminates at step 2
    np.testing.assert_array_equal(term, [True, False, False])
    np.testing.assert_array_equal(next_obs[0], [2, 0, 0])  # the true final observation
    np.testing.assert_array_equal(obs[0], [0, 0, 1])  # the reset observation of episode 1
    np.testing.assert_array_equal(next_obs[1:], obs[1:])  # untouched where nothing ended
    np.testing.assert_array_equal(next_obs[1:], [[2, 1, 0], [2, 2, 0]])
    np.testing.assert_array_equal(reward, [2, 2, 2])  # the ending step is paid normally


def test_non_ended_envs_have_identical_next_obs_and_obs_over_many_steps(make_counter_env):
    env = make_counter_env(3, terminate_at=[2, 3, 4])
    env.reset(seed=0)
    ended = 0
    for _ in range(15):
        next_obs, _, term, trunc, obs = env.step(ONES)
        done = term | trunc
        ended += int(done.sum())
        np.testing.assert_array_equal(next_obs[~done], obs[~done])
        if done.any():
            assert (obs[done, 0] == 0).all()  # reset observations
            assert (next_obs[done, 0] > 0).all()  # final observations
            np.testing.assert_array_equal(obs[done, 2], next_obs[done, 2] + 1)
    assert ended >= 3


def test_terminated_and_truncated_are_distinguished(make_counter_env):
    # sub-env 0 terminates at step 3, sub-env 1 (terminate_at 10) is truncated by the time limit 5
    env = make_counter_env(2, terminate_at=[3, 10], max_episode_steps=5)
    env.reset(seed=0)
    terms, truncs = [], []
    for _ in range(5):
        next_obs, _, term, trunc, _ = env.step(ONES[:2])
        terms.append(term.copy())
        truncs.append(trunc.copy())
    terms, truncs = np.array(terms), np.array(truncs)
    np.testing.assert_array_equal(terms[:, 0], [False, False, True, False, False])
    np.testing.assert_array_equal(truncs[:, 0], [False] * 5)
    np.testing.assert_array_equal(terms[:, 1], [False] * 5)
    np.testing.assert_array_equal(truncs[:, 1], [False, False, False, False, True])
    np.testing.assert_array_equal(next_obs[1], [5, 1, 0])  # final obs of the truncated episode


def test_box_actions_are_rescaled_from_unit_range(make_counter_env):
    env = make_counter_env(3, continuous=True)
    env.reset(seed=0)
    _, reward, *_ = env.step(np.array([[1.0], [-1.0], [0.5]], np.float32))
    # the first step pays the action the env received: the policy's [-1, 1] maps to [-2, 2]
    np.testing.assert_allclose(reward, [2.0, -2.0, 1.0])
    received = [e.unwrapped.received_actions[-1] for e in env.env.envs]
    np.testing.assert_allclose(np.concatenate(received), [2.0, -2.0, 1.0])


def test_box_actions_are_clipped_before_rescaling(make_counter_env):
    env = make_counter_env(2, continuous=True)
    env.reset(seed=0)
    _, reward, *_ = env.step(np.array([[5.0], [-7.0]], np.float32))
    np.testing.assert_allclose(reward, [2.0, -2.0])


def test_clip_without_rescale_clips_to_env_bounds_and_spec_has_them(make_counter_env):
    env = make_counter_env(2, continuous=True, rescale_actions=False)
    assert (env.spec.action_low, env.spec.action_high) == (-2.0, 2.0)
    env.reset(seed=0)
    _, reward, *_ = env.step(np.array([[1.0], [-9.0]], np.float32))
    np.testing.assert_allclose(reward, [1.0, -2.0])


def test_float64_observations_become_float32_halfcheetah(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory
    env = GymVecEnv("HalfCheetah-v5", num_envs=1)
    try:
        assert env.env.single_observation_space.dtype == np.float32
        assert env.spec.observation_dtype == np.float32
        assert env.reset(seed=0).dtype == np.float32
        next_obs, _, _, _, obs = env.step(np.zeros((1, 6), np.float32))
        assert next_obs.dtype == np.float32 and obs.dtype == np.float32
        assert env.spec.action_dim == 6 and not env.spec.discrete
    finally:
        env.close()


def test_float64_final_observations_become_float32(make_counter_env):
    env = make_counter_env(2, terminate_at=2, obs_dtype="float64")
    assert env.reset(seed=0).dtype == np.float32
    env.step(ONES[:2])
    next_obs, _, term, _, obs = env.step(ONES[:2])
    assert term.all()
    assert next_obs.dtype == np.float32 and obs.dtype == np.float32
    np.testing.assert_array_equal(next_obs, [[2, 0, 0], [2, 1, 0]])


def test_async_vectorization_autoresets_like_sync(make_counter_env):
    sync = make_counter_env(2, terminate_at=[2, 3])
    asyn = make_counter_env(2, terminate_at=[2, 3], vectorization="async")
    np.testing.assert_array_equal(sync.reset(seed=4), asyn.reset(seed=4))
    for _ in range(7):
        for a, b in zip(sync.step(ONES[:2]), asyn.step(ONES[:2])):
            np.testing.assert_array_equal(a, b)
    assert asyn.spec == sync.spec


def test_unknown_id_raises_config_error_on_env_id():
    with pytest.raises(ConfigError) as info:
        GymVecEnv("NoSuchEnv-v0")
    assert info.value.key == "env.id"
    assert "NoSuchEnv-v0" in info.value.message and info.value.fix


def test_unknown_vectorization_raises_config_error():
    with pytest.raises(ConfigError) as info:
        GymVecEnv(COUNTER_ID, vectorization="threads")
    assert info.value.key == "env.vectorization"


def test_spec_fields_discrete_and_box(make_counter_env):
    assert make_counter_env(2).spec == EnvSpec((3,), np.dtype(np.float32), True, 2, -1.0, 1.0)
    spec = make_counter_env(2, continuous=True).spec
    assert spec == EnvSpec((3,), np.dtype(np.float32), False, 1, -1.0, 1.0)


def test_registered_gym_factory_builds_vec_env_with_make_kwargs():
    env = build("env", {"name": "gym", "id": COUNTER_BOX_ID, "num_envs": 2, "max_episode_steps": 2,
                        "make_kwargs": {"terminate_at": 9}})
    try:
        assert isinstance(env, GymVecEnv) and env.num_envs == 2
        env.reset(seed=0)
        env.step(np.zeros((2, 1), np.float32))
        _, _, term, trunc, _ = env.step(np.zeros((2, 1), np.float32))
        assert trunc.all() and not term.any()
    finally:
        env.close()
    assert make_gym_env.__doc__
