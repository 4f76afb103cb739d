"""What an env tells the networks, buffers, losses and evaluator about its data: one spec type.

A single agent is the one-group case. ``EnvSpec.group`` is None for a single-agent
env, whose per-step entries sit at the batch's root (``observation``,
``("next", "reward")``); for an agent group it is the group's key (``GROUP``), under
which the per-agent entries sit with an agent dim after the batch dims
(``("agents", "observation") [*B, n_agents, obs]``). Entries the group shares stay at
the root: the episode-end flags (VMAS ends an episode for every agent at once) and the
global state (QMIX's mixer input).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROUP = "agents"  # the key of the one agent group (TorchRL's VMAS layout); the only spelling of it

# Entries that stay at the root for an agent group: every agent shares them.
SHARED_ENTRIES: frozenset[str] = frozenset({"terminated", "truncated", "done", "state", "traj_ids"})


@dataclass(frozen=True)
class EnvSpec:
    """What networks and buffers need to know about an env (one agent, or one group of alike agents).

    Attributes:
        observation_shape: Shape of one (agent's) observation.
        observation_dtype: Numpy dtype of observations (float32 or uint8).
        discrete: True for a Discrete action space (an index per agent).
        action_dim: Number of actions (discrete) or action vector size (per agent).
        action_low, action_high: Bounds the policy acts in (after rescaling).
        group: None for a single agent; else the key its agents' entries live under.
        n_agents: Agents in the group (1 for a single agent).
        state_shape: Shape of the group's global state (QMIX's mixer input); () if none.
    """

    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    discrete: bool
    action_dim: int
    action_low: float = -1.0
    action_high: float = 1.0
    group: str | None = None
    n_agents: int = 1
    state_shape: tuple[int, ...] = ()

    @property
    def is_group(self) -> bool:
        """True for an agent group (entries under ``group`` with an agent dim)."""
        return self.group is not None


def entry_key(name: str, group: str | None) -> str | tuple[str, ...]:
    """Where the entry ``name`` (dotted: ``"next.reward"``) lives for data of ``group``.

    ``entry_key("next.reward", "agents") == ("next", "agents", "reward")``; shared entries
    (``SHARED_ENTRIES``) and every entry of a single agent (``group=None``) stay where
    the name says: ``entry_key("next.terminated", "agents") == ("next", "terminated")``.
    """
    parts = tuple(name.split("."))
    if group is None or parts[-1] in SHARED_ENTRIES or parts[0] == group or parts[0] == "collector":
        return parts if len(parts) > 1 else parts[0]
    at = 1 if parts[0] == "next" else 0
    return (*parts[:at], group, *parts[at:])
