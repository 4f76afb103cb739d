"""VMAS multi-agent envs, batched in torch on their device.

``VmasEnv`` wraps ``vmas.make_env`` (VMAS 1.5.2, an optional extra:
``pip install 'rlrun[marl]'``). VMAS simulates every sub-env at once in torch,
so the adapter keeps everything a tensor on the env's device: actions go in as
one ``[num_envs, n_agents, ...]`` tensor, observations and rewards come back
stacked along an agent dim, and no step converts to or from numpy.

Layout (what the agent-group contract stores under ``(GROUP, ...)`` and at
the root, ``rlrun.core.specs``):

- observations ``[num_envs, n_agents, obs_dim]`` and rewards ``[num_envs, n_agents]``
  belong to the agent group;
- ``terminated`` / ``truncated`` ``[num_envs]`` are shared by the group (VMAS ends an
  episode for all agents at once) and belong at the root;
- the global state ``[num_envs, state_dim]`` (QMIX's mixer input) belongs at the root.
  VMAS 1.5.2 scenarios define no state, so it is the agents' observations
  concatenated (a view, no copy).

Termination is not truncation: VMAS's ``max_steps`` is a time limit, so it is
reported as ``truncated`` (bootstrap through it); a scenario's own ``done()``
(navigation: every agent on its goal; balance: the package fell or arrived) is
``terminated``. Ended sub-envs are reset with ``reset_at(index)`` and the true
final observation is returned in ``next_obs``, as ``GymVecEnv`` does. A step is the
``EnvStep`` every ``rlrun.core.envs.VecEnv`` returns, with the group's global state.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from rlrun.core.envs import EnvStep
from rlrun.core.errors import ConfigError, did_you_mean
from rlrun.core.registry import Footprint, PositiveInt, register
from rlrun.core.specs import GROUP, EnvSpec

# The paper's Q-learning runs (Table 10) used "VMAS's default discretization: 5 actions
# (up, down, left, right, stay)": VMAS before 1.4 mapped a Discrete(5) action to
# stay, -x, +x, -y, +y. VMAS 1.4+ (1.5.2 here) discretises each force axis into 3
# (stay, decrement, increment) and exposes their product, Discrete(9), which adds the 4
# diagonals. ``discrete_actions=5`` (the default) restores the paper's set by mapping
# each of the 5 actions to its index in the 9-action product (flat index = 3 * a_x + a_y,
# 0 stay, 1 decrement, 2 increment per axis); ``discrete_actions=9`` passes VMAS's own.
PAPER_DISCRETE_ACTIONS = 5
_FIVE_TO_NINE = (0, 3, 6, 1, 2)  # stay, -x, +x, -y, +y


def _import_vmas():
    try:
        import vmas
    except ImportError:
        raise ConfigError("VMAS is not installed", key="env",
                          fix="pip install 'rlrun[marl]' (vmas==1.5.2, gym==0.26.2, pyglet<=1.5.27)"
                          ) from None
    return vmas


class VmasEnv:
    """A VMAS scenario as a batched multi-agent env of torch tensors.

    Args:
        scenario: VMAS scenario name (``"navigation"``, ``"balance"``, ``"sampling"``, ...)
            or a ``vmas.simulator.scenario.BaseScenario`` instance.
        num_envs: Number of vectorised sub-envs.
        device: Torch device the simulation runs on.
        continuous_actions: Continuous forces (PPO family, MADDPG) or discrete (Q family).
        max_steps: Time limit (truncation); Table 10 uses 100.
        seed: Seed of VMAS's own random state.
        n_agents: Number of agents (a scenario kwarg).
        discrete_actions: 5 (the paper's set, see ``PAPER_DISCRETE_ACTIONS``) or 9 (VMAS 1.5.2's).
        rescale_actions: Continuous actions are taken in [-1, 1] and mapped onto each
            agent's range, as ``GymVecEnv`` does.
        **scenario_kwargs: More scenario arguments.

    Examples:
        >>> env = VmasEnv("navigation", num_envs=4, seed=0)
        >>> obs = env.reset()                                   # [4, 3, 18]
        >>> out = env.step(torch.zeros(4, 3, 2))
        >>> out.reward.shape, out.terminated.shape
        (torch.Size([4, 3]), torch.Size([4]))
    """

    def __init__(self, scenario: str | object, num_envs: int = 1, device: str | torch.device = "cpu",
                 continuous_actions: bool = True, max_steps: int | None = 100, seed: int | None = None,
                 n_agents: int = 3, discrete_actions: int = PAPER_DISCRETE_ACTIONS,
                 rescale_actions: bool = True, **scenario_kwargs):
        vmas = _import_vmas()
        if discrete_actions not in (5, 9):
            raise ConfigError(f"discrete_actions must be 5 or 9, not {discrete_actions}",
                              key="env.discrete_actions",
                              fix="use 5 (the paper's stay/left/right/down/up) or 9 (VMAS 1.5.2's)")
        if isinstance(scenario, str):
            names = [*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios]
            if scenario not in names:
                raise ConfigError(f"VMAS has no scenario {scenario!r}.{did_you_mean(scenario, names)}",
                                  key="env.id",
                                  fix="use a VMAS scenario name, e.g. navigation, balance, sampling")
        # VMAS scenarios read their options from **kwargs, so no signature says which exist; VMAS
        # only warns about the ones a scenario did not use. A config's unused scenario_kwargs key
        # is a typo that would silently run the scenario's default: refuse it, naming the key.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.env = vmas.make_env(scenario, num_envs=num_envs, device=device,
                                     continuous_actions=continuous_actions, max_steps=max_steps, seed=seed,
                                     terminated_truncated=True, clamp_actions=False, n_agents=n_agents,
                                     **scenario_kwargs)
        for w in caught:
            text = str(w.message)
            unused = [k for k in scenario_kwargs if "not used by the scenario" in text and repr(k) in text]
            if unused:
                raise ConfigError(f"VMAS scenario {scenario!r} does not use the option {unused[0]!r}",
                                  key=f"env.scenario_kwargs.{unused[0]}",
                                  fix="remove it (see the scenario's make_world in vmas/scenarios)")
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        self.scenario, self.num_envs = scenario, num_envs
        self.device = torch.device(device)
        self.continuous = continuous_actions
        self.n_agents = self.env.n_agents
        self._has_state = callable(getattr(self.env.scenario, "state", None))
        self._rescale = continuous_actions and rescale_actions
        self.spec = self._spec(discrete_actions)
        self._to_vmas: Tensor | None = None
        if not continuous_actions and discrete_actions == 5:
            self._check_nine_actions()
            self._to_vmas = torch.tensor(_FIVE_TO_NINE, device=self.device)
        # Continuous actions are clamped here, once for all agents, instead of by VMAS per agent
        # (clamp_actions=False): VMAS asserts that actions are within each agent's range.
        self._scale = self._offset = self._low = self._high = None
        if continuous_actions:
            low, high = (torch.stack([torch.as_tensor(getattr(s, b)) for s in self.env.action_space])
                         .to(self.device) for b in ("low", "high"))  # [n_agents, action_dim]
            unit = torch.equal(low, -torch.ones_like(low)) and torch.equal(high, torch.ones_like(high))
            if self._rescale and not unit:
                self._scale, self._offset = (high - low) / 2, (high + low) / 2
            if not unit:
                self._low, self._high = low, high

    # The learning signal is the env's own: VMAS rewards are neither clipped nor scaled, and an
    # episode's end is the learning signal's (``rlrun.core.envs.VecEnv``).
    learning_terminal = None

    def learning_reward(self, reward: Tensor) -> Tensor:
        """Rewards as VMAS gives them (no clipping or scaling for agent groups)."""
        return reward

    def _spec(self, discrete_actions: int) -> EnvSpec:
        obs_shapes = {tuple(s.shape) for s in self.env.observation_space}
        act_spaces = {repr(s) for s in self.env.action_space}
        if len(obs_shapes) != 1 or len(act_spaces) != 1:
            raise ConfigError(f"scenario {self.scenario!r} has agents with different observation or "
                              f"action spaces ({obs_shapes}, {act_spaces})", key="env.id",
                              fix="use a scenario whose agents are alike (one agent group)")
        obs_shape = obs_shapes.pop()
        space = self.env.action_space[0]
        if self.continuous:
            low, high = ((-1.0, 1.0) if self._rescale
                         else (float(space.low.min()), float(space.high.max())))
            action_dim = int(space.shape[0])
        else:
            low, high = 0.0, 0.0
            action_dim = discrete_actions
        state_shape = (self.n_agents * obs_shape[0],) if not self._has_state else tuple(
            self.env.scenario.state().shape[1:])
        return EnvSpec(obs_shape, np.dtype(np.float32), not self.continuous, action_dim, low, high,
                       group=GROUP, n_agents=self.n_agents, state_shape=state_shape)

    def _check_nine_actions(self) -> None:
        for agent in self.env.agents:
            if list(agent.discrete_action_nvec) != [3, 3] or (self.env.world.dim_c and not agent.silent):
                raise ConfigError(
                    f"scenario {self.scenario!r} does not discretise into 3 x 3 movement actions",
                    key="env.discrete_actions", fix="set env.discrete_actions=9 (VMAS's own action set)")

    @property
    def state_is_observations(self) -> bool:
        """True when the global state is the agents' observations flattened (no scenario ``state()``)."""
        return not self._has_state

    def reset(self, seed: int | None = None) -> Tensor:
        """Resets every sub-env; returns observations ``[num_envs, n_agents, obs_dim]``."""
        return torch.stack(self.env.reset(seed=seed), dim=1)

    def state(self, obs: Tensor) -> Tensor:
        """The global state ``[num_envs, *state_shape]`` that goes with observations ``obs``.

        Only valid for the observations VMAS returned last when the scenario defines
        ``state()``; otherwise it is ``obs`` flattened over agents (a view).
        """
        if self._has_state:
            return self.env.scenario.state()
        return obs.flatten(-2)

    def _vmas_actions(self, action: Tensor) -> list[Tensor]:
        if self.continuous:
            if self._scale is not None:
                action = action * self._scale + self._offset
            # bounds as tensors make the clamp exact (a rescaled 1.0 may land an ulp outside)
            action = action.clamp(-1.0, 1.0) if self._low is None else action.clamp(self._low, self._high)
        else:
            if self._to_vmas is not None:
                action = self._to_vmas[action]
            action = action.unsqueeze(-1)  # VMAS wants [num_envs, 1] per agent
        return list(action.unbind(1))

    def step(self, action: Tensor) -> EnvStep:
        """Steps every sub-env with ``action`` (``[num_envs, n_agents]`` indices or
        ``[num_envs, n_agents, action_dim]`` floats) and resets those that ended."""
        obs, reward, terminated, truncated, _ = self.env.step(self._vmas_actions(action))
        next_obs = torch.stack(obs, dim=1)
        reward = torch.stack(reward, dim=1)
        next_state = self.state(next_obs)
        done = terminated | truncated
        # VMAS only resets one index at a time, so knowing which ended costs one sync per step
        # (as in TorchRL's VmasEnv). With a shared time limit every sub-env usually ends together
        # and one batched reset serves them all.
        if not done.any():
            return EnvStep(next_obs, reward, terminated, truncated, next_obs, next_state, next_state)
        if done.all():
            self.env.reset(return_observations=False)
        else:
            for index in done.nonzero().squeeze(-1).tolist():
                self.env.reset_at(index, return_observations=False)
        reset_obs = torch.stack(self.env.get_from_scenario(get_observations=True, get_rewards=False,
                                                           get_infos=False, get_dones=False)[0], dim=1)
        # Sub-envs that did not end are untouched by reset_at: keep their next_obs.
        obs = torch.where(done[:, None, None], reset_obs, next_obs)
        state = self.state(obs) if not self._has_state else torch.where(
            done.view(-1, *[1] * len(self.spec.state_shape)), self.state(obs), next_state)
        return EnvStep(next_obs, reward, terminated, truncated, obs, next_state, state)

    def close(self) -> None:
        """VMAS holds no processes or files; closes a render window if one was opened."""
        viewer = getattr(self.env, "viewer", None)
        if viewer is not None:
            viewer.close()


