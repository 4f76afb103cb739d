"""The one protocol every batched env implements: gymnasium vector envs, EnvPool and VMAS groups.

What they share today (``VecEnv``): ``num_envs``, an ``EnvSpec`` (``spec.group`` says
whether the per-step entries carry an agent dim), ``reset(seed)`` returning the first
observations, and ``step(action)`` returning a tuple whose first five fields are
``(next_obs, reward, terminated, truncated, obs)``: ``next_obs`` holds the true final
observation where an episode ended and ``obs`` the reset one (elsewhere the same).
Gymnasium's arrays are numpy, VMAS's are tensors on its device; a VMAS step adds the
group's global state (``next_state``, ``state``). The evaluator consumes any ``VecEnv``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rlrun.core.specs import EnvSpec

# The fields of a step, in order, that every VecEnv returns first.
STEP_FIELDS = ("next_obs", "reward", "terminated", "truncated", "obs")


@runtime_checkable
class VecEnv(Protocol):
    """A batch of ``num_envs`` sub-envs stepped together (see the module docstring)."""

    num_envs: int
    spec: EnvSpec

    def reset(self, seed: int | None = None) -> Any:
        """Resets every sub-env; returns observations ``[num_envs, (n_agents,) *obs]``."""

    def step(self, action: Any) -> tuple:
        """Steps every sub-env and resets those that ended: ``(next_obs, reward, terminated,
        truncated, obs, ...)`` with rewards ``[num_envs, (n_agents)]`` and flags ``[num_envs]``."""

    def close(self) -> None:
        """Releases the sub-envs; idempotent."""
