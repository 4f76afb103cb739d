"""The collector protocol: what the training loop may ask of any collector.

Single-process (:class:`rlrun.collectors.SyncCollector`) and multi-process
(:mod:`rlrun.collectors_multi`) collectors are interchangeable under it. A
collector yields ``[*batch, T]`` TensorDicts in TorchRL's key layout:
``observation``, the policy's outputs (``action``, ``sample_log_prob``, ...),
``("next", "observation" | "reward" | "terminated" | "truncated" | "done")``,
``("collector", "traj_ids")`` and, for collectors with workers,
``("collector", "policy_version")`` and ``("collector", "worker")``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol, runtime_checkable

from tensordict import TensorDict
from torch import Tensor


@runtime_checkable
class Collector(Protocol):
    """A source of env-step batches.

    Attributes:
        frames: Env frames yielded so far (restored by ``load_state_dict``).
        total_frames: Frames the iteration stops at (exactly, after rounding to the step width).
        policy_version: Times ``update_policy_weights`` was called; each batch of a
            multi-process collector carries the version that collected it.
    """

    frames: int
    total_frames: int
    policy_version: int

    def __iter__(self) -> Iterator[TensorDict]:
        """Yields batches until ``frames == total_frames``."""
        ...

    def update_policy_weights(self, state_dict: Mapping[str, Tensor] | None = None) -> None:
        """Makes the acting policy use these weights (default: the live policy's) from its next rollout.

        Bumps ``policy_version``. Call it after every optimiser phase.
        """
        ...

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Returns and clears the returns and lengths of episodes finished in yielded batches."""
        ...

    def state_dict(self) -> dict:
        """Frames, RNG and episode counters (per worker), for an exact resume."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict()``'s output; call before iterating."""
        ...

    def shutdown(self) -> None:
        """Releases envs and worker processes; idempotent, and safe after an error."""
        ...
