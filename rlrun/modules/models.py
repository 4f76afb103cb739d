"""Model factories: the networks an algorithm needs, built from the env's spec, as a ``Policy``."""

from __future__ import annotations

from torch import nn

from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import PositiveInt, register
from rlrun.core.specs import EnvSpec
from rlrun.modules.networks import (
    Activation,
    Actor,
    Hidden,
    ObservationNormalizer,
    TwinQCritic,
    ValueCritic,
    mlp,
)


def _obs_dim(spec: EnvSpec) -> int:
    if len(spec.observation_shape) != 1:
        raise ConfigError(f"MLP models need flat observations, got {spec.observation_shape}",
                          key="model.name", fix="use a CNN model for image observations")
    return spec.observation_shape[0]


@register("model", "actor_critic")
def actor_critic(spec: EnvSpec, hidden: Hidden = (64, 64), critic_hidden: Hidden | None = None,
                 activation: Activation = "tanh", normalize_observations: bool = False,
                 init_log_std: float = 0.0, orthogonal_init: bool = True) -> Policy:
    """MLP actor (Categorical or state-independent Normal) and V critic, for PPO/A2C."""
    obs_dim = _obs_dim(spec)
    norm = ObservationNormalizer(spec.observation_shape) if normalize_observations else None
    head = "categorical" if spec.discrete else "normal"
    actor = Actor(mlp(obs_dim, list(hidden), spec.action_dim, activation, 0.01, orthogonal_init),
                  head, spec.action_dim, norm, init_log_std)
    critic = ValueCritic(mlp(obs_dim, list(critic_hidden or hidden), 1, activation, 1.0,
                             orthogonal_init), norm)
    return Policy(actor, critic, norm)


@register("model", "actor_twin_q")
def actor_twin_q(spec: EnvSpec, hidden: Hidden = (256, 256), critic_hidden: Hidden | None = None,
                 activation: Activation = "relu", head: str = "tanh_normal",
                 normalize_observations: bool = False, num_q: PositiveInt = 2) -> Policy:
    """MLP actor (TanhNormal or deterministic) and twin Q critic, for SAC/TD3/DDPG (num_q=1)."""
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
    critic = TwinQCritic(obs_dim, spec.action_dim, list(critic_hidden or hidden), activation, norm,
                         num_q)
    return Policy(actor, critic, norm)


class GreedyActor(nn.Module):
    """Acts greedily on a Q-network: ``act(obs) = argmax_a Q(obs, a)``."""

    head = "greedy"

    def __init__(self, qnet: nn.Module):
        super().__init__()
        self.qnet = [qnet]  # a list, so the Q-network's parameters are registered once (as critic)

    def act(self, obs):
        return self.qnet[0](obs).argmax(-1)

    explore = None  # exploration comes from an exploration component (epsilon-greedy)


class QNetwork(nn.Module):
    """``Q(s, .)`` for discrete actions: an MLP from observations to one value per action."""

    def __init__(self, net: nn.Module, normalizer: ObservationNormalizer | None = None):
        super().__init__()
        self.net, self.normalizer = net, normalizer

    def forward(self, obs):
        obs = obs.float()
        return self.net(self.normalizer(obs) if self.normalizer is not None else obs)


@register("model", "qnet")
def qnet(spec: EnvSpec, hidden: Hidden = (120, 84), activation: Activation = "relu",
         normalize_observations: bool = False) -> Policy:
    """MLP Q-network over discrete actions with a greedy policy, for DQN."""
    if not spec.discrete:
        raise ConfigError("qnet needs a discrete action space", key="model.name",
                          fix="use a continuous-action algorithm (sac, td3, ddpg) for this env")
    norm = ObservationNormalizer(spec.observation_shape) if normalize_observations else None
    q = QNetwork(mlp(_obs_dim(spec), list(hidden), spec.action_dim, activation), norm)
    return Policy(GreedyActor(q), q, norm)
