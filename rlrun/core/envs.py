"""The one protocol every batched env implements: gymnasium vector envs, EnvPool and VMAS groups.

A ``VecEnv`` has ``num_envs``, an ``EnvSpec`` (``spec.group`` says whether per-step
entries carry an agent dim), ``reset(seed)`` returning the first observations, and
``step(action)`` returning one ``EnvStep``: the step's entries, each named for the
TensorDict key a collector stores it under (``STEP_KEYS``, placed for the spec's
group by ``rlrun.core.specs.entry_key``). Gymnasium's and EnvPool's entries are numpy
arrays (host memory, no copy per step); VMAS's are tensors on its device. The learning
signal transforms (``learning_reward``, ``learning_terminal``) are part of the protocol
so that the collector never asks which kind of env it steps. The evaluator and the
collector (``rlrun.collectors.sync``) consume any ``VecEnv``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rlrun.core.specs import EnvSpec

# The fields of a step, in order, that every VecEnv returns first.
STEP_FIELDS = ("next_obs", "reward", "terminated", "truncated", "obs")


@dataclass(slots=True)
class EnvStep:
    """One step of every sub-env: ``[num_envs, (n_agents,) ...]`` arrays or tensors.

    ``next_obs`` holds the observation each action led to (the true final one where an
    episode ended, for bootstrapping through truncation); ``obs`` is where each sub-env
    goes on from (its reset observation where an episode ended, else ``next_obs``
    itself: the same object when no episode ended). ``terminated`` (the MDP ended) and
    ``truncated`` (a time limit) are ``[num_envs]``, shared by a group. ``next_state`` and
    ``state`` are the group's global state likewise (None for envs without one).

    It unpacks and indexes as gymnasium's five (``STEP_FIELDS``: ``next_obs, reward,
    terminated, truncated, obs = env.step(a)``) whatever the env; the state is read by name.
    """

    next_obs: Any
    reward: Any
    terminated: Any
    truncated: Any
    obs: Any
    next_state: Any = None
    state: Any = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.next_obs, self.reward, self.terminated, self.truncated, self.obs))

    def __getitem__(self, index: int | slice) -> Any:
        return (self.next_obs, self.reward, self.terminated, self.truncated, self.obs)[index]

    def __len__(self) -> int:
        return len(STEP_FIELDS)

    @property
    def done(self) -> Any:
        """``terminated | truncated``: the sub-envs whose episode ended at this step."""
        return self.terminated | self.truncated


# The TensorDict entry (dotted, before ``rlrun.core.specs.entry_key`` places it for a group)
# each field of an ``EnvStep`` is stored as.
STEP_KEYS: dict[str, str] = {
    "next_obs": "next.observation", "reward": "next.reward", "terminated": "next.terminated",
    "truncated": "next.truncated", "obs": "observation", "next_state": "next.state", "state": "state"}


@runtime_checkable
class VecEnv(Protocol):
    """A batch of ``num_envs`` sub-envs stepped together (see the module docstring).

    Attributes:
        learning_terminal: None, or after each step a ``[num_envs]`` bool array of sub-envs
            whose step ends the learning signal but not the episode (Atari's lost life).
    """

    num_envs: int
    spec: EnvSpec
    learning_terminal: Any

    def reset(self, seed: int | None = None) -> Any:
        """Resets every sub-env; returns observations ``[num_envs, (n_agents,) *obs]``."""

    def step(self, action: Any) -> EnvStep:
        """Steps every sub-env and resets those that ended (see ``EnvStep``), with rewards
        ``[num_envs, (n_agents)]`` and flags ``[num_envs]``."""

    def learning_reward(self, reward: Any) -> Any:
        """The learning signal of a batch of raw rewards (clipped and/or scaled; or as they are)."""

    def close(self) -> None:
        """Releases the sub-envs; idempotent."""
