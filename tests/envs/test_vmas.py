"""VmasEnv: agent-dim layout, seeding, termination vs truncation, final observations, action sets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

vmas = pytest.importorskip("vmas")

from vmas.simulator.core import Agent, World  # noqa: E402
from vmas.simulator.scenario import BaseScenario  # noqa: E402

from rlrun.core.errors import ConfigError  # noqa: E402
from rlrun.core.specs import GROUP, EnvSpec  # noqa: E402
from rlrun.envs.vmas import VmasEnv  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class CounterScenario(BaseScenario):
    """Each sub-env counts its steps; agent i in env e observes ``[t, i, e]`` and earns ``t``.

    Sub-env e terminates when its count reaches ``terminate_at[e]`` (0: never), so tests
    know every observation, reward and episode end without physics.
    """

    def __init__(self, terminate_at: list[int]):
        super().__init__()
        self.terminate_at = terminate_at

    def make_world(self, batch_dim: int, device: torch.device, **kwargs) -> World:
        self.n = kwargs.pop("n_agents", 2)
        u_range = kwargs.pop("u_range", 1.0)
        world = World(batch_dim, device)
        for i in range(self.n):
            world.add_agent(Agent(name=f"agent_{i}", collide=False, u_range=u_range))
        self.t = torch.zeros(batch_dim, device=device)
        self.limit = torch.tensor(self.terminate_at, dtype=torch.float32, device=device)
        self.resets = torch.zeros(batch_dim, device=device)
        return world

    def reset_world_at(self, env_index: int | None = None) -> None:
        if env_index is None:
            self.t.zero_()
            self.resets += 1
        else:
            self.t[env_index] = 0
            self.resets[env_index] += 1

    def post_step(self) -> None:
        self.t += 1

    def observation(self, agent: Agent) -> torch.Tensor:
        i = float(self.world.agents.index(agent))
        env = torch.arange(self.world.batch_dim, dtype=torch.float32, device=self.world.device)
        return torch.stack([self.t, torch.full_like(self.t, i), env], dim=-1)

    def reward(self, agent: Agent) -> torch.Tensor:
        return self.t.clone()

    def done(self) -> torch.Tensor:
        return (self.limit > 0) & (self.t >= self.limit)


def counter_env(terminate_at: list[int], max_steps: int | None, n_agents: int = 2) -> VmasEnv:
    return VmasEnv(CounterScenario(terminate_at), num_envs=len(terminate_at), max_steps=max_steps,
                   seed=0, n_agents=n_agents)


def zeros(env: VmasEnv) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.n_agents, env.spec.action_dim)


@pytest.mark.parametrize("continuous", [True, False])
def test_navigation_shapes_and_spec(continuous):
    env = VmasEnv("navigation", num_envs=4, continuous_actions=continuous, seed=0, n_agents=3)
    assert env.spec == EnvSpec((18,), np.dtype(np.float32), not continuous, 2 if continuous else 5,
                               -1.0 if continuous else 0.0, 1.0 if continuous else 0.0, group=GROUP,
                               n_agents=3, state_shape=(54,))
    obs = env.reset(seed=0)
    assert obs.shape == (4, 3, 18) and obs.dtype == torch.float32
    action = torch.zeros(4, 3, 2) if continuous else torch.zeros(4, 3, dtype=torch.long)
    out = env.step(action)
    assert out.next_obs.shape == out.obs.shape == (4, 3, 18)
    assert out.reward.shape == (4, 3)
    assert out.terminated.shape == out.truncated.shape == (4,)
    assert out.terminated.dtype == out.truncated.dtype == torch.bool
    assert out.state.shape == out.next_state.shape == (4, 54)
    # without a scenario state, the global state is every agent's observation in agent order
    torch.testing.assert_close(out.state.view(4, 3, 18), out.obs)


def _rollout(seed: int, steps: int = 12) -> list[torch.Tensor]:
    env = VmasEnv("navigation", num_envs=3, seed=seed, max_steps=5, n_agents=3)
    gen = torch.Generator().manual_seed(123)
    seen = [env.reset()]
    for _ in range(steps):  # crosses two time limits, so resets are covered too
        out = env.step(torch.rand(3, 3, 2, generator=gen) * 2 - 1)
        seen += [out.next_obs, out.reward, out.obs]
    return seen


def test_same_seed_same_rollout_and_other_seed_differs():
    a, b, c = _rollout(0), _rollout(0), _rollout(1)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert not torch.equal(a[0], c[0])


def test_time_limit_is_truncation_and_scenario_done_is_termination():
    # env 0 terminates at its 2nd step; env 1 never does and is cut by max_steps=3
    env = counter_env([2, 0], max_steps=3)
    env.reset()
    flags = []
    for _ in range(6):
        out = env.step(zeros(env))
        flags.append((out.terminated.tolist(), out.truncated.tolist()))
    assert flags == [
        ([False, False], [False, False]),
        ([True, False], [False, False]),   # env 0: done() at t=2 -> terminated
        ([False, False], [False, True]),   # env 1: t=3 = max_steps -> truncated
        ([True, False], [False, False]),   # env 0 again, two steps after its reset
        ([False, False], [False, False]),
        ([True, False], [False, True]),    # both at once: env 0 terminates, env 1 is cut again
    ]


def test_only_ended_envs_are_reset_and_next_obs_keeps_the_final_observation():
    env = counter_env([2, 0, 0], max_steps=None)
    scenario = env.env.scenario
    env.reset()
    before = scenario.resets.clone()
    env.step(zeros(env))
    out = env.step(zeros(env))  # env 0 terminates at t=2
    assert out.terminated.tolist() == [True, False, False]
    # the true final observation of env 0 ([t=2, agent, env]), for every agent
    torch.testing.assert_close(out.next_obs[0], torch.tensor([[2.0, 0, 0], [2, 1, 0]]))
    torch.testing.assert_close(out.obs[0], torch.tensor([[0.0, 0, 0], [0, 1, 0]]))  # reset obs
    # the other envs went on untouched: same tensor content, count 2, not reset
    torch.testing.assert_close(out.obs[1:], out.next_obs[1:])
    torch.testing.assert_close(out.obs[1:, :, 0], torch.full((2, 2), 2.0))
    assert (scenario.resets - before).tolist() == [1, 0, 0]  # only env 0 was reset
    torch.testing.assert_close(out.reward, torch.full((3, 2), 2.0))  # the ending step is paid
    torch.testing.assert_close(out.next_state[0], out.next_obs[0].flatten())
    torch.testing.assert_close(out.state[0], out.obs[0].flatten())


class StateScenario(CounterScenario):
    """A scenario with its own global state: ``[t, 10 * t]`` per env."""

    def state(self) -> torch.Tensor:
        return torch.stack([self.t, 10 * self.t], dim=-1)


def test_a_scenario_state_is_used_and_kept_final_for_ended_envs():
    env = VmasEnv(StateScenario([2, 0]), num_envs=2, max_steps=None, seed=0, n_agents=2)
    assert env.spec.state_shape == (2,)
    env.reset()
    env.step(zeros(env))
    out = env.step(zeros(env))  # env 0 terminates at t=2 and is reset
    torch.testing.assert_close(out.next_state, torch.tensor([[2.0, 20.0], [2.0, 20.0]]))
    torch.testing.assert_close(out.state, torch.tensor([[0.0, 0.0], [2.0, 20.0]]))


def test_all_envs_ending_together_reset_in_one_batched_call():
    env = counter_env([0, 0, 0], max_steps=2)
    scenario = env.env.scenario
    env.reset()
    before = scenario.resets.clone()
    env.step(zeros(env))
    out = env.step(zeros(env))
    assert out.truncated.all() and not out.terminated.any()
    assert (out.next_obs[..., 0] == 2).all() and (out.obs[..., 0] == 0).all()
    assert (scenario.resets - before).tolist() == [1, 1, 1]


def test_step_never_goes_through_numpy(monkeypatch):
    env = VmasEnv("navigation", num_envs=4, seed=0, max_steps=2, n_agents=3)
    env.reset()

    def forbidden(*args, **kwargs):
        raise AssertionError("a tensor was converted to numpy during step")

    monkeypatch.setattr(torch.Tensor, "numpy", forbidden)
    monkeypatch.setattr(torch.Tensor, "__array__", forbidden)
    monkeypatch.setattr(np, "asarray", forbidden)
    monkeypatch.setattr(np, "array", forbidden)
    for _ in range(3):  # includes a step where every env is truncated and reset
        out = env.step(torch.zeros(4, 3, 2))
        for x in out:
            assert isinstance(x, torch.Tensor) and x.device == env.device


def test_five_discrete_actions_are_the_papers_stay_left_right_down_up():
    env = VmasEnv("navigation", num_envs=5, continuous_actions=False, seed=0, n_agents=3)
    env.reset()
    # env k: every agent takes action k
    env.step(torch.arange(5)[:, None].expand(5, 3))
    expected = torch.tensor([[0.0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]])  # u_range 1, multiplier 1
    for agent in env.env.agents:
        torch.testing.assert_close(agent.action.u, expected)


def test_nine_discrete_actions_pass_through():
    env = VmasEnv("navigation", num_envs=9, continuous_actions=False, seed=0, n_agents=3,
                  discrete_actions=9)
    assert env.spec.action_dim == 9
    env.reset()
    env.step(torch.arange(9)[:, None].expand(9, 3))
    per_axis = torch.tensor([0.0, -1, 1])  # VMAS: 0 stay, 1 decrement, 2 increment; flat = 3 a_x + a_y
    expected = torch.stack([per_axis.repeat_interleave(3), per_axis.repeat(3)], dim=-1)
    torch.testing.assert_close(env.env.agents[0].action.u, expected)


def test_continuous_actions_are_rescaled_from_unit_range_and_clipped():
    env = VmasEnv("balance", num_envs=1, seed=0, n_agents=3)  # u_range 1, u_multiplier 0.7
    env.reset()
    env.step(torch.tensor([[[0.5, -2.0], [1.0, 0.0], [-0.25, 3.0]]]))
    got = torch.stack([a.action.u[0] for a in env.env.agents])
    torch.testing.assert_close(got, 0.7 * torch.tensor([[0.5, -1.0], [1.0, 0.0], [-0.25, 1.0]]))


@pytest.mark.parametrize("rescale", [True, False])
def test_actions_are_mapped_onto_a_non_unit_range_and_clamped(rescale):
    env = VmasEnv(CounterScenario([0]), num_envs=1, seed=0, n_agents=2, u_range=[2.0, 0.5],
                  rescale_actions=rescale)
    assert (env.spec.action_low, env.spec.action_high) == ((-1.0, 1.0) if rescale else (-2.0, 2.0))
    env.reset()
    env.step(torch.tensor([[[1.0, 0.5], [-3.0, -0.25]]]))
    got = torch.stack([a.action.u[0] for a in env.env.agents])
    expected = [[2.0, 0.25], [-2.0, -0.125]] if rescale else [[1.0, 0.5], [-2.0, -0.25]]
    torch.testing.assert_close(got, torch.tensor(expected))


def test_bad_settings_raise_config_errors():
    with pytest.raises(ConfigError, match="discrete_actions"):
        VmasEnv("navigation", num_envs=1, continuous_actions=False, discrete_actions=7)
    with pytest.raises(ConfigError, match="no scenario 'navigaton'. Did you mean 'navigation'"):
        VmasEnv("navigaton", num_envs=1)


def test_vmas_and_gymnasium_envs_implement_the_one_env_protocol():
    from rlrun.core.envs import EnvStep, VecEnv
    from rlrun.envs.gym import GymVecEnv

    group = VmasEnv("navigation", num_envs=2, seed=0, n_agents=3)
    single = GymVecEnv("CartPole-v1", num_envs=2)
    try:
        for env, action, agents in ((group, torch.zeros(2, 3, 2), (3,)), (single, np.zeros(2, np.int64), ())):
            assert isinstance(env, VecEnv) and env.spec.is_group == bool(agents)
            assert tuple(env.reset(seed=0).shape) == (2, *agents, *env.spec.observation_shape)
            step = env.step(action)
            assert isinstance(step, EnvStep)  # one step type, whichever the env
            next_obs, reward, terminated, truncated, obs = step  # unpacks as gymnasium's five
            assert (step.state is None) == (step.next_state is None) == (not agents)  # a group's state
            assert tuple(reward.shape) == (2, *agents)
            assert tuple(terminated.shape) == tuple(truncated.shape) == (2,)
            assert next_obs.shape == obs.shape
    finally:
        single.close()
