"""TD3 (Fujimoto et al. 2018) and DDPG (Lillicrap et al. 2016).

TD3: twin Q with the minimum in the target, target policy smoothing with
clipped Gaussian noise, and an actor (and target) update every
``policy_delay`` critic updates. DDPG is the single-critic, undelayed,
unsmoothed special case. Exploration noise is a separate component
(``exploration=gaussian`` for TD3, ``ornstein_uhlenbeck`` for DDPG).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import NonNegativeFloat, PositiveInt, Rate, register
from rlrun.modules.networks import call_frozen, polyak_update, target_copy


@register("loss", "td3")
class TD3Loss(Loss):
    """TD3: clipped double-Q, target policy smoothing, delayed actor updates.

    The actor loss is returned only on every ``policy_delay``-th call; the
    optimiser then leaves the actor untouched on the other steps, and
    ``update_targets`` moves the targets only after a step that updated the
    actor (Fujimoto et al.: targets move with the actor). The delay is counted
    here alone, so the ``target_update`` hook runs after every step.

    Args:
        policy: A deterministic ``actor`` and a ``TwinQCritic`` (one or two Q nets).
        gamma: Discount (the run's top-level ``gamma``).
        tau: Polyak rate of the target actor and critic.
        policy_delay: Critic updates per actor update.
        target_noise: Std of the target policy smoothing noise (0: none).
        noise_clip: Clip of that noise.
    """

    action_spaces = ("continuous",)
    reads = ("observation", "action", "next.observation", "next.reward", "next.terminated")
    has_targets = True
    learns_from = ("collector", "dataset")  # off-policy: a dataset serves as a fixed replay

    def __init__(self, policy: Policy, gamma: float, tau: Rate = 0.005, policy_delay: PositiveInt = 2,
                 target_noise: NonNegativeFloat = 0.2, noise_clip: NonNegativeFloat = 0.5):
        super().__init__(policy)
        if policy.head != "deterministic":
            raise ConfigError(f"{type(self).__name__[:-4]} needs a deterministic actor",
                              key="model.head", fix="set model.head=deterministic")
        self.gamma, self.tau = gamma, tau
        self.policy_delay, self.target_noise, self.noise_clip = policy_delay, target_noise, noise_clip
        self.target_actor = target_copy(policy.actor)
        self.target_critic = target_copy(policy.critic)
        self.calls = 0

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.policy.actor.parameters()),
                "critic": list(self.policy.critic.parameters())}

    @property
    def actor_step(self) -> bool:
        """Whether the last ``forward`` returned the actor loss (every ``policy_delay``-th call)."""
        return self.calls % self.policy_delay == 0

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        actor, critic = self.policy.actor, self.policy.critic
        obs = td["observation"]
        with torch.no_grad():
            next_obs = td["next", "observation"]
            next_action = self.target_actor.act(next_obs)
            if self.target_noise > 0:
                noise = (torch.randn_like(next_action) * self.target_noise).clamp(
                    -self.noise_clip, self.noise_clip)
                next_action = (next_action + noise).clamp(-1.0, 1.0)
            next_q = self.target_critic(next_obs, next_action).min(0).values
            not_terminal = (~td["next", "terminated"]).squeeze(-1).float()
            target = td["next", "reward"].squeeze(-1) + self.gamma * not_terminal * next_q
        q = critic(obs, td["action"])
        td_error = q - target
        weight = td.get("priority_weight", None)
        sq = td_error.pow(2) if weight is None else td_error.pow(2) * weight
        out = {"loss_critic": sq.mean(-1).sum(), "q_value": q.detach().mean(),
               "td_error": td_error.detach().abs().max(0).values}
        # counted modulo the delay: compile=true specialises the loss on this integer (dynamo guards
        # on a module's int attributes), so a running count recompiled it on every call until
        # dynamo's recompile limit left it eager; its phase gives policy_delay graphs, once each
        self.calls = (self.calls + 1) % self.policy_delay
        if self.actor_step:
            out["loss_actor"] = -call_frozen(critic, obs, actor.act(obs))[0].mean()
        return out

    def update_targets(self) -> None:
        if self.actor_step:
            polyak_update(self.target_actor, self.policy.actor, self.tau)
            polyak_update(self.target_critic, self.policy.critic, self.tau)

    def get_extra_state(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"]) % self.policy_delay  # checkpoints before the phase held the count


@register("loss", "ddpg")
class DDPGLoss(TD3Loss):
    """DDPG: deterministic policy gradient through one Q network, polyak targets.

    TD3 without its three changes: one critic, no delay, no target smoothing.
    """

    def __init__(self, policy: Policy, gamma: float, tau: Rate = 0.005):
        super().__init__(policy, gamma, tau, policy_delay=1, target_noise=0.0)
        if len(policy.critic.weights[0]) != 1:
            raise ConfigError("DDPG uses one Q network", key="model.num_q", fix="set model.num_q=1")
