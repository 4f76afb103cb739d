"""Model factories: the networks an algorithm needs, built from the env's spec."""

from __future__ import annotations

from torch import nn

from rlrun.envs.gym import EnvSpec
from rlrun.errors import ConfigError
from rlrun.modules.networks import (
    Actor,
    ObservationNormalizer,
    TwinQCritic,
    ValueCritic,
    mlp,
)
from rlrun.registry import register


class Models(nn.Module):
    """The networks of one agent. ``actor`` acts; critics are optional.

    Attributes:
        actor: The policy.
        critic: A ``ValueCritic`` (on-policy) or ``TwinQCritic`` (off-policy), or None.
        normalizer: The shared observation normaliser, or None.
    """

    def __init__(self, actor: Actor, critic: nn.Module | None = None,
                 normalizer: ObservationNormalizer | None = None):
        super().__init__()
        self.actor, self.critic, self.normalizer = actor, critic, normalizer


def _obs_dim(spec: EnvSpec) -> int:
    if len(spec.observation_shape) != 1:
        raise ConfigError(f"MLP models need flat observations, got {spec.observation_shape}",
                          key="model.name", fix="use a CNN model for image observations")
    return spec.observation_shape[0]


@register("model", "actor_critic")
def actor_critic(spec: EnvSpec, hidden: list[int] = (64, 64), critic_hidden: list[int] | None = None,
                 activation: str = "tanh", normalize_observations: bool = False,
                 init_log_std: float = 0.0, orthogonal_init: bool = True) -> Models:
    """MLP actor (Categorical or state-independent Normal) and V critic, for PPO/A2C."""
    obs_dim = _obs_dim(spec)
    norm = ObservationNormalizer(spec.observation_shape) if normalize_observations else None
    head = "categorical" if spec.discrete else "normal"
    actor = Actor(mlp(obs_dim, list(hidden), spec.action_dim, activation, 0.01, orthogonal_init),
                  head, spec.action_dim, norm, init_log_std)
    critic = ValueCritic(mlp(obs_dim, list(critic_hidden or hidden), 1, activation, 1.0,
                             orthogonal_init), norm)
    return Models(actor, critic, norm)


@register("model", "actor_twin_q")
def actor_twin_q(spec: EnvSpec, hidden: list[int] = (256, 256), critic_hidden: list[int] | None = None,
                 activation: str = "relu", head: str = "tanh_normal",
                 normalize_observations: bool = False) -> Models:
    """MLP actor (TanhNormal or deterministic) and twin Q critic, for SAC/TD3/DDPG."""
    if spec.discrete:
        raise ConfigError("actor_twin_q needs a continuous action space", key="model.name",
                          fix="use a discrete-action algorithm (ppo, dqn) for this env")
    if head not in ("tanh_normal", "deterministic"):
        raise ConfigError(f"unknown head {head!r}", key="model.head",
                          fix="use tanh_normal or deterministic")
    obs_dim = _obs_dim(spec)
    norm = ObservationNormalizer(spec.observation_shape) if normalize_observations else None
    out = 2 * spec.action_dim if head == "tanh_normal" else spec.action_dim
    actor = Actor(mlp(obs_dim, list(hidden), out, activation), head, spec.action_dim, norm)
    critic = TwinQCritic(obs_dim, spec.action_dim, list(critic_hidden or hidden), activation, norm)
    return Models(actor, critic, norm)
