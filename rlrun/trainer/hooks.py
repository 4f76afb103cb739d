"""Hooks: small named callables at the loop's hook points.

A hook subclasses ``Hook`` and implements any of the point methods; each takes
the trainer first and reaches the other components through it (``policy``,
``loss``, ``optimizer``, ``buffer``, ``collector``, ``logger``). Hooks with
state implement ``state_dict`` and ``load_state_dict``, which checkpoints
collect automatically.

A hook declares what it needs instead of relying on its place in the config:
``io()`` names the batch keys it reads and writes at each point,
``after`` names hooks it must follow, and ``every`` how often a point runs.
``rlrun.trainer.wiring`` orders the hooks of each point from these declarations
and turns an impossible order or a missing producer into a ``ConfigError`` that
names both hooks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from tensordict import TensorDict

from rlrun.buffers.replay import ReplayBuffer
from rlrun.core.contracts import Buffer, Logger, LossModule, OptimizerStep, Source
from rlrun.core.errors import ConfigError
from rlrun.core.registry import Fraction, PositiveInt, register
from rlrun.distributed.sync import gather_rows
from rlrun.objectives.gae import gae, load_if_it_pays


class Trainer(Protocol):
    """What a hook reaches through the trainer (``rlrun.trainer.loop.Trainer`` is one): the run's
    components, its counters and its stop requests. Declared here because the loop imports the
    hooks: a hook needs the trainer's members, not its module."""

    collector: Source
    loss: LossModule
    optimizer: OptimizerStep
    buffer: Buffer | None
    logger: Logger | None
    policy: Any
    hooks: dict[str, Hook]
    epochs_per_batch: int
    optim_steps_per_epoch: int
    learning_starts: int
    optim_steps: int
    batches: int
    last_clock: int
    stop_reason: str | None
    interrupted: bool
    stop_signal: int | None
    diverged: str | None

    @property
    def frames(self) -> int: ...
    @property
    def clock(self) -> int: ...
    @property
    def done(self) -> bool: ...
    @property
    def progress(self) -> float: ...
    @property
    def wall_time(self) -> float: ...
    @property
    def pending_metrics(self) -> dict[str, float]: ...
    def log(self, metrics: dict[str, float]) -> None: ...
    def flush_metrics(self) -> None: ...
    def request_stop(self, reason: str, interrupted: bool = True) -> None: ...
    def diverge(self, what: str) -> None: ...
    def call_hooks(self, point: str, *args: Any) -> None: ...

HOOK_POINTS = ("process_batch", "pre_steps_log", "pre_epoch", "process_optim_batch",
               "post_loss", "post_optim", "post_steps", "post_steps_log", "post_eval")

IO = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]

# Points inside the optimisation loop: their interval counts optimiser steps (the step being taken,
# 1-based); the other points run once per batch and count the budget's clock (frames or updates).
STEP_POINTS = ("process_optim_batch", "post_loss", "post_optim")
_CHAINED = ("process_batch", "process_optim_batch")  # points that return the batch


@dataclass(frozen=True)
class Every:
    """An interval filter on a hook point, applied by the trainer's dispatch (``Hook.every``).

    The point runs when its clock crosses a multiple of ``interval`` (several multiples crossed by
    one batch: once). The clock is stateless (the trainer's counters), so a resumed run fires at
    the same clocks as an uninterrupted one.

    Attributes:
        interval: In the point's clock (see ``STEP_POINTS``); 0: never on the interval.
        final: Also run on the batch that spends the budget.
    """

    interval: int
    final: bool = False


