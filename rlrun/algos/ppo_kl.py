"""PPO with an adaptive KL penalty (Schulman et al. 2017, section 4), the clip-free variant.

Maximises ``E[r(θ) A] - β KL(π_old || π_θ)``; after each batch β doubles when
the measured KL exceeds 1.5 x ``kl_target`` and halves below ``kl_target`` / 1.5.
The KL is estimated from the collected actions with the positive, unbiased
``(r - 1) - log r`` estimator (``r = π_θ(a|s) / π_old(a|s)``, ``a ~ π_old``):
the batch stores only the old log-probability of the action taken, not the old
distribution. Everything else (GAE each epoch, minibatches, the actor-critic
model) is PPO's; see ``conf/algo/ppo_kl.yaml``.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.policy import Policy
from rlrun.core.registry import NonNegativeFloat, PositiveFloat, register
from rlrun.trainer.hooks import Hook


@register("loss", "ppo_kl")
class PPOKLLoss(Loss):
    """PPO's KL-penalised surrogate + critic_coef * value loss - entropy_coef * entropy.

    Args:
        policy: An ``actor`` and a V ``critic``.
        kl_target: The KL per update that the penalty coefficient is adapted toward.
        init_kl_coef: Initial penalty coefficient β.
        entropy_coef: Weight of the entropy bonus.
        critic_coef: Weight of the value loss (0.5 * squared error).
        normalize_advantage: Standardise advantages per minibatch.
    """

    on_policy = True
    reads = ("observation", "action", "sample_log_prob", "advantage", "value_target")

    def __init__(self, policy: Policy, kl_target: PositiveFloat = 0.01, init_kl_coef: NonNegativeFloat = 1.0,
                 entropy_coef: NonNegativeFloat = 0.0, critic_coef: NonNegativeFloat = 0.5,
                 normalize_advantage: bool = True):
        super().__init__(policy)
        self.kl_target = kl_target
        # a buffer: saved with the loss's weights, on their device, and a tensor a compiled loss
        # reads (a Python float would be baked into the graph and recompiled at each change)
        self.register_buffer("kl_coef", torch.tensor(float(init_kl_coef)))
        self.register_load_state_dict_pre_hook(_kl_coef_from_extra_state)
        self.entropy_coef, self.critic_coef = entropy_coef, critic_coef
        self.normalize_advantage = normalize_advantage

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        dist = self.policy.actor.dist(td["observation"])
        log_ratio = dist.log_prob(td["action"]) - td["sample_log_prob"]
        ratio = log_ratio.exp()
        adv = td["advantage"]
        if self.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        kl = ((ratio - 1) - log_ratio).mean()
        entropy = dist.entropy().mean()
        value = self.policy.critic(td["observation"])
        return {
            "loss_objective": -(ratio * adv).mean(),
            "loss_kl": self.kl_coef * kl,
            "loss_critic": self.critic_coef * 0.5 * (value - td["value_target"]).pow(2).mean(),
            "loss_entropy": -self.entropy_coef * entropy,
            "kl": kl.detach(),
            "kl_coef": self.kl_coef.detach().clone(),  # adapt() changes the buffer in place
            "entropy": entropy.detach(),
        }

    def adapt(self, kl: float) -> None:
        """The paper's rule: double β above 1.5 x the target KL, halve it below the target / 1.5."""
        if kl > 1.5 * self.kl_target:
            self.kl_coef.mul_(2.0)
        elif kl < self.kl_target / 1.5:
            self.kl_coef.div_(2.0)


def _kl_coef_from_extra_state(module: nn.Module, state: dict, prefix: str, *args: Any) -> None:
    """Checkpoints from before the buffer kept β as the loss's extra state: read it from there."""
    old = state.pop(f"{prefix}_extra_state", None)
    if isinstance(old, dict) and "kl_coef" in old and f"{prefix}kl_coef" not in state:
        state[f"{prefix}kl_coef"] = torch.tensor(float(old["kl_coef"]))


@register("hook", "kl_coef")
class AdaptKLCoef(Hook):
    """After each batch, adapts the loss's KL coefficient to the mean KL of the batch's last epoch."""

    def __init__(self):
        self._kl: list[Tensor] = []

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        self._kl = []  # the paper measures the KL after the last epoch's updates

    def post_loss(self, trainer, sub: TensorDict, losses: dict) -> None:
        self._kl.append(losses["kl"])

    def post_steps(self, trainer) -> None:
        if self._kl:
            trainer.loss.adapt(float(torch.stack(self._kl).mean()))  # one sync per batch
        self._kl = []
