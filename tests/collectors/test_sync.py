"""SyncCollector on the fake counter env: layout, no fake transitions, trajectories, frames, rewards."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_env import episode_return

from rlrun.collectors.sync import SyncCollector, make_sync_collector
from rlrun.core.envs import EnvStep
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def constant_policy(action: int, calls: list | None = None):
    def policy(obs: torch.Tensor) -> dict[str, torch.Tensor]:
        if calls is not None:
            calls.append(obs.clone())
        return {"action": torch.full((obs.shape[0],), action, dtype=torch.long)}

    return policy


class ConstActor:
    """An actor whose exploring action is ``explore_action`` and deterministic action ``act_action``."""

    def __init__(self, explore_action: int, act_action: int | None = None):
        self.explore_action, self.act_action = explore_action, act_action

    def explore(self, obs):
        return constant_policy(self.explore_action)(obs)

    def act(self, obs):
        return torch.full((obs.shape[0],), self.act_action, dtype=torch.long)


def collect_all(coll: SyncCollector):
    """All batches of the collector, concatenated along time."""
    batches = list(coll)
    return batches, torch.cat(batches, dim=1)


def test_batch_shape_and_torchrl_key_layout(make_counter_env):
    env = make_counter_env(3, terminate_at=[2, 3, 4])
    coll = SyncCollector(env, constant_policy(1), frames_per_batch=12, total_frames=24)
    td = coll.collect()
    assert td.batch_size == torch.Size([3, 4])
    keys = set(td.keys(include_nested=True, leaves_only=True))
    assert keys == {"observation", "action", ("next", "observation"), ("next", "reward"),
                    ("next", "done"), ("next", "terminated"), ("next", "truncated"),
                    ("collector", "traj_ids")}
    assert td["observation"].shape == td["next", "observation"].shape == (3, 4, 3)
    assert td["observation"].dtype == torch.float32
    assert td["action"].shape == (3, 4) and td["action"].dtype == torch.long
    for k in ("reward", "done", "terminated", "truncated"):
        assert td["next", k].shape == (3, 4, 1)
    for k in ("done", "terminated", "truncated"):
        assert td["next", k].dtype == torch.bool
    assert td["collector", "traj_ids"].shape == (3, 4)
    assert torch.equal(td["next", "done"], td["next", "terminated"] | td["next", "truncated"])
    # the first step of each sub-env pays (0 + 1) * (+1)
    assert torch.equal(td["next", "reward"][:, 0, 0], torch.ones(3))


def test_no_fake_transition_is_recorded(make_counter_env):
    # sub-env 0 terminates at 2, sub-env 1 at 3, sub-env 2 is truncated at 4 (time limit)
    env = make_counter_env(3, terminate_at=[2, 3, 9], max_episode_steps=4)
    _, td = collect_all(SyncCollector(env, constant_policy(1), frames_per_batch=9, total_frames=45))
    obs, nxt = td["observation"], td["next", "observation"]
    done = td["next", "done"].squeeze(-1)
    assert td["next", "terminated"][:2].any() and td["next", "truncated"][2].any()
    assert not td["next", "truncated"][:2].any() and not td["next", "terminated"][2].any()
    # every transition is a real step of one episode: step + 1, same marker, same episode
    assert torch.equal(nxt[..., 0], obs[..., 0] + 1)
    assert torch.equal(nxt[..., 1:], obs[..., 1:])
    # reward of the step matches the env's formula (step + 1) * (+1)
    assert torch.equal(td["next", "reward"].squeeze(-1), obs[..., 0] + 1)
    for i in range(3):
        for t in range(td.shape[1] - 1):
            if done[i, t]:
                assert nxt[i, t, 0] == [2, 3, 4][i]  # the true final observation
                assert obs[i, t + 1, 0] == 0 and obs[i, t + 1, 2] == nxt[i, t, 2] + 1  # a reset
            else:
                assert torch.equal(nxt[i, t], obs[i, t + 1])


def test_traj_ids_change_exactly_after_done_and_are_unique_across_envs(make_counter_env):
    env = make_counter_env(3, terminate_at=[2, 3, 5])
    _, td = collect_all(SyncCollector(env, constant_policy(1), frames_per_batch=12, total_frames=60))
    traj = td["collector", "traj_ids"]
    done = td["next", "done"].squeeze(-1)
    assert torch.equal(traj[:, 1:] != traj[:, :-1], done[:, :-1])
    assert torch.equal(traj[:, 0], torch.arange(3))
    per_env = [set(traj[i].tolist()) for i in range(3)]
    assert not (per_env[0] & per_env[1] or per_env[0] & per_env[2] or per_env[1] & per_env[2])
    # one trajectory id <-> one (marker, episode) pair of the env
    pairs = {}
    for tid, key in zip(traj.flatten().tolist(), td["observation"][..., 1:].reshape(-1, 2).tolist()):
        pairs.setdefault(tid, set()).add(tuple(key))
    assert all(len(v) == 1 for v in pairs.values())
    assert len({next(iter(v)) for v in pairs.values()}) == len(pairs)


def test_collects_exactly_total_frames_with_a_shortened_last_batch(make_counter_env):
    env = make_counter_env(2)
    coll = SyncCollector(env, constant_policy(1), frames_per_batch=8, total_frames=20)
    batches, _ = collect_all(coll)
    assert [tuple(b.batch_size) for b in batches] == [(2, 4), (2, 4), (2, 2)]
    assert coll.frames == 20
    assert list(coll) == []


def test_total_frames_rounds_up_to_num_envs(make_counter_env):
    env = make_counter_env(2)
    coll = SyncCollector(env, constant_policy(1), frames_per_batch=8, total_frames=21)
    batches, _ = collect_all(coll)
    assert [b.shape[1] for b in batches] == [4, 4, 3]
    assert coll.frames == coll.total_frames == 22


def test_init_random_frames_use_random_actions_then_the_policy(make_counter_env):
    env = make_counter_env(2)
    calls: list = []
    coll = SyncCollector(env, constant_policy(0, calls), frames_per_batch=20, total_frames=40,
                         init_random_frames=16, seed=3)
    td = coll.collect()
    assert len(calls) == 2  # 8 random steps x 2 envs = 16 frames, then 2 policy steps
    random_part = td["action"][:, :8]
    assert random_part.dtype == torch.long and set(random_part.unique().tolist()) == {0, 1}
    assert (td["action"][:, 8:] == 0).all()
    coll.collect()
    assert len(calls) == 12


def test_random_box_actions_lie_in_the_policy_range(make_counter_env):
    env = make_counter_env(2, continuous=True)

    def policy(obs):
        raise AssertionError("the policy must not act during init_random_frames")

    coll = SyncCollector(env, policy, frames_per_batch=20, total_frames=20, init_random_frames=20)
    td = coll.collect()
    action = td["action"]
    assert action.shape == (2, 10, 1)
    assert (action.abs() <= 1).all() and action.std() > 0.3
    # the first step of each episode pays the received (rescaled) action: twice the policy's
    first = td["observation"][..., 0] == 0
    torch.testing.assert_close(td["next", "reward"][first], 2 * action[first])


def test_reward_scale_changes_only_the_learning_reward(make_counter_env):
    env = make_counter_env(2, terminate_at=[3, 4], reward_scale=0.5)
    coll = SyncCollector(env, constant_policy(0), frames_per_batch=14, total_frames=14)
    td = coll.collect()
    raw = -(td["observation"][..., 0] + 1)  # action 0 pays -(step + 1)
    torch.testing.assert_close(td["next", "reward"].squeeze(-1), 0.5 * raw)
    returns, lengths = coll.pop_episode_stats()
    # 7 steps: sub-env 0 finishes two episodes of 3, sub-env 1 one episode of 4
    assert sorted(lengths) == [3, 3, 4]
    assert sorted(returns) == sorted([episode_return(3, -1), episode_return(3, -1), episode_return(4, -1)])
    assert coll.pop_episode_stats() == ([], [])


def test_sign_reward_clip_changes_only_the_learning_reward(make_counter_env):
    env = make_counter_env(2, terminate_at=[3, 4], reward_clip="sign")
    coll = make_sync_collector(env, Policy(ConstActor(0)), frames_per_batch=8, total_frames=8)
    td = coll.collect()
    assert torch.equal(td["next", "reward"], -torch.ones(2, 4, 1))
    returns, lengths = coll.pop_episode_stats()
    assert sorted(zip(lengths, returns)) == [(3, episode_return(3, -1)), (4, episode_return(4, -1))]


def test_unknown_reward_clip_raises_config_error(make_counter_env):
    with pytest.raises(ConfigError) as info:
        make_counter_env(2, reward_clip="tanh")
    assert info.value.key == "env.reward_clip"


@pytest.mark.parametrize(("explore", "expected"), [(True, 1), (False, 0)])
def test_factory_explore_switch_picks_explore_or_act(make_counter_env, explore, expected):
    coll = make_sync_collector(make_counter_env(2), Policy(ConstActor(1, 0)), 4, 4, explore=explore)
    assert (coll.collect()["action"] == expected).all()


def test_frames_per_batch_not_divisible_by_num_envs_raises_config_error(make_counter_env):
    with pytest.raises(ConfigError) as info:
        SyncCollector(make_counter_env(3), constant_policy(0), frames_per_batch=10, total_frames=30)
    assert info.value.key == "collector.frames_per_batch"
    assert "3" in info.value.fix


def test_state_dict_round_trip_keeps_frames_traj_counter_and_random_stream(make_counter_env):
    kwargs = dict(frames_per_batch=8, total_frames=40, init_random_frames=40, seed=5)
    coll = SyncCollector(make_counter_env(2, terminate_at=2), constant_policy(0), **kwargs)
    first = torch.cat([coll.collect(), coll.collect()], dim=1)
    state = coll.state_dict()
    assert state["frames"] == 16
    expected = coll.collect()  # what an uninterrupted run collects next

    resumed = SyncCollector(make_counter_env(2, terminate_at=2), constant_policy(0), **kwargs)
    resumed.load_state_dict(state)
    assert resumed.frames == 16
    batch = resumed.collect()
    assert resumed.frames == 24
    assert torch.equal(batch["action"], expected["action"])  # the random-action stream continues
    new_ids = set(batch["collector", "traj_ids"].unique().tolist())
    assert min(new_ids) >= state["next_traj"]
    assert not new_ids & set(first["collector", "traj_ids"].unique().tolist())
    # a resumed run starts fresh episodes with a different seed, not the first ones again
    assert (batch["observation"][:, 0, 0] == 0).all()
    old_markers = set(first["observation"][..., 1].unique().tolist())
    assert old_markers == {5.0, 6.0}
    assert not set(batch["observation"][..., 1].unique().tolist()) & old_markers
    assert len(list(resumed)) == 2 and resumed.frames == 40


def test_batch_straddling_init_random_frames_keeps_policy_extras(make_counter_env):
    def policy(obs):
        n = obs.shape[0]
        return {"action": torch.zeros(n, dtype=torch.long), "sample_log_prob": torch.full((n,), 0.25)}

    coll = SyncCollector(make_counter_env(2), policy, frames_per_batch=8, total_frames=8,
                         init_random_frames=4)
    td = coll.collect()
    assert td["sample_log_prob"].shape == (2, 4)
    assert (td["sample_log_prob"][:, 2:] == 0.25).all()
    assert (td["sample_log_prob"][:, :2] == 0).all()  # random-action steps have no policy extras
    assert (td["action"][:, 2:] == 0).all()


class ScriptedVecEnv:
    """A vector env whose rewards and episode ends come from a seeded script (no gymnasium)."""

    learning_terminal = None
    spec = EnvSpec((1,), np.dtype(np.float32), True, 2)

    @staticmethod
    def learning_reward(reward):
        return reward

    def __init__(self, num_envs: int, steps: int, end_prob: float, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.num_envs = num_envs
        self.rewards = rng.standard_normal((steps, num_envs))
        self.ends = rng.random((steps, num_envs)) < end_prob
        self.terminated = self.ends & (rng.random((steps, num_envs)) < 0.5)
        self.t = 0

    def reset(self, seed=None):
        return np.zeros((self.num_envs, 1), np.float32)

    def step(self, action):
        t, self.t = self.t, self.t + 1
        obs = np.full((self.num_envs, 1), t, np.float32)
        return EnvStep(obs, self.rewards[t], self.terminated[t], self.ends[t] & ~self.terminated[t], obs)


def per_step_reference(env: ScriptedVecEnv):
    """Episode stats and trajectory ids kept step by step, the plain way."""
    n = env.num_envs
    ret, length, traj, next_id = np.zeros(n), np.zeros(n, np.int64), np.arange(n), n
    returns, lengths, traj_ids = [], [], []
    for reward, ended in zip(env.rewards, env.ends):
        traj_ids.append(traj.copy())
        ret, length = ret + reward, length + 1
        idx = ended.nonzero()[0]
        returns += ret[idx].tolist()
        lengths += length[idx].tolist()
        ret[idx], length[idx] = 0.0, 0
        traj = traj.copy()
        traj[idx] = next_id + np.arange(len(idx))
        next_id += len(idx)
    return returns, lengths, np.stack(traj_ids, axis=1)


@pytest.mark.parametrize("end_prob", [0.0, 0.15, 0.6])
def test_batch_bookkeeping_matches_step_by_step_over_batches(end_prob):
    """Episodes spanning batches, several ends per batch, ends on a batch's last step."""
    env = ScriptedVecEnv(num_envs=3, steps=28, end_prob=end_prob, seed=1)
    ended_at: list = []
    coll = SyncCollector(env, constant_policy(0), frames_per_batch=21, total_frames=84)
    coll.on_episode_end = lambda idx: ended_at.append(idx.tolist())
    _, td = collect_all(coll)
    returns, lengths = coll.pop_episode_stats()
    ref_returns, ref_lengths, ref_traj = per_step_reference(env)
    assert lengths == ref_lengths
    np.testing.assert_allclose(returns, ref_returns, rtol=1e-12, atol=1e-12)
    assert np.array_equal(td["collector", "traj_ids"].numpy(), ref_traj)
    assert ended_at == [row.nonzero()[0].tolist() for row in env.ends if row.any()]
    np.testing.assert_allclose(td["next", "reward"].squeeze(-1).numpy(), env.rewards.T.astype(np.float32))
    assert np.array_equal(td["next", "done"].squeeze(-1).numpy(), env.ends.T)


@pytest.mark.parametrize(("make", "told"), [("make_ou", True), ("make_gaussian", False)])
def test_only_noise_with_episode_state_is_told_of_episode_ends(make_counter_env, make, told):
    """OU noise resets per sub-env at an episode end; Gaussian noise has no such state to reset."""
    import rlrun.modules.exploration as exploration

    env = make_counter_env(2, continuous=True, terminate_at=[3, 4])
    actor = ConstActor(0.0, 0.0)
    policy = Policy(actor)
    policy.exploration = getattr(exploration, make)(actor, env.spec, env.num_envs)
    coll = make_sync_collector(env, policy, 8, 8)
    assert (coll.on_episode_end is not None) == told
