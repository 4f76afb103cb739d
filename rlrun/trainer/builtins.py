"""The hooks every run gets, wired from the config and the components' declarations.

``rlrun explain <overrides>`` prints them, per point, beside the config's own hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor

from rlrun.distributed.sync import any_rank
from rlrun.loggers.tracking import Progress
from rlrun.trainer.evaluation import Evaluation, Evaluator
from rlrun.trainer.hooks import (
    DatasetSamples,
    Every,
    Hook,
    LRProgress,
    OffPolicyReplay,
    OnPolicyMinibatches,
    TrainStats,
)

EVAL_SEED_OFFSET = 1_000_003  # evaluation resets with seed + this: never a training env's seed


def learning_hooks(loss: Any, dataset_keys: frozenset[str] | None = None) -> dict[str, tuple[Hook, str]]:
    """Hooks that come before the config's: the buffer the loss learns from, the divergence check.

    ``dataset_keys``: the keys of a dataset's samples, for an offline run (None: online).
    """
    # first in config order: the keys it stores place it after the hooks that write them
    if dataset_keys is not None:
        hooks = {"buffer": (DatasetSamples(dataset_keys), "built in: the run learns from dataset=...")}
    elif loss.on_policy:
        hooks = {"buffer": (OnPolicyMinibatches(loss.reads), "built in: the loss learns on-policy")}
    else:
        hooks = {"buffer": (OffPolicyReplay(loss.reads), "built in: the loss learns off-policy")}
    hooks["divergence"] = (DivergenceGuard(loss), "built in: stop at non-finite losses or weights")
    return hooks


class DivergenceGuard(Hook):
    """Stops the run at the end of the first batch with a non-finite loss term, gradient or weight.

    Per optimiser step it only ORs finiteness flags on the device (no host
    sync); once per batch, before evaluation and checkpointing, one sync reads
    them with a check of every weight. A diverged run then neither evaluates
    nor saves: the last checkpoint stays the last finite one.
    """

    reads_losses_only = True

    def __init__(self, loss: Any):
        self.params = [p for p in loss.parameters()]
        self._bad: dict[str, Tensor] = {}
        # per set of loss terms (TD3's differs every other step), one flag per term: a step's
        # scalar terms are checked in one stacked op, not three ops each (~40 us a step)
        self._stacked: dict[tuple[str, ...], Tensor] = {}

    def post_loss(self, trainer, sub, losses: dict) -> None:
        names = tuple(k for k in losses if k.startswith("loss_"))
        values = [losses[k].detach() for k in names]
        if values and all(v.ndim == 0 for v in values) and len({v.dtype for v in values}) == 1:
            bad = ~torch.isfinite(torch.stack(values))
            before = self._stacked.get(names)
            self._stacked[names] = bad if before is None else before | bad
            return
        for k, v in zip(names, values):
            bad = ~torch.isfinite(v)
            self._bad[k] = bad if k not in self._bad else self._bad[k] | bad

    def post_steps(self, trainer) -> None:
        for names, flags in self._stacked.items():  # each term's flag, in the order terms appeared
            for k, bad in zip(names, flags.unbind()):
                self._bad[k] = bad if k not in self._bad else self._bad[k] | bad
        self._stacked = {}
        names = list(self._bad)
        flags = [self._bad[k] for k in names]
        for group, norm in getattr(trainer.optimizer, "last_grad_norms", {}).items():
            names.append(f"gradient norm of {group}")
            flags.append(~torch.isfinite(norm))
        names.append("weights")
        flags.append(torch.stack([~torch.isfinite(p).all() for p in self.params]).any())
        self._bad = {}
        bad = torch.stack([f.reshape(()) for f in flags]).cpu()  # the batch's one host sync
        if bad.any():
            first = names[int(bad.nonzero()[0])]
            trainer.diverge(f"non-finite {first} in the batch ending at frame {trainer.frames}")


def reporting_hooks(cfg: DictConfig, optimizer: Any, eval_env: Any, device: str,
                    run_dir: Path | None = None, unit: str = "frames") -> dict[str, tuple[Hook, str]]:
    """Hooks that come after the config's: LR schedule, metrics, evaluation (and its videos).

    ``unit`` is the budget's (frames or updates): evaluation counts its interval in it.
    """
    hooks: dict[str, tuple[Hook, str]] = {}
    if optimizer.lr_schedule == "linear":  # the schedule that follows progress (warmup counts updates)
        hooks["linear_lr"] = (LRProgress(), "built in: optim.lr_schedule=linear")
    hooks["train_stats"] = (TrainStats(), "built in: metrics")
    seed = cfg.seed + EVAL_SEED_OFFSET
    evaluator = Evaluator(eval_env, cfg.eval.episodes, seed=seed, device=device)  # an agent group too
    interval = cfg.eval.interval_updates if unit == "updates" else cfg.eval.interval_frames
    hooks["evaluation"] = (Evaluation(evaluator, interval, cfg.eval.get("target_return")),
                           f"built in: eval.* (every eval.interval_{unit})")
    if cfg.eval.get("video"):
        from rlrun.trainer.video import EvalVideo  # imported only when asked for

        folder = Path(run_dir if run_dir is not None else ".") / "videos"
        hooks["eval_video"] = (EvalVideo(cfg.env, seed, folder, cfg.eval.get("video_every", 1), device),
                               "built in: eval.video=true")
    return hooks


class Checkpointing(Hook):
    """Saves a checkpoint every ``interval`` steps of the budget's clock (frames or updates);
    the run saves once more when the loop ends."""

    after = ("evaluation",)  # the saved evaluation schedule is the one after this batch's

    def __init__(self, save: Callable[[Any], None], interval: int):
        self.save, self.interval = save, interval
        self.every = {"post_steps_log": Every(interval)}  # the trainer's dispatch filters

    def post_steps_log(self, trainer, batch) -> None:
        # the loop's last batch is saved by train() right after the loop: not twice
        if not trainer.done and not trainer.stop_reason and not trainer.diverged:
            self.save(trainer)


class ProgressHook(Hook):
    """Feeds the progress display once per batch: frames, fps, recent and eval returns."""

    after = ("train_stats", "evaluation")

    def __init__(self, progress: Progress, stats: TrainStats):
        self.progress, self.stats = progress, stats

    def post_steps_log(self, trainer, batch) -> None:
        info = {}
        if self.stats.recent_returns:
            info["return"] = sum(self.stats.recent_returns) / len(self.stats.recent_returns)
        metrics = trainer.pending_metrics
        if "time/fps" in metrics:
            info["fps"] = metrics["time/fps"]
        if "eval/episode_return" in metrics:
            info["eval"] = metrics["eval/episode_return"]
        self.progress.update(trainer.clock, info)


class KeepBest(Hook):
    """Keeps the policy of the best evaluation so far (``checkpoint.keep_best=true``).

    After each evaluation whose mean return beats the best so far (strictly: a tie keeps the
    earlier policy), ``save(frames, metrics)`` writes ``<run dir>/best/``; the best return and
    the frame it was reached at are logged as ``eval/best_return`` and ``eval/best_frame``. The
    best so far is hook state, so a resumed run compares against what the killed one had
    checkpointed: a ``best/`` written after that checkpoint is written again, identically, when
    the resumed run replays the evaluation (resume is exact).
    """

    def __init__(self, save: Callable[[int, dict[str, float]], None]):
        self.save = save
        self.best_return: float | None = None
        self.best_frame: int | None = None

    def post_eval(self, trainer, metrics: dict[str, float]) -> None:
        value = metrics.get("eval/episode_return")
        if value is None or value != value:  # NaN never counts as best
            return
        if self.best_return is None or value > self.best_return:
            self.best_return, self.best_frame = float(value), int(trainer.frames)
            self.save(self.best_frame, dict(metrics))
        trainer.log({"eval/best_return": self.best_return, "eval/best_frame": float(self.best_frame)})

    def state_dict(self) -> dict:
        return {"best_return": self.best_return, "best_frame": self.best_frame}

    def load_state_dict(self, state: dict) -> None:
        self.best_return, self.best_frame = state.get("best_return"), state.get("best_frame")


class WorldStop(Hook):
    """Under several ranks, a stop asked on any rank is every rank's, after the same batch (issue 39).

    Ranks must leave the loop after the same batch: one that stopped alone would wait in the
    final checkpoint's barrier while the others wait in the next batch's gradient all-reduce,
    until the collective timeout failed the run. So the signal handlers ask this hook
    (``request_stop``, a ``core.signals.Stoppable``) rather than the trainer, and at the end of
    every batch (``post_steps_log``, after every other hook: a stop a hook asked on one rank
    counts too) one all-reduce of a flag tells every rank whether any rank asked; each then
    asks its trainer. A signal that lands after the all-reduce is taken at the next batch's.
    """

    def __init__(self) -> None:
        self.asked: tuple[str, bool, int | None] | None = None

    def request_stop(self, reason: str, interrupted: bool = True, signum: int | None = None) -> None:
        if self.asked is None:
            self.asked = (reason, interrupted, signum)

    def post_steps_log(self, trainer, batch) -> None:
        if not any_rank(int(self.asked is not None or trainer.stop_reason is not None)):
            return
        if self.asked is not None:
            reason, interrupted, signum = self.asked
            trainer.request_stop(reason, interrupted=interrupted, signum=signum)
        elif trainer.stop_reason is None:
            trainer.request_stop("stopped with another rank")
