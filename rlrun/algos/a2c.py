"""A2C (Mnih et al. 2016, synchronous variant): policy gradient with GAE advantages,
value loss and entropy bonus, one pass over each batch.

The config (``conf/algo/a2c.yaml``) reuses PPO's pieces (actor-critic model,
GAE hook, on-policy minibatches); only the loss differs. On an agent group
(``conf/algo/maa2c.yaml``: MAA2C) it reads per-agent entries through its key map,
as PPO does for MAPPO.
"""

from __future__ import annotations

from tensordict import TensorDict
from torch import Tensor

from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import NonNegativeFloat, register


@register("loss", "a2c")
class A2CLoss(Loss):
    """A2C: ``-log pi(a|s) * A + critic_coef * 0.5 (V - target)^2 - entropy_coef * H``.

    Reads ``observation``, ``action``, ``advantage`` and ``value_target`` (per agent for
    an agent group: one more batch dim, advantages standardised over all agents).
    """

    on_policy = True
    agent_layouts = ("single", "group")
    reads = ("observation", "action", "advantage", "value_target")

    def __init__(self, policy: Policy, entropy_coef: NonNegativeFloat = 0.0,
                 critic_coef: NonNegativeFloat = 0.5,
                 normalize_advantage: bool = False):
        super().__init__(policy)
        if policy.critic is None:
            raise ConfigError("A2C needs a value critic", key="model.name", fix="use model=actor_critic")
        self.entropy_coef, self.critic_coef = entropy_coef, critic_coef
        self.normalize_advantage = normalize_advantage

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        key = self.keys
        obs, adv = td[key("observation")], td[key("advantage")]
        if self.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        dist = self.policy.actor.dist(obs)
        entropy = dist.entropy().mean()
        value = self.policy.value(obs)
        return {
            "loss_objective": -(dist.log_prob(td[key("action")]) * adv).mean(),
            "loss_critic": self.critic_coef * 0.5 * (value - td[key("value_target")]).pow(2).mean(),
            "loss_entropy": -self.entropy_coef * entropy,
            "entropy": entropy.detach(),
        }

