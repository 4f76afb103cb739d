"""The one collector on agent groups: its batches against a plain step-by-step reference, on a fake
agent-group env whose sub-envs end their episodes at different steps, by termination and by truncation."""

from __future__ import annotations

import pytest
import torch

from rlrun.collectors.sync import SyncCollector, make_sync_collector
from rlrun.collectors.vmas import make_vmas_collector
from rlrun.core.contracts import COLLECTED_KEYS
from rlrun.core.envs import EnvStep
from rlrun.core.specs import GROUP, EnvSpec

N_ENVS, N_AGENTS = 4, 2


class StaggeredGroupEnv:
    """Sub-env i runs episodes of i + 2 steps, terminated for even i and truncated for odd i.

    Observations ``[n, agents, 2]`` encode (episode count, step in episode) plus the agent
    index, so a misplaced row or a reset mistaken for a final observation changes values.
    With ``with_state`` the scenario has a global state of its own (not the observations).
    """

    def __init__(self, with_state: bool):
        self.num_envs, self.n_agents, self.device = N_ENVS, N_AGENTS, torch.device("cpu")
        self.spec = EnvSpec((2,), "float32", False, 2, group=GROUP, n_agents=N_AGENTS,
                            state_shape=(3,) if with_state else (4,))
        self.state_is_observations = not with_state
        self.length = torch.arange(N_ENVS) + 2
        self.t = torch.zeros(N_ENVS, dtype=torch.long)
        self.episode = torch.zeros(N_ENVS, dtype=torch.long)

    learning_terminal = None  # the rest of the VecEnv protocol: the env's own learning signal

    def learning_reward(self, reward: torch.Tensor) -> torch.Tensor:
        return reward

    def _obs(self) -> torch.Tensor:
        base = torch.stack([self.episode * 100 + self.t, torch.arange(N_ENVS) * 1000], -1).float()
        return base[:, None] + torch.arange(N_AGENTS).view(1, -1, 1) * 0.5

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self.t.zero_()
        return self._obs()

    def state(self, obs: torch.Tensor) -> torch.Tensor:
        if self.state_is_observations:
            return obs.flatten(-2)
        return torch.stack([self.t, self.episode, torch.arange(N_ENVS)], -1).float() * -1

    def step(self, action: torch.Tensor) -> EnvStep:
        self.t += 1
        reward = action.sum(-1) + self.t[:, None]
        next_obs = self._obs()
        next_state = self.state(next_obs)
        ended = self.t >= self.length
        terminated = ended & (torch.arange(N_ENVS) % 2 == 0)
        truncated = ended & ~terminated
        if not ended.any():
            return EnvStep(next_obs, reward, terminated, truncated, next_obs, next_state, next_state)
        self.episode += ended.long()
        self.t[ended] = 0
        obs = torch.where(ended[:, None, None], self._obs(), next_obs)
        state = torch.where(ended[:, None], self.state(obs), next_state)
        return EnvStep(next_obs, reward, terminated, truncated, obs, next_state, state)


