"""Built-in hooks at their edges: non-finite TD errors, hooks called out of the usual order,
a checkpoint boundary on the run's last batch, evaluation state before the first evaluation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.trainer.builtins import Checkpointing, DivergenceGuard
from rlrun.trainer.evaluation import Evaluation, Evaluator
from rlrun.trainer.hooks import ObservationStats, OffPolicyReplay, dispatch


def test_non_finite_td_errors_reach_the_sampler_as_zero_priority():
    # a diverging loss is stopped at the batch's end; until then its errors must not break the tree
    calls = []
    trainer = SimpleNamespace(buffer=SimpleNamespace(update_priority=lambda i, e: calls.append((i, e))))
    sub = TensorDict({"index": torch.arange(5), "priority_weight": torch.ones(5)}, [5])
    errors = torch.tensor([float("nan"), float("inf"), -float("inf"), 2.0, -0.5])
    OffPolicyReplay().post_loss(trainer, sub, {"td_error": errors})
    (index, error), = calls
    assert index.tolist() == [0, 1, 2, 3, 4] and error.tolist() == [0.0, 0.0, 0.0, 2.0, -0.5]


def test_observation_stats_declares_its_read_and_ignores_a_batchless_step():
    hook = ObservationStats()
    assert hook.io() == {"process_batch": (("observation",), ())}
    updates = []
    trainer = SimpleNamespace(policy=SimpleNamespace(normalizer=SimpleNamespace(update=updates.append)))
    hook.post_steps(trainer)  # optimiser steps with no new batch (e.g. a resumed run's first call)
    assert updates == []
    obs = torch.randn(4, 3)
    hook.process_batch(trainer, TensorDict({"observation": obs}, [4]))
    hook.post_steps(trainer)
    hook.post_steps(trainer)  # once per batch, not once per call
    assert len(updates) == 1 and updates[0] is obs


def test_divergence_guard_without_gradient_norms():
    # an optimiser wrapper that does not clip gradients keeps no norms
    trainer = SimpleNamespace(optimizer=SimpleNamespace(), frames=10, diverged=None)
    trainer.diverge = lambda what: setattr(trainer, "diverged", what)
    guard = DivergenceGuard(nn.Linear(2, 1))
    guard.post_loss(trainer, None, {"loss_a": torch.tensor(1.0)})
    guard.post_steps(trainer)
    assert trainer.diverged is None


def checkpoint_trainer(frames, total, last_clock=0):
    # a frame budget: the trainer's clock is its frame count, done once the total is reached
    return SimpleNamespace(frames=frames, clock=frames, done=frames >= total, stop_reason=None, diverged=None,
                           last_clock=last_clock)


def test_checkpoint_every_batch_with_interval_one():
    saved = []
    hook = Checkpointing(lambda _: saved.append(trainer.frames), 1)
    for frames in (100, 200, 300):
        trainer = checkpoint_trainer(frames, 1000, last_clock=frames - 100)
        dispatch(hook, "post_steps_log")(trainer, None)
    assert saved == [100, 200, 300]


def test_a_checkpoint_due_on_the_last_batch_is_left_to_the_final_save():
    saved = []
    hook = Checkpointing(lambda _: saved.append(trainer.frames), 500)
    for frames in (500, 1000):
        trainer = checkpoint_trainer(frames, 1000, last_clock=frames - 500)
        dispatch(hook, "post_steps_log")(trainer, None)
    assert saved == [500]


class OneStepEnv:
    num_envs = 1

    def reset(self, seed=None):
        return np.zeros((1, 2), dtype=np.float32)


def test_evaluation_state_before_the_first_evaluation_and_from_old_checkpoints():
    hook = Evaluation(Evaluator(OneStepEnv(), 1, seed=0), interval=250)
    # a checkpoint written before any evaluation (e.g. at frame 100, interval 250)
    assert hook.state_dict() == {"last": {}, "seconds": 0.0}
    other = Evaluation(Evaluator(OneStepEnv(), 1, seed=0), interval=250)
    other.seconds = 5.0
    # a checkpoint from before the dispatch filtered intervals (its next_at is the clock's now)
    other.load_state_dict({"next_at": 500, "last": {"eval/episode_return": 1.0}})  # no "seconds" yet
    assert (other.last, other.seconds) == ({"eval/episode_return": 1.0}, 0.0)


def test_train_stats_rates_of_offline_rounds_count_updates_and_no_frames():
    from rlrun.trainer.hooks import TrainStats

    logged = []
    trainer = SimpleNamespace(log=logged.append, frames=0, wall_time=1.0, optim_steps=10,
                              collector=SimpleNamespace(pop_episode_stats=lambda: ([], [])),
                              optimizer=SimpleNamespace(last_grad_norms={}))
    stats = TrainStats()
    stats.post_steps_log(trainer, None)
    trainer.wall_time, trainer.optim_steps = 5.0, 30  # 20 updates in 4 s, no env frames (a dataset run)
    stats.post_steps_log(trainer, None)
    assert "time/fps" not in logged[1]
    assert logged[1]["time/updates_per_s"] == 20 / 4.0


def test_dataset_samples_declare_the_dataset_keys_and_draw_each_optimisation_batch():
    from rlrun.trainer.hooks import DatasetSamples

    hook = DatasetSamples(frozenset({"reward", "action", "observation"}))
    assert hook.io() == {"process_optim_batch": ((), ("action", "observation", "reward"))}
    trainer = SimpleNamespace(buffer=SimpleNamespace(sample=lambda: "drawn"))
    assert hook.process_optim_batch(trainer, "an empty round") == "drawn"
