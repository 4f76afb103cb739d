"""The losses only agent groups have, on the one loop: MADDPG/IDDPG and IQL/VDN/QMIX.

MAPPO and IPPO are PPO's own loss (``rlrun.algos.ppo``) on a group policy. The
losses here read their entries through their key map (``Loss.keys``), which a
``GroupPolicy`` places under the group key, so the hook wiring checks multi-agent
runs as it does single-agent ones. GAE over the agent dim is the one GAE hook (``hooks.gae.group: agents``).

- ``maddpg``: deterministic policy gradient per agent through a Q critic
  (centralised: MADDPG; decentralised: IDDPG), polyak targets.
- ``marl_q``: per-agent Q-learning with ``mixer`` none (IQL), vdn or qmix.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.algos.marl_losses import MultiAgentQLoss, make_q_mixer
from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.registry import Fraction, register
from rlrun.core.specs import EnvSpec
from rlrun.modules.group_models import GroupPolicy
from rlrun.modules.networks import call_frozen, polyak_update, target_copy


def _group_policy(policy: Any, loss: str) -> GroupPolicy:
    if not isinstance(policy, GroupPolicy):
        raise ConfigError(f"loss={loss} trains agent groups, but model={type(policy).__name__} is "
                          "single-agent", key="model.name",
                          fix="use the algorithm's own model (e.g. algo=mappo sets model=group_actor_critic)")
    return policy


@register("loss", "marl_q")
class GroupQLoss(Loss):
    """TD loss of per-agent Q values: IQL (``mixer: none``), VDN (``vdn``) or QMIX (``qmix``).

    Args:
        policy: A ``GroupPolicy`` whose critic is the per-agent Q ``GroupMLP``.
        spec: The env's group ``EnvSpec`` (QMIX's state size).
        gamma: Discount (the run's top-level ``gamma``).
        mixer: ``none``, ``vdn`` or ``qmix``.
        double: Double-DQN action selection in the target.
        loss: ``l2`` or ``huber``.
        tau: Polyak rate of the target Q-network and mixer per ``target_update``.
    """

    action_spaces = ("discrete",)
    agent_layouts = ("group",)
    has_targets = True
    reads = ("observation", "action", "next.observation", "next.reward", "next.terminated")
    # QMIX adds the global state (state, next.state)

    def __init__(self, policy: GroupPolicy, spec: EnvSpec, gamma: float, mixer: str = "none",
                 double: bool = True, loss: str = "l2", tau: Fraction = 0.005):
        super().__init__(_group_policy(policy, "marl_q"))
        state = spec.state_shape[0] if spec.state_shape else None
        self.td = MultiAgentQLoss(policy.critic, make_q_mixer(mixer, spec.n_agents, state), gamma, double,
                                  loss, tau, self.keys)
        if mixer == "qmix":
            self.reads = (*self.reads, *self.keys.names(("state", "next.state")))

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        mixer = self.td.mixer
        return {"all": [*self.policy.parameters(), *(mixer.parameters() if mixer is not None else ())]}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        return self.td(td)

    def update_targets(self) -> None:
        self.td.update_targets()


@register("loss", "maddpg")
class MADDPGLoss(Loss):
    """MADDPG (Lowe et al. 2017) and IDDPG: a deterministic policy gradient per agent.

    Critic: each agent regresses ``Q_i(x, a)`` on ``r_i + gamma * (1 - terminated) *
    Q'_i(x', mu'(o'))`` with target actor ``mu'`` and target critic ``Q'``.
    Actor: agent i ascends ``Q_i(x, a_1, .., mu_i(o_i), .., a_n)``: its own action
    from the current policy, the others' from the batch (the paper's gradient).
    With a centralised critic ``x`` is every agent's observation (MADDPG); with a
    decentralised one ``Q_i`` sees only ``(o_i, a_i)`` (IDDPG) and the others' actions
    do not matter. The ``target_update`` hook moves both targets by ``tau``.

    Args:
        policy: A ``GroupPolicy`` with a deterministic group actor and a ``GroupQ`` critic.
        gamma: Discount (the run's top-level ``gamma``).
        tau: Polyak rate of the targets.
    """

    action_spaces = ("continuous",)
    agent_layouts = ("group",)
    has_targets = True
    reads = ("observation", "action", "next.observation", "next.reward", "next.terminated")

    def __init__(self, policy: GroupPolicy, gamma: float, tau: Fraction = 0.005):
        super().__init__(_group_policy(policy, "maddpg"))
        if policy.head != "deterministic":
            raise ConfigError("MADDPG needs a deterministic actor", key="model.name",
                              fix="use model=group_actor_q")
        self.gamma, self.tau = gamma, tau
        self.target_actor = target_copy(policy.actor)
        self.target_critic = target_copy(policy.critic)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.policy.actor.parameters()),
                "critic": list(self.policy.critic.parameters())}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        actor, critic, key = self.policy.actor, self.policy.critic, self.keys
        obs, action = td[key("observation")].float(), td[key("action")]
        with torch.no_grad():
            next_obs = td[key("next.observation")].float()
            next_q = self.target_critic(next_obs, self.target_actor.act(next_obs))  # [*B, n]
            not_terminal = (~td[key("next.terminated")]).float()  # [*B, 1]: shared, broadcast over agents
            target = td[key("next.reward")].squeeze(-1) + self.gamma * not_terminal * next_q
        q = critic(obs, action)
        n = obs.shape[-2]
        # joint[..., i, j] = mu_j(o_j) if j == i else a_j: agent i's row replaces only its own action
        own = torch.eye(n, dtype=torch.bool, device=obs.device).unsqueeze(-1)
        joint = torch.where(own, actor.act(obs).unsqueeze(-3), action.unsqueeze(-3))  # [*B, n, n, act]
        rows = call_frozen(critic, obs.unsqueeze(-3).expand(*obs.shape[:-2], n, *obs.shape[-2:]), joint)
        q_own = rows.diagonal(dim1=-2, dim2=-1)  # [*B, n]: Q_i on row i
        return {"loss_critic": (q - target).pow(2).mean(), "loss_actor": -q_own.mean(),
                "q_value": q.detach().mean()}

    def update_targets(self) -> None:
        polyak_update(self.target_actor, self.policy.actor, self.tau)
        polyak_update(self.target_critic, self.policy.critic, self.tau)
