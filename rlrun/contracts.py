"""The contracts between the loop's components: what each kind provides and what it may rely on.

``Loss`` is a small base class (losses share the policy reference, the default
parameter group and their declarations); the other kinds are Protocols, so any
object with these members plugs in (a third-party collector or logger need not
subclass anything). Hooks are in ``rlrun.trainer.hooks``; the policy in
``rlrun.policy``.

Declarations replace conventions: a loss states which batch keys it reads and
whether it learns on-policy; a hook states the keys it reads and writes at each
point (``Hook.io``). ``rlrun.trainer.wiring`` orders and checks hooks from these
declarations when a run is built, and ``rlrun.build`` checks the rules that span
components (an on-policy loss needs minibatches that cover each batch, not a
replay buffer).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from tensordict import TensorDict
from torch import Tensor, nn

Key = str | tuple[str, ...]


# What every collector writes into a batch (before any hook runs).
COLLECTED_KEYS: frozenset[str] = frozenset({
    "observation", "action", "next.observation", "next.reward", "next.terminated",
    "next.truncated", "next.done", "collector.traj_ids"})


class Loss(nn.Module):
    """Base class of losses.

    A loss maps a TensorDict of samples to a dict of tensors: the ``loss_*``
    entries are summed and back-propagated by the optimisation step, the others
    are logged. It holds the policy by reference (``self.policy``).

    Class attributes (the algorithm's capabilities, declared once):
        on_policy: Learns from the batch just collected (minibatches that cover
            it each epoch) rather than from a replay buffer.
        action_spaces: ``"discrete"`` and/or ``"continuous"``.
        reads: Batch keys ``forward`` reads; a hook or the collector must provide each.
        has_targets: Keeps target networks that ``update_targets`` moves
            (the ``target_update`` hook calls it).
        learns_from: ``"collector"`` (online) and/or ``"dataset"`` (offline, ``dataset=<id>``).
        multi_agent: Trains an agent group (keys under ``agents``); needs a multi-agent env.
    """

    on_policy: ClassVar[bool] = False
    learns_from: ClassVar[tuple[str, ...]] = ("collector",)
    action_spaces: ClassVar[tuple[str, ...]] = ("discrete", "continuous")
    reads: ClassVar[tuple[str, ...]] = ("observation", "action")
    has_targets: ClassVar[bool] = False
    multi_agent: ClassVar[bool] = False

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimiser group (one optimiser each); default: one group of everything."""
        return {"all": list(self.policy.parameters())}

    def update_targets(self) -> None:
        """Moves the target networks toward the online ones (only if ``has_targets``)."""
        raise TypeError(f"{type(self).__name__} has no target networks")


@runtime_checkable
class Collector(Protocol):
    """A source of env-step batches; single-process (``rlrun.collectors``) and multi-process
    (``rlrun.collectors_multi``) collectors are interchangeable under it.

    Batches are ``[*batch, T]`` TensorDicts in TorchRL's key layout (``COLLECTED_KEYS``
    plus the policy's extras); collectors with workers add ``("collector",
    "policy_version")`` and ``("collector", "worker")``.

    Attributes:
        frames: Env frames yielded so far (restored by ``load_state_dict``).
        total_frames: Frames the iteration stops at (exactly, after rounding to the step width).
        policy_version: Times ``update_policy_weights`` was called.
    """

    frames: int
    total_frames: int
    policy_version: int

    def __iter__(self) -> Iterator[TensorDict]: ...

    def update_policy_weights(self, state_dict: Mapping[str, Tensor] | None = None) -> None:
        """Makes the acting policy use these weights (default: the live policy's) from its next rollout."""

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Returns and clears the returns and lengths of episodes finished since the last call."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def shutdown(self) -> None:
        """Releases envs and worker processes; idempotent, and safe after an error."""


@runtime_checkable
class Buffer(Protocol):
    """A replay buffer: ``extend`` with flat transitions, ``sample`` a batch."""

    def extend(self, data: TensorDict) -> None: ...

    def sample(self) -> TensorDict: ...

    def empty(self) -> None: ...

    def update_priority(self, index: Tensor, priority: Tensor) -> None: ...

    def nbytes(self) -> int: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class Logger(Protocol):
    """A tracker: parameters once, metrics per batch (step = frames), artifacts, a final status."""

    run_id: str | None

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: str | Path) -> None: ...

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...
