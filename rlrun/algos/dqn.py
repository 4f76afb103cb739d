"""DQN (Mnih et al. 2015) with the Double-DQN target (van Hasselt et al. 2016) as an option.

Q-learning on replayed transitions with a target network, Huber loss, and
epsilon-greedy exploration (``conf/exploration/epsilon_greedy.yaml``). The
target network is copied every ``hooks.target_update.every`` steps (``tau: 1``)
or polyak-averaged (``tau < 1``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.errors import ConfigError
from rlrun.modules.models import Models
from rlrun.modules.networks import polyak_update, target_copy
from rlrun.registry import register


class DQNLoss(nn.Module):
    """TD loss of ``Q(s, a)`` against ``r + gamma * Q_target(s', a*)``.

    Args:
        models: ``critic(obs) -> [B, num_actions]`` Q-values.
        gamma: Discount.
        double: ``a*`` is the online network's argmax (Double DQN), else the target's.
        loss: ``huber`` (smooth L1, as in the Nature paper's error clipping) or ``l2``.
        tau: Target update rate per ``update_targets`` call (1.0: hard copy).
    """

    def __init__(self, models: Models, gamma: float = 0.99, double: bool = True,
                 loss: str = "huber", tau: float = 1.0):
        super().__init__()
        self.models, self.gamma, self.double, self.loss, self.tau = models, gamma, double, loss, tau
        self.target_critic = target_copy(models.critic)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"critic": list(self.models.critic.parameters())}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        q_all = self.models.critic(td["observation"])
        q = q_all.gather(-1, td["action"].long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_obs = td["next", "observation"]
            next_target = self.target_critic(next_obs)
            chooser = self.models.critic(next_obs) if self.double else next_target
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
        polyak_update(self.target_critic, self.models.critic, self.tau)


@register("loss", "dqn")
def make_dqn_loss(models: Models, gamma: float = 0.99, double: bool = True, loss: str = "huber",
                  tau: float = 1.0) -> DQNLoss:
    """DQN / Double DQN TD loss with a target network (Huber or L2)."""
    if loss not in ("huber", "l2"):
        raise ConfigError(f"unknown loss {loss!r}", key="loss.loss", fix="use huber or l2")
    return DQNLoss(models, gamma, double, loss, tau)
