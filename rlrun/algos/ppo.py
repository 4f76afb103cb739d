"""PPO (Schulman et al. 2017): clipped surrogate objective, value loss, entropy bonus.

The config (``conf/algo/ppo.yaml``) wires it up: GAE recomputed at every epoch
(as the paper's PPO does), the flattened batch iterated in shuffled
minibatches without replacement, one Adam over actor and critic.

MAPPO and IPPO (``conf/algo/mappo.yaml``, ``ippo.yaml``) are this loss on an agent
group: it reads its entries through its key map (``Loss.keys``), which a group
policy places under the group key, and the per-agent ratios, advantages and values
carry one more batch dim, the agents'. Whether the critic is centralised (MAPPO) or
not (IPPO) is the model's (``group_actor_critic``), not the loss's.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import NonNegativeFloat, PositiveFloat, register
from rlrun.distributed.sync import active, global_mean_std


@register("loss", "ppo")
class PPOLoss(Loss):
    """PPO-clip: surrogate objective + critic_coef * value loss - entropy_coef * entropy.

    Reads ``observation``, ``action``, ``sample_log_prob`` (from collection),
    ``advantage`` and ``value_target`` (from GAE), per agent for an agent group.

    Args:
        policy: An ``actor`` and a V ``critic`` (a ``GroupPolicy`` for an agent group:
            each agent's ratio is clipped on its own, Yu et al. 2022).
        clip_epsilon: Ratio clip range.
        entropy_coef: Weight of the entropy bonus.
        critic_coef: Weight of the value loss.
        normalize_advantage: Standardise advantages per minibatch.
        critic_loss: ``"l2"`` (0.5 * squared error) or ``"smooth_l1"``.
    """

    on_policy = True
    agent_layouts = ("single", "group")
    reads = ("observation", "action", "sample_log_prob", "advantage", "value_target")

    def __init__(self, policy: Policy, clip_epsilon: PositiveFloat = 0.2,
                 entropy_coef: NonNegativeFloat = 0.0, critic_coef: NonNegativeFloat = 0.5,
                 normalize_advantage: bool = True,
                 critic_loss: str = "l2"):
        super().__init__(policy)
        if critic_loss not in ("l2", "smooth_l1"):
            raise ConfigError(f"unknown critic_loss {critic_loss!r}", key="loss.critic_loss",
                              fix="use l2 or smooth_l1")
        if policy.critic is None:
            raise ConfigError("PPO needs a value critic", key="model.name", fix="use model=actor_critic")
        outputs = getattr(policy.critic, "out_dim", 1)
        if outputs != 1:
            raise ConfigError(f"the critic has {outputs} outputs per agent, not 1", key="model.critic",
                              fix="build the critic GroupMLP with out_dim=1")
        self.clip_epsilon, self.entropy_coef, self.critic_coef = clip_epsilon, entropy_coef, critic_coef
        self.normalize_advantage, self.critic_loss = normalize_advantage, critic_loss

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        key = self.keys
        obs = td[key("observation")]
        dist = self.policy.actor.dist(obs)
        out = clipped_surrogate(dist.log_prob(td[key("action")]) - td[key("sample_log_prob")],
                                td[key("advantage")], self.clip_epsilon, self.normalize_advantage)
        if self.entropy_coef == 0:  # no bonus: its -0 * gradient adds nothing, so leave it out of the graph
            with torch.no_grad():
                entropy = dist.entropy().mean()
        else:
            entropy = dist.entropy().mean()
        value = self.policy.value(obs)
        if self.critic_loss == "l2":
            value_error = 0.5 * (value - td[key("value_target")]).pow(2).mean()
        else:
            value_error = nn.functional.smooth_l1_loss(value, td[key("value_target")])
        return {
            "loss_objective": out["loss_objective"],
            "loss_critic": self.critic_coef * value_error,
            "loss_entropy": -self.entropy_coef * entropy,
            "entropy": entropy.detach(),
            "approx_kl": out["approx_kl"],
            "clip_fraction": out["clip_fraction"],
        }


def clipped_surrogate(log_ratio: Tensor, adv: Tensor, clip_epsilon: float,
                      normalize_advantage: bool) -> dict[str, Tensor]:
    """PPO's clipped surrogate ``-E[min(r A, clip(r, 1 - eps, 1 + eps) A)]`` over any batch shape.

    Any batch shape: for an agent group the agent dim is one more batch dim.
    Returns ``loss_objective`` and the diagnostics ``approx_kl`` (Schulman's low-variance
    estimator) and ``clip_fraction``.
    """
    ratio = log_ratio.exp()
    if normalize_advantage and active():  # data-parallel (issue 39): the global minibatch's statistics
        mean, std = global_mean_std(adv)
        adv = (adv - mean) / (std + 1e-8)
    elif normalize_advantage and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    clipped = ratio.clamp(1 - clip_epsilon, 1 + clip_epsilon)
    loss_objective = -torch.min(ratio * adv, clipped * adv).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_epsilon).float().mean()
    return {"loss_objective": loss_objective, "approx_kl": approx_kl, "clip_fraction": clip_fraction}

