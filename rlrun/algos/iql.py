"""IQL (Kostrikov, Nair & Levine 2022, "Offline RL with implicit Q-learning").

Three losses, one backward pass:

- value: expectile regression of V(s) toward min_k Q_target_k(s, a) on dataset
  actions, ``|tau - 1(u < 0)| u^2`` with ``u = Q - V``;
- critic: each Q_k(s, a) toward ``r + gamma (1 - terminated) V(s')`` (V never looks at
  actions outside the dataset; truncated steps bootstrap);
- actor: advantage-weighted regression, ``-exp(beta (Q_target - V)) log pi(a | s)``
  with the weight clipped at 100 as in the authors' implementation.

Each loss reaches only its own network: targets are computed without gradients and
the actor's weights are detached. The authors update V, then the actor and Q with the
new V; here all three read the same V, as single-pass implementations do.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import PositiveFloat, Range, Rate, register
from rlrun.core.specs import EnvSpec
from rlrun.modules.networks import Activation, Hidden, ValueCritic, mlp, polyak_update, target_copy


def expectile_loss(diff: Tensor, expectile: float) -> Tensor:
    """Asymmetric squared loss ``|tau - 1(diff < 0)| diff^2`` (elementwise)."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return weight * diff.pow(2)


def dataset_log_prob(actor: nn.Module, obs: Tensor, action: Tensor, eps: float = 1e-6) -> Tensor:
    """``log pi(action | obs)`` of given (dataset) actions, for ``normal`` and ``tanh_normal`` heads.

    For ``tanh_normal`` the action is mapped back through atanh (clipped ``eps`` inside
    the bounds, where dataset actions at +-1 would be infinitely far) and the tanh
    Jacobian is subtracted, as in ``Actor.sample``.
    """
    d = actor.dist(obs)
    if actor.head != "tanh_normal":
        return d.log_prob(action)
    a = action.clamp(-1.0 + eps, 1.0 - eps)
    u = torch.atanh(a)
    correction = (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
    return d.log_prob(u) - correction


@register("loss", "iql")
class IQLLoss(Loss):
    """IQL's value, critic and actor losses.

    The state-value network V(s) is the loss's own (acting never needs it); it shares
    the policy's observation normaliser.

    Args:
        policy: An ``actor`` with a ``normal`` or ``tanh_normal`` head (weighted
            log-likelihood) or ``deterministic`` (weighted squared error), and a
            ``TwinQCritic``, whose polyak copy is the target.
        spec: The env's spec (V's input size).
        gamma: Discount (the run's top-level ``gamma``).
        value_hidden: V's hidden layers (paper: 256, 256).
        activation: V's activation.
        tau: Polyak rate of the target critic.
        expectile: Expectile of the value loss (paper: 0.7 MuJoCo, 0.9 AntMaze).
        beta: Inverse temperature of the advantage weights (paper: 3 MuJoCo, 10 AntMaze).
        max_weight: Clip of ``exp(beta * advantage)`` (100 in the authors' code).
    """

    action_spaces = ("continuous",)
    reads = ("observation", "action", "next.observation", "next.reward", "next.terminated")
    has_targets = True
    learns_from = ("dataset",)

    def __init__(self, policy: Policy, spec: EnvSpec, gamma: float, value_hidden: Hidden = (256, 256),
                 activation: Activation = "relu", tau: Rate = 0.005, expectile: Annotated[float, Range(gt=0,
                 lt=1)] = 0.7,
                 beta: PositiveFloat = 3.0, max_weight: PositiveFloat = 100.0):
        super().__init__(policy)
        if not 0.0 < expectile < 1.0:
            raise ConfigError(f"must be in (0, 1), got {expectile}", key="loss.expectile",
                              fix="e.g. 0.7 (MuJoCo) or 0.9 (AntMaze)")
        self.value = ValueCritic(mlp(spec.observation_shape[0], list(value_hidden), 1, activation),
                                 policy.normalizer)
        self.gamma, self.tau = gamma, tau
        self.expectile, self.beta, self.max_weight = expectile, beta, max_weight
        self.target_critic = target_copy(policy.critic)

    @property
    def actor(self) -> nn.Module:
        return self.policy.actor

    @property
    def critic(self) -> nn.Module:
        return self.policy.critic

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.actor.parameters()), "critic": list(self.critic.parameters()),
                "value": list(self.value.net.parameters())}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        obs, action = td["observation"], td["action"]
        with torch.no_grad():
            target_q = self.target_critic(obs, action).min(0).values
            next_v = self.value(td["next", "observation"])
            not_terminal = (~td["next", "terminated"]).squeeze(-1).float()
            q_target = td["next", "reward"].squeeze(-1) + self.gamma * not_terminal * next_v

        v = self.value(obs)
        loss_value = expectile_loss(target_q - v, self.expectile).mean()

        q = self.critic(obs, action)
        td_error = q - q_target
        loss_critic = td_error.pow(2).mean(-1).sum()

        advantage = (target_q - v).detach()
        weight = torch.exp(self.beta * advantage).clamp_max(self.max_weight)
        if self.actor.head == "deterministic":
            per_sample = -(self.actor.act(obs) - action).pow(2).sum(-1)
        else:
            per_sample = dataset_log_prob(self.actor, obs, action)
        loss_actor = -(weight * per_sample).mean()
        return {
            "loss_value": loss_value,
            "loss_critic": loss_critic,
            "loss_actor": loss_actor,
            "q_value": q.detach().mean(),
            "value": v.detach().mean(),
            "advantage": advantage.mean(),
            "awr_weight": weight.mean(),
            "td_error": td_error.detach().abs().max(0).values,
        }

    def update_targets(self) -> None:
        polyak_update(self.target_critic, self.critic, self.tau)
