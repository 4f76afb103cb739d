"""reporting_hooks from a small config built here (not the config tree): which hooks, with which settings."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

import rlrun.trainer.video
from rlrun.trainer.builtins import learning_hooks, reporting_hooks
from rlrun.trainer.evaluation import Evaluation
from rlrun.trainer.hooks import Every, LRProgress, TrainStats

EVAL_ENV = SimpleNamespace(num_envs=2)


def cfg(**eval_cfg):
    return OmegaConf.create({"seed": 7, "env": {"id": "CartPole-v1"},
                             "eval": {"episodes": 5, "interval_frames": 3000, **eval_cfg}})


def test_constant_lr_gets_metrics_then_evaluation_with_the_configured_schedule():
    hooks = reporting_hooks(cfg(target_return=195.0), SimpleNamespace(lr_schedule="constant"), EVAL_ENV,
                            "cpu")
    assert list(hooks) == ["train_stats", "evaluation"]
    assert isinstance(hooks["train_stats"][0], TrainStats)
    evaluation, why = hooks["evaluation"]
    assert isinstance(evaluation, Evaluation) and why == "built in: eval.* (every eval.interval_frames)"
    assert (evaluation.every, evaluation.target) == ({"post_steps_log": Every(3000, final=True)}, 195.0)
    evaluator = evaluation.evaluator
    assert evaluator.env is EVAL_ENV and evaluator.episodes == 5 and evaluator.device == "cpu"
    assert evaluator.seed == 7 + 1_000_003  # never a training env's seed (those are seed + i)
    assert evaluator.quota.tolist() == [3, 2]


def test_linear_lr_comes_first_and_names_its_key():
    hooks = reporting_hooks(cfg(), SimpleNamespace(lr_schedule="linear"), EVAL_ENV, "cpu")
    assert list(hooks) == ["linear_lr", "train_stats", "evaluation"]
    lr, why = hooks["linear_lr"]
    assert isinstance(lr, LRProgress) and why == "built in: optim.lr_schedule=linear"
    assert hooks["train_stats"][1] == "built in: metrics"
    assert hooks["evaluation"][0].target is None  # no target_return: the run never stops early


class RecordedVideo:
    def __init__(self, env_cfg, seed, folder, every, device):
        self.args = (env_cfg, seed, folder, every, device)


@pytest.mark.parametrize(("run_dir", "every", "folder"), [
    (Path("/tmp/run1"), 3, Path("/tmp/run1/videos")),
    (None, None, Path("videos")),  # no run dir: videos/ under the working directory; every defaults to 1
])
def test_eval_video_is_added_only_when_asked_with_the_runs_folder(monkeypatch, run_dir, every, folder):
    monkeypatch.setattr(rlrun.trainer.video, "EvalVideo", RecordedVideo)
    config = cfg(video=True, **({} if every is None else {"video_every": every}))
    hooks = reporting_hooks(config, SimpleNamespace(lr_schedule="constant"), EVAL_ENV, "cuda:1",
                            run_dir=run_dir)
    video, why = hooks["eval_video"]
    assert list(hooks)[-1] == "eval_video" and why == "built in: eval.video=true"
    env_cfg, seed, got_folder, got_every, device = video.args
    assert env_cfg == config.env and seed == 7 + 1_000_003 and got_folder == folder
    assert got_every == (every or 1) and device == "cuda:1"
    assert "eval_video" not in reporting_hooks(cfg(video=False), SimpleNamespace(lr_schedule="constant"),
                                               EVAL_ENV, "cpu")


def test_learning_hooks_say_where_they_come_from():
    # `rlrun explain` prints these origins beside each hook
    on = learning_hooks(SimpleNamespace(on_policy=True, reads=("observation",), parameters=lambda: []))
    off = learning_hooks(SimpleNamespace(on_policy=False, reads=("observation",), parameters=lambda: []))
    assert on["buffer"][1] == "built in: the loss learns on-policy"
    assert off["buffer"][1] == "built in: the loss learns off-policy"
    assert on["divergence"][1] == off["divergence"][1] == "built in: stop at non-finite losses or weights"


def test_an_offline_run_draws_its_batches_from_the_dataset():
    from rlrun.trainer.hooks import DatasetSamples

    loss = SimpleNamespace(on_policy=False, reads=("observation",), parameters=lambda: [])
    hooks = learning_hooks(loss, dataset_keys=frozenset({"observation", "action"}))
    buffer, why = hooks["buffer"]
    assert isinstance(buffer, DatasetSamples) and buffer.keys == ("action", "observation")
    assert why == "built in: the run learns from dataset=..."
    assert list(hooks) == ["buffer", "divergence"]


def test_an_update_budget_evaluates_on_its_update_interval_on_the_run_device():
    config = cfg(interval_updates=40)
    evaluation, why = reporting_hooks(config, SimpleNamespace(lr_schedule="constant"), EVAL_ENV, "cuda:1",
                                      unit="updates")["evaluation"]
    assert evaluation.every == {"post_steps_log": Every(40, final=True)}
    assert why == "built in: eval.* (every eval.interval_updates)"
    assert evaluation.evaluator.device == "cuda:1"


def test_an_agent_group_is_evaluated_by_the_one_evaluator_with_team_returns():
    import numpy as np
    import torch

    from rlrun.core.specs import GROUP, EnvSpec

    class TwoStepGroup:
        """Two sub-envs of three agents whose episodes end every second step; rewards are tensors."""

        num_envs, spec = 2, EnvSpec((1,), np.dtype("float32"), False, 1, group=GROUP, n_agents=3)

        def reset(self, seed=None):
            self.t = 0
            return torch.zeros(2, 3, 1)

        def step(self, action):
            self.t += 1
            reward = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]]) * self.t  # team: 2 t and t
            ended = torch.full((2,), self.t % 2 == 0)
            obs = torch.zeros(2, 3, 1)
            return obs, reward, ended, torch.zeros(2, dtype=torch.bool), obs

    constant = SimpleNamespace(lr_schedule="constant")
    evaluation, _ = reporting_hooks(cfg(episodes=4), constant, TwoStepGroup(), "cpu")["evaluation"]
    single, _ = reporting_hooks(cfg(), constant, EVAL_ENV, "cpu")["evaluation"]
    assert type(evaluation.evaluator) is type(single.evaluator)  # one evaluator for both layouts
    returns = evaluation.evaluator.evaluate(lambda obs: torch.zeros(*obs.shape[:-1], 1))
    # the agents' mean reward summed: episode 1 (t=1, 2) gives 6 and 3, episode 2 (t=3, 4) 14 and 7
    assert sorted(returns.tolist()) == [3.0, 6.0, 7.0, 14.0]
