"""SAC (Haarnoja et al. 2018, "SAC: algorithms and applications"): twin Q with
target networks updated by polyak averaging, tanh-Gaussian actor, learned
temperature with target entropy -|A|.

One backward pass serves all three losses; the actor's loss evaluates the
critic with its parameters frozen so that only the actor's loss reaches the
actor and only the TD loss reaches the critic.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.policy import Policy
from rlrun.core.registry import PositiveFloat, Rate, register
from rlrun.core.specs import EnvSpec
from rlrun.modules.networks import call_frozen, polyak_update, target_copy


@register("loss", "sac")
class SACLoss(Loss):
    """SAC: twin-Q TD loss, reparameterised actor loss, learned temperature.

    Args:
        policy: A tanh_normal ``actor`` and a ``TwinQCritic``.
        spec: The env's spec (the default target entropy is ``-action_dim``).
        gamma: Discount (the run's top-level ``gamma``).
        tau: Polyak rate of the target critic (paper's 0.995 "polyak" is 1 - tau).
        init_alpha: Initial temperature.
        target_entropy: Target policy entropy; ``None`` means ``-action_dim``.
        learn_alpha: Learn the temperature (else fixed at ``init_alpha``).
    """

    action_spaces = ("continuous",)
    reads = ("observation", "action", "next.observation", "next.reward", "next.terminated")
    has_targets = True
    learns_from = ("collector", "dataset")  # off-policy: a dataset serves as a fixed replay

    def __init__(self, policy: Policy, spec: EnvSpec, gamma: float, tau: Rate = 0.005,
                 init_alpha: PositiveFloat = 1.0, target_entropy: float | None = None,
                 learn_alpha: bool = True):
        super().__init__(policy)
        self.gamma, self.tau = gamma, tau
        self.target_critic = target_copy(policy.critic)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)), requires_grad=learn_alpha)
        self.target_entropy = -float(spec.action_dim) if target_entropy is None else target_entropy

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups = {"actor": list(self.policy.actor.parameters()),
                  "critic": list(self.policy.critic.parameters())}
        if self.log_alpha.requires_grad:
            groups["alpha"] = [self.log_alpha]
        return groups

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        actor, critic = self.policy.actor, self.policy.critic
        obs, action = td["observation"], td["action"]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_obs = td["next", "observation"]
            next_action, next_log_prob = actor.sample(next_obs)
            next_q = self.target_critic(next_obs, next_action).min(0).values
            not_terminal = (~td["next", "terminated"]).squeeze(-1).float()
            target = td["next", "reward"].squeeze(-1) + self.gamma * not_terminal * (
                next_q - alpha * next_log_prob)
        q = critic(obs, action)
        td_error = q - target
        weight = td.get("priority_weight", None)
        sq = td_error.pow(2) if weight is None else td_error.pow(2) * weight
        loss_critic = 0.5 * sq.mean(-1).sum()

        new_action, log_prob = actor.sample(obs)
        q_new = call_frozen(critic, obs, new_action).min(0).values
        loss_actor = (alpha * log_prob - q_new).mean()
        loss_alpha = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        return {
            "loss_critic": loss_critic,
            "loss_actor": loss_actor,
            "loss_alpha": loss_alpha,
            "alpha": alpha,
            "entropy": -log_prob.detach().mean(),
            "q_value": q.detach().mean(),
            "td_error": td_error.detach().abs().max(0).values,
        }

    def update_targets(self) -> None:
        polyak_update(self.target_critic, self.policy.critic, self.tau)