def _footprint(options: dict, key: str) -> Footprint:
    """What the batched sub-envs hold (``registry.register(check=...)``): lower bounds, since a
    scenario's observation size is known only once it is made (a position and a velocity each)."""
    agents = int(options["n_agents"])
    return Footprint(count=int(options["num_envs"]), count_key=f"{key}.num_envs",
                     each_bytes=agents * 4 * 4 * 4,  # per agent entity: position, velocity, force, torque
                     transition_bytes=agents * (2 * 4 * 4 + 4 * 2))


@register("env", "vmas", check=_footprint, layouts=("group",))
def make_vmas_env(id: str, num_envs: PositiveInt = 60, n_agents: PositiveInt = 3,
                  max_steps: PositiveInt | None = 100, continuous_actions: bool = True,
                  discrete_actions: Literal[5, 9] = PAPER_DISCRETE_ACTIONS, device: str = "cpu",
                  scenario_kwargs: dict | None = None) -> VmasEnv:
    """A VMAS scenario (``id``: navigation, balance, sampling, ...) as one agent group, batched in torch.

    ``continuous_actions: false`` gives discrete actions (the Q family); ``discrete_actions``
    is 5 (the paper's set) or 9 (VMAS 1.5.2's). Episodes are seeded by the collector.
    Needs ``pip install 'rlrun[marl]'``.
    """
    return VmasEnv(id, num_envs=num_envs, device=device, continuous_actions=continuous_actions,
                   max_steps=max_steps, n_agents=n_agents, discrete_actions=discrete_actions,
                   **(scenario_kwargs or {}))
