"""Exploration for deterministic policies: Gaussian, Ornstein-Uhlenbeck, epsilon-greedy.

An exploration component wraps the actor's deterministic action for data
collection only (it is the ``Policy``'s behaviour when set); evaluation calls
``Policy.act`` and so never explores.
Schedules advance per collected frame (the component counts its own calls),
so annealing over 1000 frames means 1000 frames whatever the batch size; the
counter is saved with checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from rlrun.core.errors import ConfigError
from rlrun.core.registry import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, register
from rlrun.core.specs import EnvSpec


class Exploration:
    """Base: a linear epsilon schedule and a frame counter (saved with checkpoints)."""

    def __init__(self, actor, num_envs: int, eps_init: float = 1.0, eps_end: float = 1.0,
                 annealing_frames: int = 0):
        self.actor, self.num_envs = actor, num_envs
        self.eps_init, self.eps_end, self.annealing_frames = eps_init, eps_end, annealing_frames
        self.frames = 0

    @property
    def epsilon(self) -> float:
        if self.annealing_frames <= 0:
            return self.eps_end
        frac = min(self.frames / self.annealing_frames, 1.0)
        return self.eps_init + (self.eps_end - self.eps_init) * frac

    def __call__(self, obs: Tensor) -> dict[str, Tensor]:
        action = self.perturb(self.actor.act(obs))
        self.frames += obs.shape[0]
        return {"action": action}

    def perturb(self, action: Tensor) -> Tensor:
        raise NotImplementedError

    # Noise with per-episode state defines ``on_episode_end(env_index)``, which the collector
    # calls with the sub-envs whose episode ended; None spares every other run that check per step.
    on_episode_end: Callable[[np.ndarray], None] | None = None

    def state_dict(self) -> dict:
        return {"frames": self.frames}

    def load_state_dict(self, state: dict) -> None:
        self.frames = int(state["frames"])


class GaussianNoise(Exploration):
    """``a + eps * sigma * N(0, 1)``, clipped to [-1, 1] (TD3)."""

    def __init__(self, actor, num_envs: int, sigma: float = 0.1, **schedule):
        super().__init__(actor, num_envs, **schedule)
        self.sigma = sigma

    def perturb(self, action: Tensor) -> Tensor:
        return (action + self.epsilon * self.sigma * torch.randn_like(action)).clamp(-1.0, 1.0)


class OrnsteinUhlenbeck(Exploration):
    """Temporally correlated noise ``dx = theta (mu - x) dt + sigma sqrt(dt) dW`` (DDPG).

    One process per sub-env, reset when that sub-env's episode ends; the
    noise is scaled by the annealed epsilon (the paper's Table 8: 1.0 -> 0.1).
    """

    def __init__(self, actor, num_envs: int, action_dim: int, theta: float = 0.15,
                 sigma: float = 0.2, mu: float = 0.0, dt: float = 1.0, **schedule):
        super().__init__(actor, num_envs, **schedule)
        self.theta, self.sigma, self.mu, self.dt = theta, sigma, mu, dt
        self.state = torch.full((num_envs, action_dim), mu)

    def perturb(self, action: Tensor) -> Tensor:
        x = self.state
        x += self.theta * (self.mu - x) * self.dt + self.sigma * self.dt ** 0.5 * torch.randn_like(x)
        return (action + self.epsilon * x.to(action.device)).clamp(-1.0, 1.0)

    def on_episode_end(self, env_index) -> None:
        self.state[torch.as_tensor(env_index)] = self.mu

    def state_dict(self) -> dict:
        return {"frames": self.frames, "state": self.state.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.frames = int(state["frames"])
        self.state.copy_(state["state"])


class EpsilonGreedy(Exploration):
    """A uniformly random action with probability epsilon, annealed linearly (DQN)."""

    def __init__(self, actor, num_envs: int, num_actions: int, **schedule):
        super().__init__(actor, num_envs, **schedule)
        self.num_actions = num_actions

    def perturb(self, action: Tensor) -> Tensor:
        explore = torch.rand(action.shape, device=action.device) < self.epsilon
        random = torch.randint_like(action, self.num_actions)
        return torch.where(explore, random, action)


@register("exploration", "gaussian")
def make_gaussian(actor, spec: EnvSpec, num_envs: int, sigma: NonNegativeFloat = 0.1,
                  eps_init: Fraction = 1.0, eps_end: Fraction = 1.0,
                  annealing_frames: NonNegativeInt = 0) -> GaussianNoise:
    """Gaussian action noise N(0, sigma), optionally scaled by an annealed epsilon."""
    _continuous(spec, "gaussian")
    return GaussianNoise(actor, num_envs, sigma, eps_init=eps_init, eps_end=eps_end,
                         annealing_frames=annealing_frames)


@register("exploration", "ornstein_uhlenbeck")
def make_ou(actor, spec: EnvSpec, num_envs: int, theta: NonNegativeFloat = 0.15,
            sigma: NonNegativeFloat = 0.2, mu: float = 0.0, dt: PositiveFloat = 1.0,
            eps_init: Fraction = 1.0, eps_end: Fraction = 0.1,
            annealing_frames: NonNegativeInt = 1000) -> OrnsteinUhlenbeck:
    """Ornstein-Uhlenbeck noise per sub-env, scaled by an annealed epsilon (DDPG)."""
    _continuous(spec, "ornstein_uhlenbeck")
    return OrnsteinUhlenbeck(actor, num_envs, spec.action_dim, theta, sigma, mu, dt,
                             eps_init=eps_init, eps_end=eps_end, annealing_frames=annealing_frames)


@register("exploration", "epsilon_greedy")
def make_epsilon_greedy(actor, spec: EnvSpec, num_envs: int, eps_init: Fraction = 1.0,
                        eps_end: Fraction = 0.05, annealing_frames: NonNegativeInt = 10000) -> EpsilonGreedy:
    """Random actions with a linearly annealed probability (discrete actions)."""
    if not spec.discrete:
        raise ConfigError("epsilon_greedy needs discrete actions", key="exploration.name",
                          fix="use exploration=gaussian or ornstein_uhlenbeck for continuous actions")
    return EpsilonGreedy(actor, num_envs, spec.action_dim, eps_init=eps_init, eps_end=eps_end,
                         annealing_frames=annealing_frames)


def _continuous(spec: EnvSpec, name: str) -> None:
    if spec.discrete:
        raise ConfigError(f"{name} noise needs continuous actions", key="exploration.name",
                          fix="use exploration=epsilon_greedy for discrete actions")
