"""Evaluation hook: its schedule, and post_eval reaching hooks in the batch of the evaluation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from loop_fakes import FakeCollector, FakeLogger

from rlrun.trainer.evaluation import Evaluation
from rlrun.trainer.hooks import Hook
from rlrun.trainer.loop import Trainer


class FramesEvaluator:
    """Returns the trainer's frame count as the episode return, so each result names its batch."""

    def __init__(self):
        self.trainer = None

    def evaluate(self, act, context=None):
        assert context is None  # a Markov policy: no per-episode context
        return np.array([float(self.trainer.frames)] * 2)


class Listener(Hook):
    def __init__(self):
        self.seen: list = []
        self.logged_at: list = []

    def post_steps_log(self, trainer, batch):
        self.logged_at.append(trainer.frames)

    def post_eval(self, trainer, metrics):
        self.seen.append((trainer.batches, trainer.frames, metrics["eval/episode_return"]))


def _train(interval: int, batches: int = 5):
    evaluator, listener = FramesEvaluator(), Listener()
    policy = SimpleNamespace(act=None)
    # the listener comes first, as hooks from a config do, and still sees each result in its batch
    hooks = {"listener": listener, "evaluation": Evaluation(evaluator, interval=interval)}
    trainer = Trainer(FakeCollector(batches), None, None, hooks, epochs_per_batch=0,
                      logger=FakeLogger(), policy=policy)
    evaluator.trainer = trainer
    trainer.train()
    return trainer, listener


def test_post_eval_reaches_every_hook_in_the_batch_of_the_evaluation():
    trainer, listener = _train(interval=20)
    # every 20 frames (batches of 10), and after the last batch
    assert listener.seen == [(2, 20, 20.0), (4, 40, 40.0), (5, 50, 50.0)]
    logged = [(step, m["eval/episode_return"]) for m, step in trainer.logger.calls]
    assert logged == [(20, 20.0), (40, 40.0), (50, 50.0)]  # batches without an evaluation log nothing


def test_no_interval_evaluates_once_at_the_end():
    _, listener = _train(interval=0, batches=3)
    assert listener.seen == [(3, 30, 30.0)]
