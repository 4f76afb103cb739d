"""Model factories for agent groups: the networks of MAPPO/IPPO, MADDPG/IDDPG and the Q family.

Each returns a ``GroupPolicy`` (a ``Policy`` whose batch keys live under
``(GROUP, ...)``), built from the env's group ``EnvSpec``. Two switches
cover the family (``rlrun.modules.multiagent.GroupMLP``):

- ``share_params``: one parameter set for every agent (all algorithms but MADDPG,
  as the paper's Table 10) or one per agent;
- ``centralised``: the critic sees all agents' observations (MAPPO; MADDPG also
  all actions) or only the agent's own (IPPO, IDDPG). Actors are always
  decentralised: each acts on its own observation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rlrun.core.contracts import key_name
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import register
from rlrun.core.specs import GROUP, EnvSpec, entry_key
from rlrun.modules.multiagent import GroupActor, GroupMLP
from rlrun.modules.networks import Activation, Hidden


class GroupPolicy(Policy):
    """A ``Policy`` for one agent group: observations ``[..., n_agents, obs]``, values ``[..., n_agents]``.

    What it writes into a collected step lives under the group key, so its
    behaviour keys are ``agents.action`` and ``agents.sample_log_prob``; losses
    read its keys through ``group`` (``rlrun.core.contracts.Loss.keys``).
    """

    group = GROUP

    def behaviour_keys(self, explore: bool = True) -> set[str]:
        return {key_name(entry_key(k, self.group)) for k in super().behaviour_keys(explore)}

    def value(self, obs: Tensor) -> Tensor:
        """``V_i [..., n_agents]`` (GAE over the agent dim)."""
        if self.critic is None:
            raise TypeError("this policy has no value critic")
        return self.critic(obs.float()).squeeze(-1)


class DeterministicGroupActor(nn.Module):
    """``a_i = tanh(f_i(o_i))`` in [-1, 1] per agent (MADDPG, IDDPG); exploration adds noise."""

    head = "deterministic"
    explore = None  # an exploration component (Gaussian noise) supplies the noise

    def __init__(self, net: GroupMLP):
        super().__init__()
        self.net = net

    def act(self, obs: Tensor) -> Tensor:
        return torch.tanh(self.net(obs.float()))


class GreedyGroupActor(nn.Module):
    """``a_i = argmax Q_i(o_i, .)`` per agent; epsilon-greedy exploration is a component."""

    head = "greedy"
    explore = None

    def __init__(self, qnet: GroupMLP):
        super().__init__()
        self.qnet = [qnet]  # a list: the Q-network's parameters are registered once (as critic)

    def act(self, obs: Tensor) -> Tensor:
        return self.qnet[0](obs.float()).argmax(-1)


class GroupQ(nn.Module):
    """``Q_i [..., n_agents]`` from observations and actions, all agents' (centralised) or its own.

    Centralised it is MADDPG's critic ``Q_i(o_1..o_n, a_1..a_n)``; decentralised, IDDPG's ``Q_i(o_i, a_i)``.
    """

    def __init__(self, n_agents: int, obs_dim: int, action_dim: int, hidden: list[int],
                 activation: str = "tanh", share_params: bool = False, centralised: bool = True):
        super().__init__()
        self.net = GroupMLP(n_agents, obs_dim + action_dim, 1, hidden, activation, share_params,
                            centralised)

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        return self.net(torch.cat([obs.float(), action.float()], -1)).squeeze(-1)


def group_spec(spec: EnvSpec, model: str) -> EnvSpec:
    """The env's spec, refused with the fix when the env is not an agent group."""
    if not spec.is_group:
        raise ConfigError(f"model={model} is for agent groups, but this env is single-agent", key="env",
                          fix="use a multi-agent env (env=vmas/navigation, vmas/balance, vmas/sampling) "
                          "or a single-agent algorithm (`rlrun list algo`)")
    if len(spec.observation_shape) != 1:
        raise ConfigError(f"group MLPs need flat observations, got {spec.observation_shape}",
                          key="env", fix="use a scenario with vector observations")
    return spec


@register("model", "group_actor_critic", layouts=("group",))  # rlrun.core.agent_groups
def group_actor_critic(spec: EnvSpec, hidden: Hidden = (256, 256), activation: Activation = "tanh",
                       share_params: bool = True, centralised: bool = True, init_log_std: float = 0.0,
                       orthogonal_init: bool = True) -> GroupPolicy:
    """Per-agent actor and V critic for MAPPO (``centralised: true``) and IPPO (``false``)."""
    spec = group_spec(spec, "group_actor_critic")
    n, obs = spec.n_agents, spec.observation_shape[0]
    head = "categorical" if spec.discrete else "normal"
    actor = GroupActor(GroupMLP(n, obs, spec.action_dim, list(hidden), activation, share_params, False,
                                orthogonal_init, 0.01), head, spec.action_dim, init_log_std)
    critic = GroupMLP(n, obs, 1, list(hidden), activation, share_params, centralised, orthogonal_init, 1.0)
    return GroupPolicy(actor, critic)


@register("model", "group_actor_q", layouts=("group",))  # rlrun.core.agent_groups
def group_actor_q(spec: EnvSpec, hidden: Hidden = (256, 256), activation: Activation = "tanh",
                  share_params: bool = False, centralised: bool = True) -> GroupPolicy:
    """Deterministic per-agent actor and Q critic: MADDPG (``centralised: true``, no sharing), IDDPG."""
    spec = group_spec(spec, "group_actor_q")
    if spec.discrete:
        raise ConfigError("group_actor_q needs continuous actions", key="env.continuous_actions",
                          fix="set env.continuous_actions=true")
    n, obs = spec.n_agents, spec.observation_shape[0]
    actor = DeterministicGroupActor(GroupMLP(n, obs, spec.action_dim, list(hidden), activation,
                                             share_params, False))
    critic = GroupQ(n, obs, spec.action_dim, list(hidden), activation, share_params, centralised)
    return GroupPolicy(actor, critic)


@register("model", "group_qnet", layouts=("group",))  # rlrun.core.agent_groups
def group_qnet(spec: EnvSpec, hidden: Hidden = (256, 256), activation: Activation = "tanh",
               share_params: bool = True) -> GroupPolicy:
    """Per-agent Q-network over discrete actions, acting greedily (independent Q-learning, VDN, QMIX)."""
    spec = group_spec(spec, "group_qnet")
    if not spec.discrete:
        raise ConfigError("Q-learning over agents (marl_iql, vdn, qmix) needs discrete actions; this env's "
                          "are continuous", key="env.continuous_actions",
                          fix="set env.continuous_actions=false, or use a continuous-action algorithm "
                          "(mappo, ippo, maddpg, iddpg)")
    q = GroupMLP(spec.n_agents, spec.observation_shape[0], spec.action_dim, list(hidden), activation,
                 share_params)
    return GroupPolicy(GreedyGroupActor(q), q)
