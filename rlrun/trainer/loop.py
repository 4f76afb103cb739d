"""The one generic collect/optimize loop (seed 000's trainer, made generic).

Algorithms differ only by the components and hooks a config selects. Hook
points, in order::

    for batch in source:                        # a collector, a dataset, or a schedule of both
        batch = process_batch(batch)            # extend buffer, reward transforms
        pre_steps_log(batch)                    # train returns, fps
        for epoch in range(epochs_per_batch):
            pre_epoch(batch)                    # GAE, refill minibatch sampler
            for step in range(optim_steps_per_epoch):
                sub = process_optim_batch(batch)    # sample buffer / minibatch
                losses = loss(sub)
                post_loss(sub, losses)          # priorities, loss stats
                optimizer.step(losses)
                post_optim()                    # target nets
        post_steps()                            # normaliser stats, schedules
        collector.update_policy_weights()       # workers act with the new weights
        post_steps_log(batch)                   # eval, checkpoint, metrics
            post_eval(metrics)                  # after each evaluation, from the evaluation hook

The budget counts env frames (online) or optimiser steps (offline, ``total_updates``);
``trainer.clock`` is the count in the budget's unit, and every interval counts in it: a hook
declares ``every`` and the dispatch calls its point only when the clock crosses a multiple
(``rlrun.trainer.hooks.dispatch``), so hooks count nothing and checkpoint no schedule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tensordict import TensorDict
from torch import nn

from rlrun.core.checkpoint import rng_state, set_rng_state
from rlrun.core.contracts import Buffer, Logger, LossModule, OptimizerStep, Source
from rlrun.trainer.hooks import HOOK_POINTS, Hook, dispatch
from rlrun.trainer.wiring import plan

if TYPE_CHECKING:
    from rlrun.trainer.compiled import CompiledUpdate


@dataclass(frozen=True)
class Budget:
    """What a run's length counts: env ``frames`` or optimiser ``updates``, and how many."""

    unit: Literal["frames", "updates"]
    total: int