def dispatch(hook: Hook, point: str) -> Callable[..., Any]:
    """``hook``'s ``point`` method, filtered by its ``every`` declaration when it has one for it.

    Batch points compare ``trainer.clock`` with ``trainer.last_clock`` (the clock at the end of
    the previous batch); step points compare the step being taken with the one before.
    """
    fn = getattr(hook, point)
    rule = hook.every.get(point)
    if rule is None:
        return fn
    rule = rule if isinstance(rule, Every) else Every(int(rule))
    interval, final, step_point, chained = rule.interval, rule.final, point in STEP_POINTS, point in _CHAINED

    def filtered(trainer, *args):
        if step_point:
            now, before = trainer.optim_steps + 1, trainer.optim_steps
        else:
            now, before = trainer.clock, trainer.last_clock
        if (interval > 0 and now // interval > before // interval) or (final and trainer.done):
            return fn(trainer, *args)
        return args[0] if chained else None

    return filtered


class Hook:
    """Base class: override the hook points you need.

    Attributes:
        after: Names of hooks that must run before this one at every point both use.
        every: ``{point: Every(...) or an interval}``: the trainer calls those points only when
            their clock crosses a multiple of the interval (``dispatch``); hooks count nothing.
        reads_losses_only: Its ``post_loss`` reads the losses, not the minibatch. On-policy
            minibatches hold only the keys the loss and the hooks' ``io`` read, unless a hook
            with a ``post_loss`` or ``process_optim_batch`` neither declares nor sets this.
    """

    after: ClassVar[tuple[str, ...]] = ()
    every: dict[str, Every | int] = {}
    # its post_loss reads the losses, never the minibatch (which may then hold only declared reads)
    reads_losses_only: ClassVar[bool] = False

    def io(self) -> IO:
        """Batch keys read and written, by point: ``{point: (reads, writes)}`` (dotted nested keys)."""
        return {}

    def process_batch(self, trainer: Trainer, batch: TensorDict) -> TensorDict:
        return batch

    def pre_steps_log(self, trainer: Trainer, batch: TensorDict) -> None: ...

    def pre_epoch(self, trainer: Trainer, batch: TensorDict) -> None: ...

    def process_optim_batch(self, trainer: Trainer, batch: TensorDict) -> TensorDict:
        return batch

    def post_loss(self, trainer: Trainer, sub: TensorDict, losses: dict) -> None: ...

    def post_optim(self, trainer: Trainer) -> None: ...

    def post_steps(self, trainer: Trainer) -> None: ...

    def post_steps_log(self, trainer: Trainer, batch: TensorDict) -> None: ...

    def post_eval(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        """After each evaluation (within ``post_steps_log``), with its ``eval/...`` metrics."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None: ...


class _BufferHook(Hook):
    """Stores batches in ``trainer.buffer`` and serves optimisation batches from it.

    Args:
        stores: The keys the loss reads: they must be in the batch when it is stored.
    """

    store_point: ClassVar[str]

    def __init__(self, stores: tuple[str, ...] = ()):
        self.stores = tuple(stores)

    def io(self) -> IO:
        return {self.store_point: (self.stores, ())}

    def process_optim_batch(self, trainer, batch: TensorDict) -> TensorDict:
        return trainer.buffer.sample()


class OnPolicyMinibatches(_BufferHook):
    """On-policy learning from the batch just collected (wired when the loss declares ``on_policy``).

    The batch is stored once, at its first epoch; each later epoch rewrites only
    the columns an earlier ``pre_epoch`` hook replaced (GAE's re-estimated
    ``advantage`` and ``value_target``) and starts a fresh permutation, whose
    minibatches are drawn without replacement so that every epoch visits each
    frame once. The sampler sees what a full re-store would show it (the same
    reset, the same ``randperm`` draws), so runs are bit-identical to refilling.
    """

    store_point = "pre_epoch"

    def __init__(self, stores: tuple[str, ...] = ()):
        super().__init__(stores)
        self._stored_for: tuple | None = None  # (trainer.batches, id) of the stored batch
        self._stored: dict = {}  # key -> the batch's tensor object that was stored
        self._index: torch.Tensor | None = None  # the rows it was written at
        self._reads: list[tuple[str, ...]] | None | bool = None  # what minibatches hold (_minibatch_keys)

    def process_optim_batch(self, trainer, batch: TensorDict) -> TensorDict:
        """The buffer's next minibatch, holding only what the loss and the hooks read from it.

        The rows and the generator's draws are ``buffer.sample()``'s; gathering the loss's five
        columns rather than all eleven a batch holds took ~90 us against ~170 us a minibatch.
        """
        buf = trainer.buffer
        keys = self._minibatch_keys(trainer)
        if keys is False or not isinstance(buf, ReplayBuffer):  # another Buffer: its own sample()
            return buf.sample()
        return buf.sample(keys=keys)

    def _minibatch_keys(self, trainer) -> list[tuple[str, ...]] | bool:
        """The loss's reads and what other hooks declare they read from minibatches (``io``); False
        (whole rows) where a hook reads minibatches without declaring what."""
        if self._reads is None:
            # no hooks to ask (a bare trainer): whole rows
            reads, undeclared = set(self.stores), not hasattr(trainer, "hooks")
            for hook in getattr(trainer, "hooks", {}).values():
                if hook is self:
                    continue
                io = hook.io()
                for point in ("process_optim_batch", "post_loss"):
                    declared = point in io
                    reads.update(io.get(point, ((), ()))[0])
                    own = getattr(type(hook), point) is not getattr(Hook, point)
                    undeclared |= own and not declared and not hook.reads_losses_only
            self._reads = False if undeclared or not reads else [tuple(k.split(".")) for k in sorted(reads)]
        return self._reads

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        # the batch count: a collector may refill one TensorDict in place for every batch
        this = (getattr(trainer, "batches", None), id(batch))
        leaves = dict(batch.items(include_nested=True, leaves_only=True))
        if this != self._stored_for or leaves.keys() != self._stored.keys():
            trainer.buffer.empty()
            self._index = trainer.buffer.extend(batch.reshape(-1))
            self._stored_for, self._stored = this, leaves
            return
        # hooks replace a column (TensorDict.set), never write into it: identity finds the changes
        changed = [k for k, v in leaves.items() if v is not self._stored[k]]
        if changed:
            rows = trainer.buffer.storage.data[: self._index.numel()]
            rows.update_(batch.select(*changed).reshape(-1))
            self._stored = leaves
        trainer.buffer.sampler.on_extend(self._index)  # a new epoch: a new permutation


class OffPolicyReplay(_BufferHook):
    """Off-policy learning from a replay buffer (wired when the loss is not ``on_policy``).

    Each collected batch is appended; optimisation batches are sampled from all
    stored data, and a prioritized buffer gets the loss's ``td_error`` back.
    """

    store_point = "process_batch"

    def process_batch(self, trainer, batch: TensorDict) -> TensorDict:
        trainer.buffer.extend(batch.reshape(-1))
        return batch

    def post_loss(self, trainer, sub: TensorDict, losses: dict) -> None:
        if "td_error" in losses and "priority_weight" in sub.keys():
            # a diverging loss stops the run at the end of the batch (DivergenceGuard); until
            # then its non-finite errors must not break the sum-tree
            error = torch.nan_to_num(losses["td_error"], nan=0.0, posinf=0.0, neginf=0.0)
            trainer.buffer.update_priority(sub["index"], error)


class DatasetSamples(Hook):
    """Offline learning: each optimisation batch is drawn from the dataset (``trainer.buffer``).

    Wired instead of a replay when the run reads a dataset; the source's batches are
    empty rounds, so nothing is stored.

    Args:
        keys: The keys a sample holds (the dataset buffer's ``sample_keys``).
    """

    def __init__(self, keys: frozenset[str] | tuple[str, ...] = ()):
        self.keys = tuple(sorted(keys))

    def io(self) -> IO:
        return {"process_optim_batch": ((), self.keys)}

    def process_optim_batch(self, trainer, batch: TensorDict) -> TensorDict:
        return trainer.buffer.sample()


# The batch keys GAE reads and writes, by role; ``group`` nests each under the group's key.
GAE_KEYS = {"observation": "observation", "next_observation": "next.observation", "reward": "next.reward",
            "terminated": "next.terminated", "done": "next.done", "advantage": "advantage",
            "value_target": "value_target"}
_GROUPED = ("observation", "next_observation", "reward", "advantage", "value_target")


def _group_key(key: str, group: str) -> str:
    """``next.reward`` -> ``next.<group>.reward``; ``advantage`` -> ``<group>.advantage``."""
    return f"next.{group}.{key[5:]}" if key.startswith("next.") else f"{group}.{key}"


@register("hook", "gae")
class GAE(Hook):
    """Writes advantages and value targets into the batch with the current value critic.

    Run at ``pre_epoch``, so advantages are recomputed every epoch (as the
    paper's PPO does); ``every_epoch: false`` computes them once per batch.
    Bootstrapping stops at termination only: a truncated step bootstraps from
    V of its true final observation. With ``group`` set (MAPPO, IPPO) the data
    has an agent dim after time, and observations, rewards and the outputs are
    read and written under the group's key; the episode end stays the team's
    (``next.done``) unless ``keys`` points it at per-agent flags.

    Args:
        gamma: Discount (the run's top-level ``gamma``).
        lmbda: GAE's lambda (1: Monte-Carlo advantages against the critic).
        every_epoch: Recompute with the updated critic before every epoch.
        group: The agent group's key (e.g. ``agents``), or none for single-agent data.
        keys: Dotted batch keys by role, overriding the defaults (roles: observation,
            next_observation, reward, terminated, done, advantage, value_target).

    Examples:
        >>> GAE(0.99, group="agents").io()["pre_epoch"][1]
        ('agents.advantage', 'agents.value_target')
    """

    def __init__(self, gamma: float, lmbda: Fraction = 0.95, every_epoch: bool = True,
                 group: str | None = None, keys: dict[str, str] | None = None):
        self.check_options({"keys": keys}, "hooks.gae")
        self.gamma, self.lmbda, self.every_epoch, self.group = gamma, lmbda, every_epoch, group
        self.keys = {role: _group_key(key, group) if group and role in _GROUPED else key
                     for role, key in GAE_KEYS.items()} | (keys or {})
        self._done_for: int | None = None
        # numba loads on the first batch too large for gae's numpy path (not here): a short run of
        # small batches never pays its ~1 s import; a long one loads it after its first call
        # (``_foresee``) rather than after the numpy path's budget
        self._foreseen = False

    @staticmethod
    def check_options(node: dict, key: str) -> None:
        for role, batch_key in (node.get("keys") or {}).items():
            if role not in GAE_KEYS:
                raise ConfigError(f"unknown key role {role!r}", key=f"{key}.keys.{role}",
                                  fix=f"roles are: {', '.join(GAE_KEYS)}")
            if not isinstance(batch_key, str) or not batch_key:
                raise ConfigError(f"must be a dotted batch key, got {batch_key!r}", key=f"{key}.keys.{role}",
                                  fix=f"set it like {GAE_KEYS[role]!r}")

    def io(self) -> IO:
        reads = ("observation", "next_observation", "reward", "terminated", "done")
        return {"pre_epoch": (tuple(self.keys[r] for r in reads),
                              (self.keys["advantage"], self.keys["value_target"]))}

    def _get(self, batch: TensorDict, role: str) -> torch.Tensor:
        return batch.get(tuple(self.keys[role].split(".")))

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        if not self.every_epoch and self._done_for == trainer.batches:
            return
        self._done_for = trainer.batches
        value_of = trainer.policy.value
        with torch.no_grad():
            value = value_of(self._get(batch, "observation"))
            next_value = value_of(self._get(batch, "next_observation"))
        args = (self._get(batch, "reward").squeeze(-1), value, next_value,
                self._get(batch, "terminated").squeeze(-1), self._get(batch, "done").squeeze(-1),
                self.gamma, self.lmbda)
        agents = True if self.group else None
        adv, target = gae(*args, agents=agents)
        if not self._foreseen:
            self._foreseen = True
            # the projection times a second call: the first pays numpy's first-use costs, ~3x a
            # warm call at 8 x 128 (1.0 against 0.34 ms), and so loaded numba (~0.65 s) for runs
            # whose numpy calls would all have cost half that
            start = time.perf_counter()
            gae(*args, agents=agents)
            self._foresee(trainer, batch, time.perf_counter() - start)
        batch.set(tuple(self.keys["advantage"].split(".")), adv.to(value.device))
        batch.set(tuple(self.keys["value_target"].split(".")), target.to(value.device))


    def _foresee(self, trainer, batch: TensorDict, seconds: float) -> None:
        """After the run's first call: the calls a frame budget has left, so that a run long
        enough to spend gae's numpy budget loads the kernel now (``load_if_it_pays``)."""
        budget, frames = getattr(trainer, "budget", None), batch.numel()
        if budget is None or budget.unit != "frames" or frames == 0:
            return  # an update budget: its batches' count is not known here
        batches = -(-max(budget.total - trainer.clock, 0) // frames)  # after this one
        per_batch = getattr(trainer, "epochs_per_batch", 1) if self.every_epoch else 1
        load_if_it_pays(seconds, batches * per_batch)


class TargetUpdate(Hook):
    """Moves the loss's target networks every ``interval_updates`` optimiser steps, or before the
    updates of each batch whose env frames cross a multiple of ``interval_frames`` (when set).

    How far they move is the loss's ``tau`` (1: a hard copy, as DQN's). Frames are how SB3 and
    CleanRL count DQN's target interval: a copy then falls between two batches' updates, never
    among them; counted in updates, an interval that is not a multiple of the updates per batch
    copies mid-batch, which with the same mean period measurably changes learning (DQN CartPole,
    ``rlrun/benchmarks/README.md``, fidelity).
    """

    def __init__(self, interval_updates: int | None = 1, interval_frames: int | None = None):
        self.interval = interval_frames or interval_updates
        # the trainer's dispatch filters both points; the unit not counted in never fires (interval 0)
        self.every = {"post_optim": Every(0 if interval_frames else interval_updates),
                      "process_batch": Every(interval_frames or 0)}

    def process_batch(self, trainer, batch: TensorDict) -> TensorDict:
        if trainer.budget.unit != "frames":  # the clock counts updates: the interval would too
            raise ConfigError("counts env frames, and this run's budget counts updates (total_updates)",
                              key="hooks.target_update.interval_frames",
                              fix="count in updates: hooks.target_update.interval_frames=null "
                                  "hooks.target_update.interval_updates=N")
        trainer.loss.update_targets()
        return batch

    def post_optim(self, trainer) -> None:
        trainer.loss.update_targets()


@register("hook", "observation_stats")
class ObservationStats(Hook):
    """Updates the observation normaliser from each batch, after training on it (under several
    ranks from every rank's batch, ``rlrun.distributed.sync.gather_rows``)."""

    def __init__(self):
        self._pending: torch.Tensor | None = None

    def io(self) -> IO:
        return {"process_batch": (("observation",), ())}

    def process_batch(self, trainer, batch: TensorDict) -> TensorDict:
        self._pending = batch["observation"]
        return batch

    def post_steps(self, trainer) -> None:
        norm = trainer.policy.normalizer
        if norm is not None and self._pending is not None:
            # data-parallel: every rank's batch, so that all ranks keep one normaliser (alone: as is)
            norm.update(gather_rows(self._pending))
        self._pending = None


class LRProgress(Hook):
    """Feeds the budget's progress, once per batch, to the optimiser's LR schedule
    (``OptimizerStep.lr_factor``, the one schedule; wired for ``optim.lr_schedule=linear``)."""

    def post_steps(self, trainer) -> None:
        trainer.optimizer.anneal(trainer.progress)


class TrainStats(Hook):
    """Logs training episode returns, fps and loss averages once per batch.

    Losses are summed as tensors during the batch and read once at its end, so
    the optimisation loop has no host syncs. Batches tagged with the policy
    version that collected them (collectors with workers) also give
    ``collector/policy_lag``: the learner's version when the batch reaches it,
    minus the batch's mean version (0 for ``multi_sync``).
    """

    reads_losses_only = True

    def __init__(self):
        self._sums: dict[str, torch.Tensor] = {}
        self._n = 0
        self._lag: torch.Tensor | None = None
        self._last_time: float | None = None
        self._last_frames = 0
        self._last_updates = 0
        self.recent_returns: list[float] = []

    def pre_steps_log(self, trainer, batch: TensorDict) -> None:
        # before this batch's updates: the learner's version is the number of weight pushes so far
        if ("collector", "policy_version") in batch.keys(include_nested=True):
            version = batch["collector", "policy_version"]
            self._lag = trainer.collector.policy_version - version.double().mean()

    def post_loss(self, trainer, sub: TensorDict, losses: dict) -> None:
        for k, v in losses.items():
            if v.ndim == 0:
                self._sums[k] = self._sums[k] + v.detach() if k in self._sums else v.detach()
        self._n += 1

    def post_steps_log(self, trainer, batch: TensorDict) -> None:
        metrics: dict[str, float] = {}
        returns, lengths = trainer.collector.pop_episode_stats()
        if returns:
            metrics["train/episode_return"] = float(np.mean(returns))
            metrics["train/episode_length"] = float(np.mean(lengths))
            self.recent_returns = (self.recent_returns + returns)[-100:]
        if self._n:
            values = torch.stack(list(self._sums.values())).cpu() / self._n  # one sync per batch
            for k, v in zip(self._sums, values.tolist()):
                metrics[k.replace("loss_", "loss/") if k.startswith("loss_") else f"train/{k}"] = v
        for g, norm in trainer.optimizer.last_grad_norms.items():
            metrics[f"train/grad_norm_{g}"] = float(norm)
        if self._lag is not None:
            metrics["collector/policy_lag"] = float(self._lag)
            self._lag = None
        now = trainer.wall_time
        if self._last_time is not None and now > self._last_time:
            seconds = now - self._last_time
            if trainer.frames > self._last_frames:  # an offline round collects nothing
                metrics["time/fps"] = (trainer.frames - self._last_frames) / seconds
            metrics["time/updates_per_s"] = (trainer.optim_steps - self._last_updates) / seconds
        self._last_time, self._last_frames, self._last_updates = now, trainer.frames, trainer.optim_steps
        metrics["time/wall_s"] = now
        metrics["train/optim_steps"] = float(trainer.optim_steps)
        self._sums, self._n = {}, 0
        trainer.log(metrics)


def _one_interval(node: dict, key: str) -> None:
    """Exactly one of the two intervals: a preset's ``interval_updates`` is not silently ignored."""
    updates, frames = node.get("interval_updates", 1), node.get("interval_frames")
    if updates is not None and frames is not None:
        raise ConfigError("interval_updates and interval_frames are both set", key=f"{key}.interval_frames",
                          fix=f"count in one unit: add {key}.interval_updates=null")
    if updates is None and frames is None:
        raise ConfigError("neither interval_updates nor interval_frames is set",
                          key=f"{key}.interval_updates",
                          fix=f"set {key}.interval_updates=N or {key}.interval_frames=N")


@register("hook", "target_update", options=_one_interval)
def make_target_update(loss, interval_updates: PositiveInt | None = 1,
                       interval_frames: PositiveInt | None = None) -> TargetUpdate:
    """Moves the loss's target networks every ``interval_updates`` optimiser steps, or every
    ``interval_frames`` env frames.

    Args:
        interval_updates: Optimiser steps between moves; null to count in frames instead.
        interval_frames: Env frames between moves, applied before the updates of the batch that
            crosses a multiple (SB3's and CleanRL's count: never mid-batch). Set it with
            ``+hooks.target_update.interval_frames=N hooks.target_update.interval_updates=null``.
    """
    if not getattr(loss, "has_targets", False):
        raise ConfigError(f"the loss {type(loss).__name__} has no target networks",
                          key="hooks.target_update", fix="remove hooks.target_update")
    return TargetUpdate(interval_updates, interval_frames)
