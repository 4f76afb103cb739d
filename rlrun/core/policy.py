"""The policy component: an agent's networks, its observation normaliser and how it acts.

Losses, hooks, evaluation and checkpoints all hold the same ``Policy`` by
reference; nothing reaches through the loss to find the actor or the critic.

Examples:
    >>> import torch
    >>> from rlrun.core.specs import EnvSpec
    >>> from rlrun.modules.models import actor_critic
    >>> policy = actor_critic(EnvSpec((4,), "float32", True, 2))
    >>> policy.act(torch.zeros(3, 4)).shape            # deterministic: the mode
    torch.Size([3])
    >>> sorted(policy.explore(torch.zeros(3, 4)))      # exploring, with what the loss needs
    ['action', 'sample_log_prob']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn


class Policy(nn.Module):
    """An agent: ``actor`` acts, ``critic`` (optional) values, ``normalizer`` is shared by both.

    Args:
        actor: Has ``act(obs)`` (deterministic) and ``explore`` (``obs -> dict`` of the
            action and any extras such as ``sample_log_prob``, or None when the actor
            is deterministic and an exploration component supplies the noise).
        critic: A ``ValueCritic`` (V), a ``TwinQCritic`` (Q(s, a)) or a Q-network, or None.
        normalizer: The observation normaliser the networks apply, or None.

    Attributes:
        exploration: The exploration component (Gaussian, OU, epsilon-greedy) used for
            collection when the actor does not explore by itself; set by the builder.
    """

    group: str | None = None  # the agent group its batch keys live under (None: a single agent, the root)

    def __init__(self, actor: nn.Module, critic: nn.Module | None = None,
                 normalizer: nn.Module | None = None):
        super().__init__()
        self.actor, self.critic, self.normalizer = actor, critic, normalizer
        self.exploration: Any = None  # not a submodule: it has no parameters, only a schedule

    @property
    def head(self) -> str:
        """The actor's output head (categorical, normal, tanh_normal, deterministic, greedy)."""
        return self.actor.head

    def act(self, obs: Tensor) -> Tensor:
        """The deterministic action (mode, mean or argmax): evaluation, export, ``load``."""
        return self.actor.act(obs)

    def explore(self, obs: Tensor) -> dict[str, Tensor]:
        """The behaviour policy's action and extras, for collection."""
        return self.behaviour(explore=True)(obs)

    def behaviour(self, explore: bool = True) -> Callable[[Tensor], dict[str, Tensor]]:
        """The acting function, resolved once so that the per-step call has no dispatch.

        Args:
            explore: Exploration noise or sampling (training); False: the deterministic action.
        """
        if explore and self.exploration is not None:
            return self.exploration
        if explore and self.actor.explore is not None:
            return self.actor.explore
        act = self.actor.act
        return lambda obs: {"action": act(obs)}

    def behaviour_keys(self, explore: bool = True) -> set[str]:
        """The keys ``behaviour(explore)`` writes into each step (e.g. ``sample_log_prob``)."""
        if explore and self.exploration is None and self.actor.explore is not None:
            return set(self.actor.explore_keys)
        return {"action"}

    def value(self, obs: Tensor) -> Tensor:
        """V(s) from the value critic (GAE, V-trace)."""
        if self.critic is None:
            raise TypeError("this policy has no value critic")
        return self.critic(obs)
