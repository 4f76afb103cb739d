"""Hooks: small named callables at the loop's hook points.

A hook subclasses ``Hook`` and implements any of the point methods; each takes
the trainer first and reaches the other components through it (``policy``,
``loss``, ``optimizer``, ``buffer``, ``collector``, ``logger``). Hooks with
state implement ``state_dict`` and ``load_state_dict``, which checkpoints
collect automatically.

A hook declares what it needs instead of relying on its place in the config:
``io()`` names the batch keys it reads and writes at each point, and
``after`` names hooks it must follow. ``rlrun.trainer.wiring`` orders the hooks
of each point from these declarations and turns an impossible order or a
missing producer into a ``ConfigError`` that names both hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from rlrun.errors import ConfigError
from rlrun.objectives.gae import gae, warm_up
from rlrun.registry import Fraction, PositiveInt, register

if TYPE_CHECKING:  # the loop imports the hooks: typing only
    from rlrun.trainer.loop import Trainer

HOOK_POINTS = ("process_batch", "pre_steps_log", "pre_epoch", "process_optim_batch",
               "post_loss", "post_optim", "post_steps", "post_steps_log", "post_eval")

IO = dict[str, tuple[tuple[str, ...], tuple[str, ...]]]


class Hook:
    """Base class: override the hook points you need.

    Attributes:
        after: Names of hooks that must run before this one at every point both use.
    """

    after: ClassVar[tuple[str, ...]] = ()

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

    Each epoch refills the buffer with the (re-estimated) batch, whose minibatches
    are then drawn without replacement, so that every epoch visits each frame once.
    """

    store_point = "pre_epoch"

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        trainer.buffer.empty()
        trainer.buffer.extend(batch.reshape(-1))


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


@register("hook", "gae")
class GAE(Hook):
    """Writes ``advantage`` and ``value_target`` into the batch with the current value critic.

    Run at ``pre_epoch``, so advantages are recomputed every epoch (as the
    paper's PPO does); ``every_epoch: false`` computes them once per batch.
    Bootstrapping stops at termination only: a truncated step bootstraps from
    V of its true final observation.

    Args:
        gamma: Discount (the run's top-level ``gamma``).
        lmbda: GAE's lambda (1: Monte-Carlo advantages against the critic).
        every_epoch: Recompute with the updated critic before every epoch.
    """

    def __init__(self, gamma: float, lmbda: Fraction = 0.95, every_epoch: bool = True):
        self.gamma, self.lmbda, self.every_epoch = gamma, lmbda, every_epoch
        self._done_for: int | None = None
        warm_up()  # numba's import and kernel load (~1 s) happen at build time, not in the first batch

    def io(self) -> IO:
        return {"pre_epoch": (("observation", "next.observation", "next.reward", "next.terminated",
                               "next.done"), ("advantage", "value_target"))}

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        if not self.every_epoch and self._done_for == trainer.batches:
            return
        self._done_for = trainer.batches
        value_of = trainer.policy.value
        with torch.no_grad():
            value = value_of(batch["observation"])
            next_value = value_of(batch["next", "observation"])
        adv, target = gae(batch["next", "reward"].squeeze(-1), value, next_value,
                          batch["next", "terminated"].squeeze(-1), batch["next", "done"].squeeze(-1),
                          self.gamma, self.lmbda)
        batch.set("advantage", adv)
        batch.set("value_target", target)


class TargetUpdate(Hook):
    """Moves the loss's target networks every ``interval_updates`` optimiser steps.

    How far they move is the loss's ``tau`` (1: a hard copy, as DQN's).
    """

    def __init__(self, interval_updates: int):
        self.interval, self.count = interval_updates, 0

    def post_optim(self, trainer) -> None:
        self.count += 1
        if self.count % self.interval == 0:
            trainer.loss.update_targets()

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = int(state["count"])


@register("hook", "observation_stats")
class ObservationStats(Hook):
    """Updates the observation normaliser from each batch, after training on it."""

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
            norm.update(self._pending)
        self._pending = None


class LinearLR(Hook):
    """Anneals the optimiser's learning rates with training progress (``optim.lr_schedule=linear``)."""

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


@register("hook", "target_update")
def make_target_update(loss, interval_updates: PositiveInt = 1) -> TargetUpdate:
    """Moves the loss's target networks every ``interval_updates`` optimiser steps."""
    if not getattr(loss, "has_targets", False):
        raise ConfigError(f"the loss {type(loss).__name__} has no target networks",
                          key="hooks.target_update", fix="remove hooks.target_update")
    return TargetUpdate(interval_updates)
