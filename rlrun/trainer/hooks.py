"""Hooks: small named callables at the loop's hook points.

A hook subclasses ``Hook`` and implements any of the point methods; each takes
the trainer first. Hooks with state implement ``state_dict`` and
``load_state_dict``, which checkpoints collect automatically.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict

from rlrun.errors import ConfigError
from rlrun.objectives.gae import gae, warm_up
from rlrun.registry import register

HOOK_POINTS = ("process_batch", "pre_steps_log", "pre_epoch", "process_optim_batch",
               "post_loss", "post_optim", "post_steps", "post_steps_log", "post_eval")


class Hook:
    """Base class: override the hook points you need."""

    def process_batch(self, trainer, batch: TensorDict) -> TensorDict:
        return batch

    def pre_steps_log(self, trainer, batch: TensorDict) -> None: ...

    def pre_epoch(self, trainer, batch: TensorDict) -> None: ...

    def process_optim_batch(self, trainer, batch: TensorDict) -> TensorDict:
        return batch

    def post_loss(self, trainer, sub: TensorDict, losses: dict) -> None: ...

    def post_optim(self, trainer) -> None: ...

    def post_steps(self, trainer) -> None: ...

    def post_steps_log(self, trainer, batch: TensorDict) -> None: ...

    def post_eval(self, trainer, metrics: dict[str, float]) -> None:
        """After each evaluation (within ``post_steps_log``), with its ``eval/...`` metrics."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None: ...


class Replay(Hook):
    """Feeds the replay buffer and samples optimisation batches from it.

    ``on_policy``: each epoch the buffer is refilled with the (re-estimated)
    batch and minibatches are drawn without replacement. ``off_policy``: each
    collected batch is appended and batches are sampled from all stored data.
    """

    def __init__(self, mode: str = "off_policy"):
        if mode not in ("on_policy", "off_policy"):
            raise ConfigError(f"unknown replay mode {mode!r}", key="hooks.replay.mode",
                              fix="use on_policy or off_policy")
        self.on_policy = mode == "on_policy"

    def process_batch(self, trainer, batch: TensorDict) -> TensorDict:
        if not self.on_policy:
            trainer.buffer.extend(batch.reshape(-1))
        return batch

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        if self.on_policy:
            trainer.buffer.empty()
            trainer.buffer.extend(batch.reshape(-1))

    def process_optim_batch(self, trainer, batch: TensorDict) -> TensorDict:
        return trainer.buffer.sample()

    def post_loss(self, trainer, sub: TensorDict, losses: dict) -> None:
        if "td_error" in losses and "priority_weight" in sub.keys():
            trainer.buffer.update_priority(sub["index"], losses["td_error"])


class GAE(Hook):
    """Writes ``advantage`` and ``value_target`` into the batch with the current critic.

    Run at ``pre_epoch``, so advantages are recomputed every epoch (as the
    paper's PPO does); set ``every_epoch: false`` to compute them once per batch.
    """

    def __init__(self, gamma: float = 0.99, lmbda: float = 0.95, every_epoch: bool = True):
        self.gamma, self.lmbda, self.every_epoch = gamma, lmbda, every_epoch
        self._done_for: int | None = None
        warm_up()  # numba's import and kernel load (~1 s) happen at build time, not in the first batch

    def pre_epoch(self, trainer, batch: TensorDict) -> None:
        if not self.every_epoch and self._done_for == trainer.batches:
            return
        self._done_for = trainer.batches
        critic = trainer.loss.models.critic
        with torch.no_grad():
            value = critic(batch["observation"])
            next_value = critic(batch["next", "observation"])
        adv, target = gae(batch["next", "reward"].squeeze(-1), value, next_value,
                          batch["next", "terminated"].squeeze(-1), batch["next", "done"].squeeze(-1),
                          self.gamma, self.lmbda)
        batch.set("advantage", adv)
        batch.set("value_target", target)


class TargetUpdate(Hook):
    """Polyak-averages the loss's target networks every ``every`` optimiser steps."""

    def __init__(self, every: int = 1):
        self.every, self.count = every, 0

    def post_optim(self, trainer) -> None:
        self.count += 1
        if self.count % self.every == 0:
            trainer.loss.update_targets()

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = int(state["count"])


class ObservationStats(Hook):
    """Updates the observation normaliser from each batch, after training on it."""

    def __init__(self):
        self._pending: torch.Tensor | None = None

    def process_batch(self, trainer, batch: TensorDict) -> TensorDict:
        self._pending = batch["observation"]
        return batch

    def post_steps(self, trainer) -> None:
        norm = trainer.loss.models.normalizer
        if norm is not None and self._pending is not None:
            norm.update(self._pending)
        self._pending = None


class LinearLR(Hook):
    """Anneals the optimiser's learning rates with training progress."""

    def post_steps(self, trainer) -> None:
        trainer.optimizer.anneal(trainer.frames / trainer.collector.total_frames)


class TrainStats(Hook):
    """Logs training episode returns, fps and loss averages once per batch.

    Losses are summed as tensors during the batch and read once at its end, so
    the optimisation loop has no host syncs.
    """

    def __init__(self):
        self._sums: dict[str, torch.Tensor] = {}
        self._n = 0
        self._last_time: float | None = None
        self._last_frames = 0
        self.recent_returns: list[float] = []

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
        now = trainer.wall_time
        if self._last_time is not None and now > self._last_time:
            metrics["time/fps"] = (trainer.frames - self._last_frames) / (now - self._last_time)
        self._last_time, self._last_frames = now, trainer.frames
        metrics["time/wall_s"] = now
        metrics["train/optim_steps"] = float(trainer.optim_steps)
        self._sums, self._n = {}, 0
        trainer.log(metrics)


@register("hook", "replay")
def make_replay(mode: str = "off_policy") -> Replay:
    """Extends the replay buffer with collected data and samples optimisation batches."""
    return Replay(mode)


@register("hook", "gae")
def make_gae(gamma: float = 0.99, lmbda: float = 0.95, every_epoch: bool = True) -> GAE:
    """Generalised advantage estimation with the current critic (terminated vs truncated)."""
    return GAE(gamma, lmbda, every_epoch)


@register("hook", "target_update")
def make_target_update(every: int = 1) -> TargetUpdate:
    """Soft (polyak) update of the loss's target networks after optimiser steps."""
    return TargetUpdate(every)


@register("hook", "observation_stats")
def make_observation_stats() -> ObservationStats:
    """Updates the running observation statistics from each collected batch."""
    return ObservationStats()