class CountingPolicy:
    """Deterministic actions from the observation, with a log-prob extra (as a stochastic actor has)."""

    def __call__(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        action = torch.stack([obs[..., 0] * 0.01, -obs[..., 1] * 0.001], -1)
        return {"action": action, "sample_log_prob": obs.sum(-1)}


def reference_batches(env: StaggeredGroupEnv, steps: int, batches: int, random_steps: int, collector):
    """The batches by the definition: one step at a time, each value stored as it comes."""
    obs = env.reset()
    state = env.state(obs)
    out = []
    for _ in range(batches):
        rows = []
        for t in range(steps):
            act = (collector._random_action() if t < random_steps and not out else CountingPolicy()(obs))
            step = env.step(act["action"])
            rows.append({"obs": obs, "state": state, "action": act["action"],
                         "log_prob": act.get("sample_log_prob", torch.zeros(N_ENVS, N_AGENTS)),
                         "next_obs": step.next_obs, "next_state": step.next_state, "reward": step.reward,
                         "terminated": step.terminated, "truncated": step.truncated})
            obs, state = step.obs, step.state
        out.append({k: torch.stack([r[k] for r in rows], 1) for k in rows[0]})
    return out


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("steps", [7, 23])  # shorter and longer than the staging chunk (10 steps)
def test_batches_equal_a_step_by_step_reference_with_staggered_episode_ends(with_state, steps):
    random_steps, n_batches = 3, 2
    coll = SyncCollector(StaggeredGroupEnv(with_state), CountingPolicy(), frames_per_batch=steps * N_ENVS,
                         total_frames=10**6, init_random_frames=random_steps * N_ENVS, seed=5)
    got = [coll.collect() for _ in range(n_batches)]
    ref_coll = SyncCollector(StaggeredGroupEnv(with_state), CountingPolicy(), steps * N_ENVS, 10**6, seed=5)
    want = reference_batches(StaggeredGroupEnv(with_state), steps, n_batches, random_steps, ref_coll)
    for batch, ref in zip(got, want, strict=True):
        assert batch.batch_size == (N_ENVS, steps)
        assert torch.equal(batch["agents", "observation"], ref["obs"])
        assert torch.equal(batch["next", "agents", "observation"], ref["next_obs"])
        assert torch.equal(batch["state"], ref["state"].flatten(2) if not with_state else ref["state"])
        assert torch.equal(batch["next", "state"], ref["next_state"])
        assert torch.equal(batch["agents", "action"], ref["action"])
        assert torch.equal(batch["agents", "sample_log_prob"], ref["log_prob"])  # zero on random steps
        assert torch.equal(batch["next", "agents", "reward"], ref["reward"].unsqueeze(-1))
        assert torch.equal(batch["next", "terminated"], ref["terminated"].unsqueeze(-1))
        assert torch.equal(batch["next", "truncated"], ref["truncated"].unsqueeze(-1))
        assert torch.equal(batch["next", "done"], (ref["terminated"] | ref["truncated"]).unsqueeze(-1))
    # both kinds of end happened, at different steps in different sub-envs
    ends = torch.cat([b["next", "done"] for b in got], 1).squeeze(-1)
    assert len({tuple(row.nonzero().flatten().tolist()) for row in ends}) == N_ENVS


def test_batches_can_be_trained_on_outside_inference_mode():
    coll = SyncCollector(StaggeredGroupEnv(False), CountingPolicy(), 12 * N_ENVS, 10**6)
    batch = coll.collect()
    w = torch.ones(2, requires_grad=True)
    for key in (("agents", "observation"), ("next", "agents", "observation"), ("agents", "sample_log_prob")):
        x = batch[key]
        assert not x.is_inference(), key
        (x.unsqueeze(-1) * w[0]).sum().backward()  # a loss saves these for backward


class GroupPolicy:
    """The ``Policy`` members the collector factories read."""

    exploration = None

    def behaviour(self, explore: bool = True):
        return CountingPolicy()


@pytest.mark.parametrize("make", [make_sync_collector, make_vmas_collector])
def test_collector_sync_and_its_vmas_alias_are_the_one_collector_for_groups(make):
    coll = make(StaggeredGroupEnv(True), GroupPolicy(), 5 * N_ENVS, 10 * N_ENVS)
    assert type(coll) is SyncCollector
    # what the builder checks losses against: the group's layout, with the global state
    assert coll.provided_keys == {"agents.observation", "agents.action", "next.agents.observation",
                                  "next.agents.reward", "next.terminated", "next.truncated", "next.done",
                                  "state", "next.state", "collector.traj_ids"}
    batch = coll.collect()
    assert {".".join(k) if isinstance(k, tuple) else k
            for k in batch.keys(True, True)} >= coll.provided_keys


def test_single_agent_envs_provide_the_root_keys(make_counter_env):
    coll = SyncCollector(make_counter_env(2), lambda o: {"action": torch.zeros(2, dtype=torch.long)}, 4, 4)
    assert coll.provided_keys == COLLECTED_KEYS


def test_group_episode_ends_are_told_by_sub_env_index():
    told = []
    coll = SyncCollector(StaggeredGroupEnv(False), CountingPolicy(), 6 * N_ENVS, 10**6)
    coll.on_episode_end = lambda index: told.append(index.tolist())
    batch = coll.collect()
    done = batch["next", "done"].squeeze(-1)
    assert told == [row.nonzero().flatten().tolist() for row in done.T if row.any()]
