"""``compile=auto``: compile the update (``compile=true``'s ``CompiledUpdate``) once it is measured to pay.

After ``warmup_updates`` eager updates (the first batch of updates, which carries first-call
costs, is not timed), the hook projects what compiling would save over the updates left in the
budget, ``eager seconds per update x (1 - 1 / SPEEDUP) x updates left``, and compiles when that
exceeds ``COMPILE_S``, the compile's cost; one line on stderr says which, with the figures. The
constants are this project's CPU measurements (rlrun/benchmarks/README.md, ``update --compile``):
compiled SAC 1.38-1.40x and PPO 1.31-1.40x eager's speed, cold compiles of 46.6 s (SAC) and
15.4 s (PPO); a warm inductor cache (a sweep's later runs) compiles in seconds, which the rule
does not count on.

Not the default: compiled runs draw their random numbers from inductor's generator and round
differently, so the result of a seed would then depend on how fast the machine ran the warm-up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from rlrun.trainer.hooks import Hook

SPEEDUP = 1.3  # compiled / eager updates per second, the lower end of what was measured on CPU
COMPILE_S = 45.0  # seconds a cold compile of an update costs on CPU (SAC's, the dearer one measured)


def projected_saving(update_s: float, updates_left: float, speedup: float = SPEEDUP) -> float:
    """Seconds compiling would save over ``updates_left`` eager updates of ``update_s`` each."""
    return update_s * (1.0 - 1.0 / speedup) * max(updates_left, 0.0)


def decide(update_s: float, updates_left: float, compile_s: float | None = None) -> tuple[bool, str]:
    """Whether to compile (the projected saving exceeds ``compile_s``, default ``COMPILE_S``), and the
    one line that says why."""
    compile_s = COMPILE_S if compile_s is None else compile_s
    saving = projected_saving(update_s, updates_left)
    verdict = "compiling" if saving > compile_s else "staying eager"
    sign = ">" if saving > compile_s else "<="
    return saving > compile_s, (
        f"[rlrun] compile=auto: {verdict}: {updates_left:,.0f} updates left at {1e3 * update_s:.2f} ms "
        f"eager, "
        f"projected saving {saving:.0f} s {sign} compile ~{compile_s:.0f} s")


class CompileAuto(Hook):
    """Times the eager updates of a run's first batches and switches the trainer to
    ``build()`` (a ``CompiledUpdate``) if ``decide`` says so; decides once.

    Args:
        build: Makes the compiled update (called once, when compiling).
        warmup_updates: Eager updates timed before deciding.
        say: Where the decision's line goes (default: stderr).
    """

    def __init__(self, build: Callable[[], Any], warmup_updates: int = 50,
                 say: Callable[[str], None] | None = None):
        self.build, self.warmup_updates = build, warmup_updates
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.decided = False
        self.line: str | None = None
        self._batch_start: float | None = None
        self._steps_before = 0
        self._timed_s, self._timed_updates, self._skipped_first = 0.0, 0, False

    def pre_epoch(self, trainer, batch) -> None:
        if self._batch_start is None and not self.decided:
            self._batch_start, self._steps_before = time.perf_counter(), trainer.optim_steps

    def post_steps(self, trainer) -> None:
        if self.decided or self._batch_start is None:
            return
        elapsed, updates = time.perf_counter() - self._batch_start, trainer.optim_steps - self._steps_before
        self._batch_start = None
        if updates <= 0:
            return
        if not self._skipped_first:  # first calls: allocations, caches, lazy imports
            self._skipped_first = True
            return
        self._timed_s += elapsed
        self._timed_updates += updates
        if self._timed_updates < self.warmup_updates:
            return
        self.decided = True
        go, self.line = decide(self._timed_s / self._timed_updates, self._updates_left(trainer, updates))
        self.say(self.line)
        if go:
            trainer.use_compiled(self.build())

    @staticmethod
    def _updates_left(trainer, updates_per_batch: int) -> float:
        """Updates the rest of the budget will make, at this batch's updates per collected frame."""
        budget = getattr(trainer, "budget", None)
        if budget is not None and budget.unit == "updates":
            return float(budget.total - trainer.optim_steps)
        total = budget.total if budget is not None else trainer.collector.total_frames
        batch_frames = max(trainer.clock - trainer.last_clock, 1)
        return (total - trainer.clock) / batch_frames * updates_per_batch
