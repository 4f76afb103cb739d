"""CNN models for pixel observations: the Nature-DQN trunk, actor-critic and Q-network.

Observations arrive as raw pixels (uint8 0..255 from the Atari env); the trunk
converts them to float and divides by 255 itself, so the collector and the
buffers keep uint8 (a quarter of float32's memory) and the conversion runs on
the model's device after the uint8 batch has been moved there.

``actor_critic_cnn`` shares one trunk between the policy and the value head
(the paper's Table 7 A2C/PPO/IMPALA set-up). The actor and critic keep the MLP
interface (``actor.explore/act/dist``, ``critic(obs) -> V``), so PPO, A2C and
the GAE hook use them unchanged. ``qnet_cnn`` is DQN's Nature network:
``critic(obs) -> [*batch, n_actions]`` Q-values, ``actor`` the greedy policy.
"""

from __future__ import annotations

import math
import weakref

import torch
from torch import Tensor, nn

from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import PositiveInt, register
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import GreedyActor, QNetwork
from rlrun.modules.networks import Actor, ValueCritic


def _orthogonal(layer: nn.Module, gain: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class NatureCNN(nn.Module):
    """Mnih et al. (2015)'s trunk: conv 32x8x8/4, 64x4x4/2, 64x3x3/1, then 512 units, all ReLU.

    Args:
        obs_shape: ``[C, H, W]`` (stacked grayscale) or ``[S, H, W, 3]`` (stacked
            RGB, folded into ``3 S`` channels).
        features: Width of the last (fully connected) layer.
        chunk: Without autograd, batches above this size run in chunks of it,
            so that the GAE hook's whole-batch value pass stays within memory.

    Inputs are raw pixel values (any dtype), with any number of leading batch dims.
    """

    def __init__(self, obs_shape: tuple[int, ...], features: int = 512, chunk: int = 1024):
        super().__init__()
        self.obs_shape, self.chunk, self.out_dim = tuple(obs_shape), chunk, features
        self.rgb = len(obs_shape) == 4
        channels = obs_shape[0] * obs_shape[3] if self.rgb else obs_shape[0]
        gain = math.sqrt(2)  # ReLU gain, as in the A2C/PPO baselines
        self.conv = nn.Sequential(
            _orthogonal(nn.Conv2d(channels, 32, 8, stride=4), gain), nn.ReLU(),
            _orthogonal(nn.Conv2d(32, 64, 4, stride=2), gain), nn.ReLU(),
            _orthogonal(nn.Conv2d(64, 64, 3, stride=1), gain), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():  # 3136 for 84x84 inputs
            flat = self.conv(torch.zeros(1, channels, *obs_shape[1:3])).shape[-1]
        self.fc = nn.Sequential(_orthogonal(nn.Linear(flat, features), gain), nn.ReLU())
        self._cache: tuple | None = None

    def forward(self, obs: Tensor) -> Tensor:
        batch = obs.shape[: obs.ndim - len(self.obs_shape)]
        x = obs.reshape(-1, *self.obs_shape)
        if self.rgb:  # [N, S, H, W, 3] -> [N, 3S, H, W]
            x = x.permute(0, 1, 4, 2, 3).flatten(1, 2)
        if not torch.is_grad_enabled() and x.shape[0] > self.chunk:
            out = torch.cat([self._features(c) for c in x.split(self.chunk)])
        else:
            out = self._features(x)
        return out.reshape(*batch, self.out_dim)

    def _features(self, x: Tensor) -> Tensor:
        # Scaling here, on the device: the uint8 batch is what crossed from host memory.
        # uint8 -> float32 makes a new tensor, which can be scaled in place; never scale the caller's.
        x = x.to(torch.float32).div_(255.0) if x.dtype != torch.float32 else x / 255.0
        return self.fc(self.conv(x))

    def shared(self, obs: Tensor, owner: str) -> Tensor:
        """``forward`` with a one-entry cache between the heads that share this trunk.

        A loss that calls ``actor.dist(obs)`` and then ``critic(obs)`` on the same
        minibatch runs the trunk once (one forward, one backward through it).
        An entry is reused only by the OTHER head, at most once, for the very
        same tensor unmodified, with unchanged parameters and the same autograd
        mode; anything else recomputes.
        """
        if torch.compiler.is_compiling():
            # compile=true: dynamo must not read the cache (it guarded on the weak reference of an
            # earlier, eager call, e.g. the GAE hook's value pass, whose tensor was gone: a guard on
            # None failed the compile) nor ask is_inference() (a graph break, five per PPO loss)
            return self(obs)
        if obs.is_inference():  # acting (inference mode): no version counters, nothing to share
            self._cache = None
            return self(obs)
        key = self._key(obs)
        if self._cache is not None:
            ref, cached_key, cached_owner, out = self._cache
            self._cache = None
            if ref() is obs and cached_key == key and cached_owner != owner:
                return out
        out = self(obs)
        self._cache = (weakref.ref(obs), key, owner, out)
        return out

    def _key(self, obs: Tensor) -> tuple:
        versions = tuple(p._version for p in self.parameters())
        return obs._version, versions, torch.is_grad_enabled()

    def __getstate__(self) -> dict:
        # The cache is transient: weak references do not pickle, and deepcopy (target
        # networks) cannot copy a cached non-leaf tensor.
        return {**self.__dict__, "_cache": None}


class CNNActor(Actor):
    """A Categorical actor over a (possibly shared) ``NatureCNN`` trunk and a linear head."""

    def __init__(self, trunk: NatureCNN, action_dim: int):
        super().__init__(_orthogonal(nn.Linear(trunk.out_dim, action_dim), 0.01), "categorical",
                         action_dim)
        self.trunk = trunk

    def features(self, obs: Tensor) -> Tensor:
        return self.net(self.trunk.shared(obs, "actor"))


class CNNValueCritic(ValueCritic):
    """V(s) from a (possibly shared) ``NatureCNN`` trunk and a linear head."""

    def __init__(self, trunk: NatureCNN):
        super().__init__(_orthogonal(nn.Linear(trunk.out_dim, 1), 1.0))
        self.trunk = trunk

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(self.trunk.shared(obs, "critic")).squeeze(-1)


def _check(spec: EnvSpec, name: str) -> None:
    if not spec.discrete:
        raise ConfigError(f"{name} needs a discrete action space", key="model.name",
                          fix="use an MLP model (actor_critic, actor_twin_q) for continuous control")
    if len(spec.observation_shape) not in (3, 4):
        raise ConfigError(f"{name} needs image observations [C, H, W], got {spec.observation_shape}",
                          key="model.name", fix="use an MLP model (actor_critic, qnet) for flat observations")


@register("model", "actor_critic_cnn")
def actor_critic_cnn(spec: EnvSpec, features: PositiveInt = 512, shared: bool = True) -> Policy:
    """Nature-CNN actor (Categorical) and V critic sharing one trunk, for PPO/A2C on pixels."""
    _check(spec, "actor_critic_cnn")
    trunk = NatureCNN(spec.observation_shape, features)
    critic_trunk = trunk if shared else NatureCNN(spec.observation_shape, features)
    return Policy(CNNActor(trunk, spec.action_dim), CNNValueCritic(critic_trunk))


@register("model", "qnet_cnn")
def qnet_cnn(spec: EnvSpec, features: PositiveInt = 512) -> Policy:
    """Nature-DQN Q-network (``critic(obs) -> [*batch, n_actions]``) with a greedy policy, for DQN."""
    _check(spec, "qnet_cnn")
    trunk = NatureCNN(spec.observation_shape, features)
    # PyTorch's default init for the Q head, as in DQN (no policy-style small gain).
    q = QNetwork(nn.Sequential(trunk, nn.Linear(features, spec.action_dim)))
    return Policy(GreedyActor(q), q)
