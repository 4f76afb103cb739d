"""A2C (Mnih et al. 2016, synchronous variant): policy gradient with GAE advantages,
value loss and entropy bonus, one pass over each batch.

The config (``conf/algo/a2c.yaml``) reuses PPO's pieces (actor-critic model,
GAE hook, on-policy minibatches); only the loss differs.
"""

from __future__ import annotations

from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.errors import ConfigError
from rlrun.modules.models import Models
from rlrun.registry import register


class A2CLoss(nn.Module):
    """``-log pi(a|s) * A + critic_coef * 0.5 (V - target)^2 - entropy_coef * H``.

    Reads ``observation``, ``action``, ``advantage`` and ``value_target``.
    """

    def __init__(self, models: Models, entropy_coef: float = 0.0, critic_coef: float = 0.5,
                 normalize_advantage: bool = False):
        super().__init__()
        self.models = models
        self.entropy_coef, self.critic_coef = entropy_coef, critic_coef
        self.normalize_advantage = normalize_advantage

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"all": list(self.models.parameters())}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        obs, adv = td["observation"], td["advantage"]
        if self.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        dist = self.models.actor.dist(obs)
        entropy = dist.entropy().mean()
        value = self.models.critic(obs)
        return {
            "loss_objective": -(dist.log_prob(td["action"]) * adv).mean(),
            "loss_critic": self.critic_coef * 0.5 * (value - td["value_target"]).pow(2).mean(),
            "loss_entropy": -self.entropy_coef * entropy,
            "entropy": entropy.detach(),
        }


@register("loss", "a2c")
def make_a2c_loss(models: Models, entropy_coef: float = 0.0, critic_coef: float = 0.5,
                  normalize_advantage: bool = False) -> A2CLoss:
    """A2C: advantage policy gradient + critic_coef * value loss - entropy_coef * entropy."""
    if models.critic is None:
        raise ConfigError("A2C needs a value critic", key="model.name", fix="use model=actor_critic")
    return A2CLoss(models, entropy_coef, critic_coef, normalize_advantage)
