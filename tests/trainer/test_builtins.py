"""The hooks every run gets: divergence check, checkpoint schedule, progress, and their wiring."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from rlrun.algos.ppo import PPOLoss
from rlrun.algos.sac import SACLoss
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic, actor_twin_q
from rlrun.trainer.builtins import Checkpointing, DivergenceGuard, ProgressHook, learning_hooks
from rlrun.trainer.hooks import OffPolicyReplay, OnPolicyMinibatches, dispatch

SPEC_D = EnvSpec((3,), "float32", True, 2)
SPEC_C = EnvSpec((3,), "float32", False, 2)


class FakeTrainer:
    def __init__(self, frames=100, total=1000, grad_norms=None):
        self.frames, self.diverged, self.stop_reason, self.last_clock = frames, None, None, 0
        self.collector = SimpleNamespace(total_frames=total)
        self.optimizer = SimpleNamespace(last_grad_norms=grad_norms or {})
        self.metrics: dict = {}

    def diverge(self, what):
        self.diverged = what

    @property
    def clock(self):
        return self.frames

    @property
    def done(self):
        return self.frames >= self.collector.total_frames

    @property
    def pending_metrics(self):
        return dict(self.metrics)


def guard_run(losses_per_step, params=None, grad_norms=None, frames=100):
    module = nn.Linear(2, 1)
    if params is not None:
        with torch.no_grad():
            module.weight.copy_(params)
    guard, trainer = DivergenceGuard(module), FakeTrainer(frames, grad_norms=grad_norms)
    for losses in losses_per_step:
        guard.post_loss(trainer, None, {k: torch.tensor(v) for k, v in losses.items()})
    guard.post_steps(trainer)
    return trainer.diverged


def test_finite_batches_do_not_diverge():
    assert guard_run([{"loss_a": 1.0, "loss_b": -2.0}, {"loss_a": 0.5}]) is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_the_first_non_finite_term_is_named_with_the_frame(bad):
    steps = [{"loss_a": 1.0, "loss_b": 2.0}, {"loss_a": 1.0, "loss_b": bad}, {"loss_a": 1.0, "loss_b": 2.0}]
    assert guard_run(steps, frames=4200) == "non-finite loss_b in the batch ending at frame 4200"


def test_diagnostics_that_are_not_losses_are_ignored():
    assert guard_run([{"loss_a": 1.0, "entropy": float("nan")}]) is None


def test_flags_reset_each_batch():
    module = nn.Linear(2, 1)
    guard, trainer = DivergenceGuard(module), FakeTrainer()
    guard.post_loss(trainer, None, {"loss_a": torch.tensor(float("nan"))})
    guard.post_steps(trainer)
    assert trainer.diverged is not None
    trainer.diverged = None
    guard.post_loss(trainer, None, {"loss_a": torch.tensor(1.0)})
    guard.post_steps(trainer)
    assert trainer.diverged is None  # last batch's flag does not leak into this one


def test_non_finite_gradient_norm_and_weights_are_caught():
    assert guard_run([{"loss_a": 1.0}], grad_norms={"critic": torch.tensor(float("inf"))}) == \
        "non-finite gradient norm of critic in the batch ending at frame 100"
    assert guard_run([{"loss_a": 1.0}], params=torch.tensor([[1.0, float("nan")]])) == \
        "non-finite weights in the batch ending at frame 100"
    assert guard_run([], params=torch.tensor([[1.0, 2.0]])) is None


def test_checkpoints_follow_the_interval_and_skip_the_runs_last_batch():
    saved: list[int] = []
    trainer = FakeTrainer(total=1000)
    hook = Checkpointing(lambda _: saved.append(trainer.frames), 300)
    post_steps_log = dispatch(hook, "post_steps_log")
    for frames in (100, 300, 400, 650, 700, 900, 1000):
        trainer.frames = frames
        post_steps_log(trainer, None)
        trainer.last_clock = frames
    assert saved == [300, 650, 900]   # 1000 is the last batch: train() saves it once
    assert hook.state_dict() == {}    # the trainer's restored clock says when the next one is due


def test_a_restored_clock_continues_the_checkpoint_schedule():
    saved: list[int] = []
    trainer = FakeTrainer(frames=1150, total=3000)
    trainer.last_clock = 1000  # resumed from a checkpoint at frame 1000 (interval 300: 900 was the last)
    dispatch(Checkpointing(lambda _: saved.append(trainer.frames), 300), "post_steps_log")(trainer, None)
    assert saved == []
    trainer.last_clock, trainer.frames = 1150, 1250
    dispatch(Checkpointing(lambda _: saved.append(trainer.frames), 300), "post_steps_log")(trainer, None)
    assert saved == [1250]


@pytest.mark.parametrize("why", ["stop_reason", "diverged"])
def test_no_periodic_checkpoint_of_a_stopping_or_diverged_batch(why):
    saved = []
    trainer = FakeTrainer(frames=300)
    setattr(trainer, why, "x")
    dispatch(Checkpointing(lambda _: saved.append(1), 300), "post_steps_log")(trainer, None)
    assert saved == []


def test_interval_zero_never_saves():
    saved = []
    trainer = FakeTrainer(frames=300)
    dispatch(Checkpointing(lambda _: saved.append(1), 0), "post_steps_log")(trainer, None)
    assert saved == []


def test_progress_shows_recent_return_fps_and_eval():
    shown = []
    progress = SimpleNamespace(update=lambda frames, info: shown.append((frames, info)))
    hook = ProgressHook(progress, SimpleNamespace(recent_returns=[1.0, 3.0]))
    trainer = FakeTrainer(frames=512)
    trainer.metrics = {"time/fps": 99.0, "eval/episode_return": 7.0, "loss/x": 1.0}
    hook.post_steps_log(trainer, None)
    assert shown == [(512, {"return": 2.0, "fps": 99.0, "eval": 7.0})]
    hook.stats.recent_returns = []
    trainer.metrics = {}
    hook.post_steps_log(trainer, None)
    assert shown[-1] == (512, {})


def test_the_buffer_hook_follows_the_losss_declaration():
    on = learning_hooks(PPOLoss(actor_critic(SPEC_D)))
    off = learning_hooks(SACLoss(actor_twin_q(SPEC_C, hidden=[8]), SPEC_C, gamma=0.99))
    assert isinstance(on["buffer"][0], OnPolicyMinibatches) and isinstance(off["buffer"][0], OffPolicyReplay)
    assert on["buffer"][0].stores == PPOLoss.reads and off["buffer"][0].stores == SACLoss.reads
    assert isinstance(on["divergence"][0], DivergenceGuard) and list(on) == ["buffer", "divergence"]


def test_a_steps_scalar_terms_are_checked_together_and_named_apart():
    """Issue #27: one stacked finiteness check per step, per set of terms (TD3's actor term comes
    every other step), still naming the term that went non-finite first."""
    module = nn.Linear(2, 1)
    guard, trainer = DivergenceGuard(module), FakeTrainer(300)
    steps = [{"loss_critic": 1.0, "loss_actor": 2.0}, {"loss_critic": 1.0},
             {"loss_critic": 1.0, "loss_actor": float("inf")}, {"loss_critic": 3.0}]
    for losses in steps:
        guard.post_loss(trainer, None, {k: torch.tensor(v) for k, v in losses.items()})
    assert list(guard._stacked) == [("loss_critic", "loss_actor"), ("loss_critic",)] and not guard._bad
    guard.post_steps(trainer)
    assert trainer.diverged == "non-finite loss_actor in the batch ending at frame 300"
    # terms that do not stack as they are (mixed dtypes) are checked one by one
    guard, trainer = DivergenceGuard(module), FakeTrainer(400)
    guard.post_loss(trainer, None, {"loss_a": torch.tensor(1.0, dtype=torch.float64),
                                    "loss_b": torch.tensor(float("nan"))})
    assert not guard._stacked and list(guard._bad) == ["loss_a", "loss_b"]
    guard.post_steps(trainer)
    assert trainer.diverged == "non-finite loss_b in the batch ending at frame 400"
