"""IMPALA (Espeholt et al. 2018): an actor-critic learner fed by asynchronous actors, with
V-trace correcting for the actors' policy lag.

Two components: the ``vtrace`` value-estimation hook (beside GAE) writes the
V-trace targets and policy-gradient advantages from the behaviour policy's
log-probabilities that the collector recorded (``sample_log_prob``) and the
learner's current policy; the ``impala`` loss is the actor-critic loss of the
paper's Table 7 (critic 0.5, entropy 0.01) on them. ``conf/algo/impala.yaml``
wires both to the ``multi_async`` collector, RMSprop and gradient clipping.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import Fraction, NonNegativeFloat, PositiveFloat, register
from rlrun.objectives.gae import warm_up
from rlrun.objectives.vtrace import vtrace
from rlrun.trainer.hooks import IO, Hook


@register("loss", "impala")
class IMPALALoss(Loss):
    """``-rho_s log pi(a_s|x_s) (r_s + gamma v_{s+1} - V(x_s)) + critic_coef * 0.5 (V(x_s) - v_s)^2
    - entropy_coef * H``, with V-trace's ``advantage`` and ``value_target`` (``hooks.vtrace``).

    The clipped importance weight is already in the advantage; averages are over the batch
    (the paper sums, which only rescales the learning rate).

    Args:
        policy: An ``actor`` and a V ``critic``.
        entropy_coef: Weight of the entropy bonus.
        critic_coef: Weight of the value loss.
    """

    on_policy = True  # each batch is learnt from once, as it arrives; V-trace handles the lag
    reads = ("observation", "action", "advantage", "value_target")

    def __init__(self, policy: Policy, entropy_coef: NonNegativeFloat = 0.01,
                 critic_coef: NonNegativeFloat = 0.5):
        super().__init__(policy)
        if policy.critic is None:
            raise ConfigError("IMPALA needs a value critic", key="model.name",
                              fix="use model=actor_critic or model=actor_critic_cnn")
        self.entropy_coef, self.critic_coef = entropy_coef, critic_coef

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        obs = td["observation"]
        dist = self.policy.actor.dist(obs)
        entropy = dist.entropy().mean()
        value = self.policy.critic(obs)
        return {
            "loss_objective": -(dist.log_prob(td["action"]) * td["advantage"]).mean(),
            "loss_critic": self.critic_coef * 0.5 * (value - td["value_target"]).pow(2).mean(),
            "loss_entropy": -self.entropy_coef * entropy,
            "entropy": entropy.detach(),
        }


@register("hook", "vtrace")
class VTrace(Hook):
    """Writes V-trace's ``value_target`` (v_s) and ``advantage`` into the batch, at ``pre_epoch``.

    The importance weights are ``pi(a|x) / mu(a|x)``: the learner's current actor
    against the behaviour log-probabilities the collector recorded. Bootstrapping
    stops at termination only; a truncated step bootstraps from V of its true final
    observation, and the trace is cut at every episode end (see
    :func:`rlrun.objectives.vtrace.vtrace`).

    Args:
        gamma: Discount (the run's top-level ``gamma``).
        rho_bar: Clip of the importance weights in the TD errors and advantages.
        c_bar: Clip of the trace coefficients.
        lmbda: Extra trace discount (1 in the paper).
    """

    def __init__(self, gamma: float, rho_bar: PositiveFloat = 1.0, c_bar: PositiveFloat = 1.0,
                 lmbda: Fraction = 1.0):
        if rho_bar < c_bar:
            raise ConfigError(f"V-trace needs rho_bar >= c_bar, got {rho_bar} < {c_bar}",
                              key="hooks.vtrace.rho_bar", fix="raise rho_bar or lower c_bar")
        self.gamma, self.rho_bar, self.c_bar, self.lmbda = gamma, rho_bar, c_bar, lmbda
        warm_up()  # loads numba at build time, not in the first batch

    def io(self) -> IO:
        return {"pre_epoch": (("observation", "action", "sample_log_prob", "next.observation", "next.reward",
                               "next.terminated", "next.done"), ("advantage", "value_target"))}

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        policy = trainer.policy
        with torch.no_grad():
            log_pi = policy.actor.dist(batch["observation"]).log_prob(batch["action"])
            value = policy.value(batch["observation"])
            next_value = policy.value(batch["next", "observation"])
        adv, target = self.estimate(log_pi - batch["sample_log_prob"], batch["next", "reward"].squeeze(-1),
                                    value, next_value, batch["next", "terminated"].squeeze(-1),
                                    batch["next", "done"].squeeze(-1))
        batch.set("advantage", adv)
        batch.set("value_target", target)

    def estimate(self, log_rho: Tensor, reward: Tensor, value: Tensor, next_value: Tensor,
                 terminated: Tensor, done: Tensor) -> tuple[Tensor, Tensor]:
        """``(advantage, value_target)`` for ``[*batch, T]`` tensors."""
        vs, adv = vtrace(log_rho, reward, value, next_value, terminated, done, self.gamma,
                         self.rho_bar, self.c_bar, self.lmbda)
        return adv, vs
