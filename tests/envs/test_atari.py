"""Atari env: uint8 frame stacks, frame skip, life loss for learning only, raw vs clipped rewards.

Skipped without ale-py (or OpenCV, which gymnasium's AtariPreprocessing resizes with):
pip install 'rlrun[atari]'.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from cli_utils import only_run_dir, run_cli, summary_of
from omegaconf import OmegaConf

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

from rlrun.collectors.sync import SyncCollector  # noqa: E402
from rlrun.core.errors import ConfigError  # noqa: E402
from rlrun.core.registry import build  # noqa: E402
from rlrun.envs.atari import make_atari_env  # noqa: E402
from rlrun.envs.gym import GymVecEnv  # noqa: E402

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture
def make_env():
    envs: list[GymVecEnv] = []

    def make(id: str, num_envs: int = 2, **kwargs) -> GymVecEnv:
        envs.append(make_atari_env(id, num_envs=num_envs, **kwargs))
        return envs[-1]

    yield make
    for env in envs:
        env.close()


def record_raw_rewards(env: GymVecEnv) -> list[np.ndarray]:
    """Spies on the rewards the env hands the collector (the raw game rewards)."""
    raw: list[np.ndarray] = []
    step = env.step

    def spy(action):
        out = step(action)
        raw.append(out[1].copy())
        return out

    env.step = spy
    return raw


def collect_random(env: GymVecEnv, until_episodes: int, frames_per_batch: int = 256,
                   max_batches: int = 12) -> tuple[dict, np.ndarray]:
    """Uniform random play through the collector until some episodes have finished."""
    raw = record_raw_rewards(env)
    env.reward_clip = "sign"
    collector = SyncCollector(env, policy=None, frames_per_batch=frames_per_batch, total_frames=10**9,
                              init_random_frames=10**9, seed=0)
    batches, returns = [], []
    while len(returns) < until_episodes and len(batches) < max_batches:
        batches.append(collector.collect())
        returns += collector.pop_episode_stats()[0]
    batch = torch.cat(batches, dim=1)
    return {"batch": batch, "returns": returns}, np.stack(raw, axis=1)


def complete_episodes(batch) -> list[np.ndarray]:
    """Masks ``[num_envs, T]`` of the games that ended inside the batch.

    Trajectory ids change only when the env's episode ends (game over or the
    frame cap); ``("next", "done")`` also marks lost lives, the learning boundaries.
    """
    traj = batch["collector", "traj_ids"].numpy()
    ended = np.unique(traj[:, :-1][traj[:, 1:] != traj[:, :-1]])
    return [traj == t for t in ended]


def test_observations_are_uint8_stacks_of_84x84_frames(make_env):
    env = make_env("ALE/Pong-v5")
    assert env.spec.observation_shape == (4, 84, 84) and env.spec.observation_dtype == np.uint8
    assert env.spec.discrete and env.spec.action_dim == 6
    obs = env.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    for _ in range(3):
        next_obs, reward, term, trunc, new_obs = env.step(np.array([2, 3]))
        assert next_obs.dtype == np.uint8 and reward.dtype == np.float64
        np.testing.assert_array_equal(next_obs[:, :3], obs[:, 1:])  # the stack shifts by one frame
        obs = new_obs
    assert obs[:, -1].std() > 0  # a real screen, not padding


@pytest.mark.parametrize("frame_skip", [4, 2])
def test_one_agent_step_is_frame_skip_emulator_frames(make_env, frame_skip):
    env = make_env("ALE/Pong-v5", frame_skip=frame_skip)
    env.reset(seed=0)
    ales = [sub.unwrapped.ale for sub in env.env.envs]
    start = [ale.getEpisodeFrameNumber() for ale in ales]
    assert all(1 <= f <= 30 for f in start)  # 1-30 no-op frames at reset, differing per seed
    assert start[0] != start[1]
    for _ in range(10):
        env.step(np.zeros(2, dtype=np.int64))
    assert [ale.getEpisodeFrameNumber() - s for ale, s in zip(ales, start)] == [10 * frame_skip] * 2


def test_life_loss_is_a_learning_terminal_while_the_game_and_its_return_go_on(make_env):
    env = make_env("ALE/Breakout-v5", fire_reset=True)
    out, raw = collect_random(env, until_episodes=1)
    batch = out["batch"]
    assert batch["observation"].dtype == torch.uint8
    term = batch["next", "terminated"][..., 0].numpy()
    traj = batch["collector", "traj_ids"].numpy()
    episodes = complete_episodes(batch)
    assert episodes, "no Breakout game ended in random play"
    for mask in episodes:
        env_i = mask.any(1).nonzero()[0][0]
        steps = mask[env_i].nonzero()[0]
        ends = steps[term[env_i, steps]]
        # 5 lives: 4 life losses marked terminal for learning, then the game-over terminal.
        assert len(ends) == 5 and ends[-1] == steps[-1]
        assert batch["next", "done"][env_i, ends].all()  # GAE stops at each lost life
        for t in ends[:-1]:  # the game continued after each lost life: same episode, no reset
            assert traj[env_i, t + 1] == traj[env_i, t]
            assert torch.equal(batch["observation"][env_i, t + 1], batch["next", "observation"][env_i, t])
    # The logged return sums the raw rewards of the whole game, past every lost life.
    ep_returns = sorted(raw[m].sum() for m in episodes)
    assert sorted(out["returns"]) == pytest.approx(ep_returns)
    after_first_loss = [raw[m][np.nonzero(term[m])[0][0] + 1:].sum() for m in episodes]
    assert max(after_first_loss) > 0, "no points scored after a lost life: pick another seed"


def test_episode_return_is_the_game_score_and_learning_rewards_are_clipped(make_env):
    # Space Invaders pays 5 to 30 points per alien, so clipping shows at once (none of the
    # paper's four games scores above 1 reliably in random play). 800 emulator frames of
    # cap = at most 200 agent steps per episode.
    env = make_env("ALE/SpaceInvaders-v5", max_episode_steps=800, terminal_on_life_loss=False)
    out, raw = collect_random(env, until_episodes=2, frames_per_batch=200)
    batch = out["batch"]
    learned = batch["next", "reward"][..., 0].numpy()
    assert raw.max() >= 5
    np.testing.assert_array_equal(learned, np.sign(raw))
    assert set(np.unique(learned)) <= {0.0, 1.0}
    episodes = complete_episodes(batch)
    assert len(episodes) >= 2
    returns = sorted(raw[m].sum() for m in episodes)
    assert sorted(out["returns"]) == pytest.approx(returns) and returns[-1] >= 5
    # The frame cap truncates: 200 steps less the reset no-ops' frames.
    assert batch["next", "truncated"].sum() >= len(episodes)
    assert all(190 <= m.sum() <= 200 for m in episodes)


def test_fire_reset_serves_the_ball_at_start_and_after_each_lost_life(make_env):
    noop = np.zeros(1, dtype=np.int64)
    env = make_env("ALE/Breakout-v5", num_envs=1, fire_reset=True)
    env.reset(seed=0)
    for steps in range(1, 1000):  # noqa: B007  (read after the loop)
        _, _, term, trunc, _ = env.step(noop)
        if term[0] or trunc[0]:
            break
    assert term[0] and steps < 1000  # never moving the paddle loses all 5 balls
    idle = make_env("ALE/Breakout-v5", num_envs=1, fire_reset=False)
    idle.reset(seed=0)
    ale, lives = idle.env.envs[0].unwrapped.ale, set()
    for _ in range(200):
        idle.step(noop)
        lives.add(ale.lives())
    assert lives == {5}  # without FIRE the ball is never served


def test_options_reach_the_emulator(make_env):
    env = make_env("ALE/Breakout-v5", num_envs=1, full_action_space=True, repeat_action_probability=0.25,
                   screen_size=64, frame_stack=2)
    assert env.spec.action_dim == 18 and env.spec.observation_shape == (2, 64, 64)
    ale = env.env.envs[0].unwrapped.ale
    assert ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert ale.getInt("max_num_frames_per_episode") == 108000
    with pytest.raises(ConfigError, match="FIRE"):
        make_env("ALE/Freeway-v5", num_envs=1, fire_reset=True)


@pytest.mark.parametrize("game", ["pong", "freeway", "boxing", "breakout"])
def test_presets_build(game):
    env = build("env", {**OmegaConf.load(CONF / "env" / f"{game}.yaml"), "num_envs": 1})
    try:
        assert env.spec.observation_shape == (4, 84, 84) and env.terminal_on_life_loss
        assert env.reward_clip == "sign"  # DeepMind's set-up lives with the env
        assert env.env.envs[0].unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    finally:
        env.close()


def test_ppo_cnn_smoke_run_on_breakout(tmp_path, capsys):
    args = ["env=breakout", "model=actor_critic_cnn", "total_frames=256", "collector.frames_per_batch=128",
            "buffer.batch_size=64", "eval.episodes=1", "eval.max_envs=1", "logger=none"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    summary = summary_of(only_run_dir(tmp_path))
    assert summary["status"] == "finished" and summary["frames"] == 256
    assert summary["eval/episodes"] == 1 and summary["eval/episode_return"] >= 0