class Trainer:
    """Drives the loop and dispatches hooks.

    Hooks reach the other components through the trainer: ``policy``,
    ``collector``, ``loss``, ``optimizer``, ``buffer``, ``logger`` and the counters.

    Every attribute is set here, in the constructor (``__slots__``: none is added later); the loop
    and ``request_stop`` update the counters and the stop state.

    Args:
        collector: The data source (``rlrun.core.contracts.Source``): a collector, a
            ``DatasetSource`` yielding one empty batch per round of updates, or a schedule.
        loss: Module mapping a TensorDict to a dict of losses and diagnostics.
        optimizer: An ``OptimizerStep``.
        hooks: Named hooks in config order; each point runs them in the order
            their declarations imply (``rlrun.trainer.wiring.plan``).
        epochs_per_batch: Passes over each batch.
        optim_steps_per_epoch: Optimiser steps per pass.
        learning_starts: No optimisation before this many frames.
        buffer: The replay buffer, if any.
        logger: Receives merged metrics once per batch (a run's ``DeferredLogger``, opened after a
            restore).
        policy: The acting policy (networks, normaliser), shared with the loss.
        provided: Keys the collector's batches hold, for checking the hooks' declarations
            (None: not checked).
        budget: The run's length (None: the collector's ``total_frames``). An update budget
            ends the run at exactly ``total`` optimiser steps, mid-batch if need be.
    """

    __slots__ = ("collector", "loss", "optimizer", "policy", "buffer", "logger", "hooks", "compiled",
                 "epochs_per_batch", "optim_steps_per_epoch", "learning_starts", "budget", "_max_updates",
                 "optim_steps", "batches", "elapsed_before", "stop_reason", "interrupted", "stop_signal",
                 "diverged", "_metrics", "_start", "order", "_points", "last_clock", "_push_weights")

    def __init__(self, collector: Source, loss: LossModule, optimizer: OptimizerStep, hooks: dict[str, Hook],
                 epochs_per_batch: int = 1, optim_steps_per_epoch: int = 1,
                 learning_starts: int = 0, buffer: Buffer | None = None, logger: Logger | None = None,
                 policy: nn.Module | None = None, provided: set[str] | None = None,
                 budget: Budget | None = None, compiled: CompiledUpdate | None = None):
        self.collector, self.loss, self.optimizer, self.policy = collector, loss, optimizer, policy
        self.buffer, self.logger, self.hooks = buffer, logger, hooks
        # compile=true: the compiled loss call and optimiser step (rlrun.trainer.compiled)
        self.compiled = compiled
        self.epochs_per_batch, self.optim_steps_per_epoch = epochs_per_batch, optim_steps_per_epoch
        self.learning_starts = learning_starts
        self.budget = budget if budget is not None else Budget("frames", collector.total_frames)
        self._max_updates = self.budget.total if self.budget.unit == "updates" else None
        self.optim_steps = 0
        self.batches = 0
        self.elapsed_before = 0.0  # wall time of earlier sessions of a resumed run
        self.stop_reason: str | None = None
        self.interrupted = False  # stopped from outside (signal), as opposed to a goal reached
        self.stop_signal: int | None = None
        self.diverged: str | None = None  # what went non-finite, where (set by the divergence check)
        self._metrics: dict[str, float] = {}
        self._start = time.perf_counter()
        self.order = plan(hooks, provided, getattr(loss, "reads", ()), f"the loss {type(loss).__name__}")
        # hooks that declare ``every`` are called only when their interval's clock crosses a multiple
        self._points = {p: [dispatch(hooks[n], p) for n in self.order[p]] for p in HOOK_POINTS}
        self.last_clock = 0  # the clock at the end of the previous batch (set again by train())
        self._push_weights = getattr(collector, "update_policy_weights", None)

    @property
    def frames(self) -> int:
        return self.collector.frames

    @property
    def clock(self) -> int:
        """Progress in the budget's unit: env frames, or optimiser steps for an update budget."""
        return self.optim_steps if self._max_updates is not None else self.collector.frames

    @property
    def done(self) -> bool:
        """The budget is spent (the run's last batch is being finished)."""
        return self.clock >= self.budget.total

    @property
    def progress(self) -> float:
        """Fraction of the budget done, in [0, 1] (schedules anneal with it)."""
        return min(1.0, self.clock / self.budget.total)

    @property
    def pending_metrics(self) -> dict[str, float]:
        """Metrics logged in this batch so far (read-only view for progress displays)."""
        return dict(self._metrics)

    @property
    def wall_time(self) -> float:
        return self.elapsed_before + time.perf_counter() - self._start

    def train(self) -> None:
        if self.done:
            return
        self.last_clock = self.clock  # a resumed run's intervals continue from its restored clock
        for batch in self.collector:
            self.batches += 1
            batch = self.chain("process_batch", batch)
            self.call_hooks("pre_steps_log", batch)
            if self.frames >= self.learning_starts:
                for _ in range(self.epochs_per_batch):
                    self.call_hooks("pre_epoch", batch)
                    for _ in range(self._steps_this_epoch()):
                        sub = self.chain("process_optim_batch", batch)
                        losses = self.loss(sub) if self.compiled is None else self.compiled.loss(sub)
                        self.call_hooks("post_loss", sub, losses)
                        (self.optimizer if self.compiled is None else self.compiled).step(losses)
                        self.call_hooks("post_optim")
                        self.optim_steps += 1
            self.call_hooks("post_steps")
            if self._push_weights is not None:
                self._push_weights()  # collectors with worker processes act with the new weights next
            self.call_hooks("post_steps_log", batch)
            self.flush_metrics()
            self.last_clock = self.clock
            if self.stop_reason or (self._max_updates is not None and self.done):
                break

    def state_dict(self, keep_buffer: bool = True) -> dict[str, Any]:
        """The run's state: counters, the policy (its own key, what ``rlrun.lifecycle.load`` loads), the
        loss, optimiser, source, buffer (unless ``keep_buffer`` is False), exploration, every
        hook's state and the global RNGs. ``load_state_dict`` puts it back."""
        policy = self.policy
        exploration = getattr(policy, "exploration", None)  # no policy: a bare Trainer (tests)
        return {
            "frames": self.frames, "optim_steps": self.optim_steps,
            "batches": self.batches, "wall_time": self.wall_time,
            "policy": policy.state_dict() if policy is not None else None,
            "loss": self.loss.state_dict(), "optimizer": self.optimizer.state_dict(),
            "collector": self.collector.state_dict(),
            "buffer": self.buffer.state_dict() if keep_buffer and self.buffer is not None else None,
            "exploration": exploration.state_dict() if exploration is not None else None,
            "hooks": {k: h.state_dict() for k, h in self.hooks.items()},
            "rng": rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` saved. A state without a buffer leaves the buffer as
        built (empty); hooks the state does not name keep their fresh state. Raises
        ``KeyError``/``RuntimeError``/``ValueError`` when the state does not fit the components."""
        self.loss.load_state_dict(state["loss"])  # the policy too: the loss holds it by reference
        if state.get("policy") is not None and self.policy is not None:
            self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.collector.load_state_dict(state["collector"])
        self.optim_steps, self.batches = int(state["optim_steps"]), int(state["batches"])
        self.elapsed_before = float(state["wall_time"])
        self.optimizer.anneal(self.progress)  # the schedule where it was
        if state.get("buffer") is not None and self.buffer is not None:
            self.buffer.load_state_dict(state["buffer"])
        exploration = getattr(self.policy, "exploration", None)
        if exploration is not None:
            exploration.load_state_dict(state["exploration"])
        for name, hook in self.hooks.items():
            if name in state["hooks"]:
                hook.load_state_dict(state["hooks"][name])
        set_rng_state(state["rng"])

    def _steps_this_epoch(self) -> int:
        if self._max_updates is None:
            return self.optim_steps_per_epoch
        return max(0, min(self.optim_steps_per_epoch, self._max_updates - self.optim_steps))

    def log(self, metrics: dict[str, float]) -> None:
        """Queues metrics; they reach the logger once per batch, stamped with ``frames`` and
        ``updates``, at the step of the budget's clock."""
        self._metrics.update(metrics)

    def flush_metrics(self) -> None:
        if self._metrics and self.logger is not None:
            self.logger.log_metrics({**self._metrics, "frames": self.frames, "updates": self.optim_steps},
                                    step=self.clock)
        self._metrics = {}

    def request_stop(self, reason: str, interrupted: bool = True, signum: int | None = None) -> None:
        """Ends the loop after the current batch (hooks still run, so a checkpoint is written).

        ``interrupted=False`` marks a normal end (e.g. target return reached); ``signum``: the stop
        signal that asked (``rlrun.core.signals``), handed on once the checkpoint is written.
        """
        if self.stop_reason is None:
            self.stop_reason, self.interrupted = reason, interrupted
        if signum is not None and self.stop_signal is None:
            self.stop_signal = signum

    def use_compiled(self, compiled: CompiledUpdate) -> None:
        """Takes the optimiser steps from here on through ``compiled`` (``compile=auto`` decided to)."""
        self.compiled = compiled

    def diverge(self, what: str) -> None:
        """Marks the run diverged and ends it after this batch, without evaluating or saving it."""
        if self.diverged is None:
            self.diverged = what
            self.request_stop(f"diverged: {what}", interrupted=False)

    def call_hooks(self, point: str, *args: Any) -> None:
        """Calls every hook that implements ``point`` (for hooks that raise a point of their own)."""
        for fn in self._points[point]:
            fn(self, *args)

    def chain(self, point: str, batch: TensorDict) -> TensorDict:
        """``batch`` through every hook that implements ``point``, each given the previous one's output."""
        for fn in self._points[point]:
            batch = fn(self, batch)
        return batch

