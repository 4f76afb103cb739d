"""DQN (Mnih et al. 2015) with the Double-DQN target (van Hasselt et al. 2016) as an option.

Q-learning on replayed transitions with a target network, Huber loss, and
epsilon-greedy exploration (``conf/exploration/epsilon_greedy.yaml``). The
target network is copied every ``hooks.target_update.interval_updates`` steps (``tau: 1``)
or polyak-averaged (``tau < 1``); ``interval_frames`` counts env frames instead, as SB3 and
CleanRL do (a copy then falls between two batches' updates).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import Rate, register
from rlrun.modules.networks import polyak_update, target_copy


@register("loss", "dqn")
class DQNLoss(Loss):
    """DQN / Double DQN: TD loss of ``Q(s, a)`` against ``r + gamma * Q_target(s', a*)``.

    Args:
        policy: ``critic(obs) -> [B, num_actions]`` Q-values (a greedy actor over it).
        gamma: Discount (the run's top-level ``gamma``).
        double: ``a*`` is the online network's argmax (Double DQN), else the target's.
        loss: ``huber`` (smooth L1, as in the Nature paper's error clipping) or ``l2``.
        tau: Target update rate per ``update_targets`` call (1.0: hard copy).
    """

    action_spaces = ("discrete",)
    reads = ("observation", "action", "next.observation", "next.reward", "next.terminated")
    has_targets = True
    learns_from = ("collector", "dataset")  # off-policy: a dataset serves as a fixed replay

    def __init__(self, policy: Policy, gamma: float, double: bool = True, loss: str = "huber",
                 tau: Rate = 1.0):
        super().__init__(policy)
        if loss not in ("huber", "l2"):
            raise ConfigError(f"unknown loss {loss!r}", key="loss.loss", fix="use huber or l2")
        self.gamma, self.double, self.loss, self.tau = gamma, double, loss, tau
        self.target_critic = target_copy(policy.critic)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"critic": list(self.policy.critic.parameters())}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        q_all = self.policy.critic(td["observation"])
        q = q_all.gather(-1, td["action"].long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_obs = td["next", "observation"]
            next_target = self.target_critic(next_obs)
            chooser = self.policy.critic(next_obs) if self.double else next_target
            best = chooser.argmax(-1, keepdim=True)
            not_terminal = (~td["next", "terminated"]).squeeze(-1).float()
            target = td["next", "reward"].squeeze(-1) + self.gamma * not_terminal * (
                next_target.gather(-1, best).squeeze(-1))
        if self.loss == "huber":
            per_sample = nn.functional.smooth_l1_loss(q, target, reduction="none")
        else:
            per_sample = 0.5 * (q - target).pow(2)
        weight = td.get("priority_weight", None)
        if weight is not None:
            per_sample = per_sample * weight
        return {"loss_critic": per_sample.mean(), "q_value": q.detach().mean(),
                "td_error": (q - target).detach().abs()}

    def update_targets(self) -> None:
        polyak_update(self.target_critic, self.policy.critic, self.tau)

