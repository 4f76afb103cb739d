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


class ScriptedEnv:
    """Two sub-envs; step t gives rewards REWARDS[t]; sub-env 0 terminates at t=1, sub-env 1 is
    truncated at t=2 (one episode each)."""

    num_envs = 2
    REWARDS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]

    def __init__(self):
        self.t = 0

    def reset(self, seed=None):
        self.t = 0
        return np.zeros((2, 1), dtype=np.float32)

    def step(self, action):
        reward = np.array(self.REWARDS[self.t])
        terminated, truncated = np.array([self.t == 1, False]), np.array([False, self.t == 2])
        self.t += 1
        return None, reward, terminated, truncated, np.full((2, 1), float(self.t), dtype=np.float32)


class ContextPolicy:
    """Acts 0.5 * observation and records what the evaluator tells it (a Decision Transformer's hooks)."""

    def __init__(self):
        self.calls: list = []

    def act(self, obs):
        return 0.5 * obs

    def reset_context(self):
        self.calls.append("reset")

    def record(self, action, reward, done):
        self.calls.append((action.flatten().tolist(), reward.tolist(), done.tolist()))


def test_the_evaluator_feeds_a_context_policy_each_step_and_resets_it_first():
    from rlrun.trainer.evaluation import Evaluator

    policy = ContextPolicy()
    returns = Evaluator(ScriptedEnv(), 2, seed=0).evaluate(policy.act, context=policy)
    assert sorted(returns.tolist()) == [1.0 + 3.0, 2.0 + 4.0 + 6.0]
    assert policy.calls == ["reset",
                            ([0.0, 0.0], [1.0, 2.0], [False, False]),
                            ([0.5, 0.5], [3.0, 4.0], [True, False]),  # done = terminated or truncated
                            ([1.0, 1.0], [5.0, 6.0], [False, True])]


def test_evaluation_passes_the_policy_as_context_only_when_it_records():
    seen = []

    class Recording:
        def evaluate(self, act, context=None):
            seen.append(context)
            return np.array([1.0])

    trainer = SimpleNamespace(log=lambda m: None, call_hooks=lambda *a: None)
    dt_like, markov = ContextPolicy(), SimpleNamespace(act=None)
    for policy in (dt_like, markov):
        trainer.policy = policy
        Evaluation(Recording(), interval=1).run(trainer)
    assert seen[0] is dt_like and seen[1] is None
