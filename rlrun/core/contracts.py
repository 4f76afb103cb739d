"""The contracts between the loop's components: what each kind provides and what it may rely on.

``Loss`` is a small base class (losses share the policy reference, the default
parameter group and their declarations); every kind the loop relies on has a
Protocol (``Env``, ``Source``, ``Buffer``, ``LossModule``, ``OptimizerStep``,
``Logger``), so any object with these members plugs in (a third-party collector
or logger need not subclass anything), and ``rlrun.core.registry.build`` checks each
built component against its kind's protocol (``PROTOCOLS``): a plugin that lacks
a member fails when it is built, with the member named. Hooks are in ``rlrun.trainer.hooks``; the policy in
``rlrun.core.policy``.

Declarations replace conventions: a loss states which batch keys it reads and
whether it learns on-policy; a hook states the keys it reads and writes at each
point (``Hook.io``). ``rlrun.trainer.wiring`` orders and checks hooks from these
declarations when a run is built, and ``rlrun.lifecycle.build`` checks the rules that span
components (an on-policy loss needs minibatches that cover each batch, not a
replay buffer).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.specs import entry_key

Key = str | tuple[str, ...]


def key_name(key: Key) -> str:
    """``("next", "reward") -> "next.reward"``: how keys are named in messages and declarations."""
    return ".".join(key) if isinstance(key, tuple) else key


# What every collector writes into a batch (before any hook runs).
COLLECTED_KEYS: frozenset[str] = frozenset({
    "observation", "action", "next.observation", "next.reward", "next.terminated",
    "next.truncated", "next.done", "collector.traj_ids"})


class KeyMap:
    """Where a loss finds each entry it reads, by name (TorchRL's ``set_keys``).

    Names are dotted (``"observation"``, ``"next.reward"``). For a single agent an
    entry lives where its name says; for an agent group (``group``) per-agent
    entries live under the group key and shared ones at the root
    (``rlrun.core.specs.entry_key``). ``set`` overrides single entries.
    """

    def __init__(self, group: str | None = None):
        self.group = group
        self._keys: dict[str, Key] = {}

    def __call__(self, name: str) -> Key:
        key = self._keys.get(name)
        if key is None:  # resolved once per name: forward() calls this every optimiser step
            key = self._keys[name] = entry_key(name, self.group)
        return key

    def set(self, **keys: Key) -> None:
        """Reads entry ``name`` from ``keys[name]`` (a nested key) instead of its default place."""
        self._keys.update(keys)

    def names(self, names: Iterator[str] | tuple[str, ...]) -> tuple[str, ...]:
        """The dotted keys of ``names`` as this map places them (what a loss declares it reads)."""
        return tuple(key_name(self(n)) for n in names)


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
        agent_layouts: What it trains: ``"single"`` (one agent, keys at the root) and/or
            ``"group"`` (an agent group, per-agent keys under the policy's ``group``).
            ``rlrun.core.agent_groups`` checks them against the env's before a run is built.

    ``reads`` names entries; an instance's ``reads`` are the keys its ``keys`` map (a
    ``KeyMap`` on its policy's group) places them at, and ``forward`` reads through it.
    """

    on_policy: ClassVar[bool] = False
    learns_from: ClassVar[tuple[str, ...]] = ("collector",)
    action_spaces: ClassVar[tuple[str, ...]] = ("discrete", "continuous")
    reads: ClassVar[tuple[str, ...]] = ("observation", "action")
    has_targets: ClassVar[bool] = False
    agent_layouts: ClassVar[tuple[str, ...]] = ("single",)

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy
        self.keys = KeyMap(getattr(policy, "group", None))
        self.reads = self.keys.names(type(self).reads)

    def set_keys(self, **keys: Key) -> None:
        """Overrides where entries are read (``loss.set_keys(advantage=("agents", "adv"))``)."""
        self.keys.set(**keys)
        self.reads = self.keys.names(type(self).reads)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimiser group (one optimiser each); default: one group of everything."""
        return {"all": list(self.policy.parameters())}

    def update_targets(self) -> None:
        """Moves the target networks toward the online ones (only if ``has_targets``)."""
        raise TypeError(f"{type(self).__name__} has no target networks")


@runtime_checkable
class Env(Protocol):
    """A vectorised env: ``num_envs`` sub-envs stepped together, described by ``spec``."""

    spec: Any
    num_envs: int

    def reset(self, seed: int | None = None) -> Any: ...

    def step(self, action: Any) -> Any: ...

    def close(self) -> None: ...


@runtime_checkable
class Source(Protocol):
    """What the loop iterates: a collector (one process, worker processes, Ray actors), a
    dataset's rounds of updates (``rlrun.collectors.dataset.DatasetSource``), or a schedule of both
    (``rlrun.algos.odt.OnlineDTSource``). ``rlrun.lifecycle.build`` builds it as the ``collector``
    kind.

    Batches are ``[*batch, T]`` TensorDicts in TorchRL's key layout (``COLLECTED_KEYS``
    plus the policy's extras); collectors with workers add ``("collector",
    "policy_version")`` and ``("collector", "worker")``. A source of rounds yields one
    empty ``[0]`` batch per round; the round's updates sample the buffer.

    Attributes:
        budget_unit: What the run's budget counts with this source: env ``frames``
            (``total_frames``) or optimiser ``updates`` (``total_updates``).
        provided_keys: Keys every yielded batch holds (empty for rounds of updates).
        updates_per_round: Optimiser steps after each batch when the source fixes them
            (oDT's rounds); None: the run derives them (``rlrun.lifecycle.build``).
        frames: Env frames yielded so far (restored by ``load_state_dict``).
        total_frames: Frames the iteration stops at (exactly, after rounding to the step
            width); None for sources that stop when the update budget is spent.
        policy_version: Times ``update_policy_weights`` pushed new weights.
    """

    budget_unit: str
    provided_keys: frozenset[str]
    updates_per_round: int | None
    frames: int
    total_frames: int | None
    policy_version: int

    def __iter__(self) -> Iterator[TensorDict]: ...

    def sampled_buffer(self, buffer: Any) -> Any:
        """The buffer the loop samples, given the run's: that one (collectors), or one the
        source fills around it (oDT's schedule: the dataset's slices, then its episodes)."""

    def update_policy_weights(self, state_dict: Mapping[str, Tensor] | None = None) -> None:
        """Makes the acting policy use these weights (default: the live policy's) from its next rollout."""

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Returns and clears the returns and lengths of episodes finished since the last call."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def shutdown(self) -> None:
        """Releases envs and worker processes; idempotent, and safe after an error."""


# Old names kept importable for a while, with a deprecation line: one name per idea.
_DEPRECATED = {"Collector": ("Source", "rlrun.core.contracts.Source")}


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        new, where = _DEPRECATED[name]
        warnings.warn(f"rlrun.core.contracts.{name} is deprecated: use {where} (the same protocol)",
                      DeprecationWarning, stacklevel=2)
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class FrameSource:
    """The ``Source`` members every collector of env frames shares (a base for collectors)."""

    budget_unit: ClassVar[str] = "frames"
    provided_keys: ClassVar[frozenset[str]] = COLLECTED_KEYS
    # derived by rlrun.lifecycle.build from the loss and buffer
    updates_per_round: ClassVar[int | None] = None

    def sampled_buffer(self, buffer: Any) -> Any:
        """Collected batches go into the run's own buffer."""
        return buffer

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()  # every Source has one

    def __del__(self) -> None:
        # collectors that hold worker processes or actors set _closed=False while they do
        if not getattr(self, "_closed", True):
            self.shutdown()


@runtime_checkable
class Buffer(Protocol):
    """What the loop samples: a replay buffer, a dataset's sampler, or a schedule of both.

    Replay buffers also ``extend``/``empty``/``update_priority`` (``ReplayBuffer``); the hooks
    that call those are wired only for runs that collect.
    """

    def sample(self) -> TensorDict: ...

    def saved_nbytes(self) -> int:
        """Bytes its ``state_dict`` would add to a checkpoint (checkpoint.max_buffer_mb)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class ReplayBuffer(Buffer, Protocol):
    """A buffer that stores what the collector yields: ``extend`` with flat transitions."""

    def extend(self, data: TensorDict) -> None: ...

    def empty(self) -> None: ...

    def update_priority(self, index: Tensor, priority: Tensor) -> None: ...

    def nbytes(self) -> int: ...


@runtime_checkable
class LossModule(Protocol):
    """What the loop and hooks rely on in a loss (``Loss`` above provides all of it)."""

    on_policy: bool
    learns_from: tuple[str, ...]
    action_spaces: tuple[str, ...]
    reads: tuple[str, ...]
    has_targets: bool
    policy: nn.Module

    def __call__(self, batch: TensorDict) -> dict[str, Tensor]: ...

    def param_groups(self) -> dict[str, list[nn.Parameter]]: ...

    def update_targets(self) -> None: ...

    def parameters(self) -> Iterator[nn.Parameter]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> Any: ...


@runtime_checkable
class OptimizerStep(Protocol):
    """One optimisation step over a loss's terms (``rlrun.trainer.optim.OptimizerStep``).

    Attributes:
        lr_schedule: ``constant``, ``linear`` (the ``linear_lr`` hook anneals it) or ``warmup``.
        last_grad_norms: Each group's gradient norm at the last step (before clipping);
            hooks read it for metrics and the divergence check.
    """

    lr_schedule: str
    last_grad_norms: dict[str, Tensor]

    def step(self, losses: dict[str, Tensor]) -> None: ...

    def anneal(self, progress: float) -> None:
        """Sets the learning rates for ``progress`` in [0, 1] of the budget (linear schedules)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class Logger(Protocol):
    """A tracker: parameters once, metrics per batch (step = frames), artifacts, a final status.

    The one logger interface: rlrun's loggers (``rlrun.loggers``) subclass it and inherit its
    do-nothing members; a third-party one may also just have the members."""

    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: str | Path) -> None: ...

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def commit(self, step: int) -> None:
        """A checkpoint at ``step`` is written: what was logged up to it must now survive a kill
        (a resumed run continues from there; rows past it are superseded and dropped; journaled
        loggers send it)."""

    def finish(self, status: str = "FINISHED") -> None: ...


# The protocol each component kind is checked against when it is built (``rlrun.core.registry.build``).
PROTOCOLS: dict[str, type] = {"env": Env, "collector": Source, "buffer": Buffer, "loss": LossModule,
                              "optim": OptimizerStep, "logger": Logger}


def protocol_members(protocol: type) -> list[str]:
    """The members a protocol declares (annotated attributes and methods, its bases' too)."""
    names: list[str] = []
    for cls in reversed(protocol.__mro__):
        if cls is object or cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        for name in [*getattr(cls, "__annotations__", {}), *vars(cls)]:
            if (name.startswith("_") and name not in ("__iter__", "__call__")) or name in names:
                continue
            names.append(name)
    return names


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (empty: it conforms). A member its class
    defines counts without being read: reading a property may wait (a logger's ``run_id`` waits
    for its tracker process to make the run)."""
    return [name for name in protocol_members(protocol)
            if not (any(name in vars(cls) for cls in type(obj).__mro__) or hasattr(obj, name))]
