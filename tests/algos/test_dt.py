"""Decision Transformer on the loop: the loss by hand, the acting context, a CLI run, a learning check."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_utils import only_run_dir, run_cli, summary_of
from dataset_fakes import mixed_dataset, random_dataset

from rlrun.algos.dt import DTActionLoss, decision_transformer, trajectory_slices, unit_actions
from rlrun.collectors.dataset import normalize_from_dataset
from rlrun.core.specs import EnvSpec
from rlrun.datasets.minari_format import read_dataset
from rlrun.envs.gym import make_gym_env
from rlrun.trainer.evaluation import Evaluator
from rlrun.trainer.optim import OptimizerStep

DATASET = "test/pendulum/random-v0"
SPEC = EnvSpec((3,), "float32", False, 2)


def tiny_policy(**kw):
    torch.manual_seed(0)
    return decision_transformer(SPEC, hidden=16, n_layers=1, n_heads=2, max_timestep=50, dropout=0.0, **kw)


def test_dt_loss_is_the_mean_squared_action_error_over_valid_steps_only():
    policy = tiny_policy()
    policy.normalizer.mean.copy_(torch.tensor([1.0, -1.0, 0.5]))
    policy.normalizer.var.copy_(torch.tensor([4.0, 1.0, 0.25]))
    loss = DTActionLoss(policy, SPEC, 0.99)
    b, k = 3, 4
    g = torch.Generator().manual_seed(1)
    mask = torch.tensor([[True] * 4, [False, False, True, True], [False, False, False, True]])
    from tensordict import TensorDict
    td = TensorDict({"return_to_go": torch.randn(b, k, 1, generator=g),
                     "observation": torch.randn(b, k, 3, generator=g),
                     "action": torch.rand(b, k, 2, generator=g) * 2 - 1,
                     "timestep": torch.arange(k).repeat(b, 1), "mask": mask}, [b, k])
    got = loss(td)["loss_action"]
    # by hand: the model on normalised observations, squared error averaged over the 7 valid steps
    norm_obs = (td["observation"] - policy.normalizer.mean) / torch.sqrt(policy.normalizer.var + 1e-8)
    with torch.no_grad():
        pred = policy.model(td["return_to_go"], norm_obs, td["action"], td["timestep"], mask)
    total, count = 0.0, 0
    for i in range(b):
        for t in range(k):
            if mask[i, t]:
                total += float(((pred[i, t] - td["action"][i, t]) ** 2).mean())
                count += 1
    assert count == 7
    assert got.item() == pytest.approx(total / count, rel=1e-5)
    # padding does not enter: changing padded actions' targets... only through the masked terms
    td2 = td.clone()
    td2["action"][1, 0] = 5.0  # padded step: seen by no valid query (keys masked), not a target
    assert loss(td2)["loss_action"].item() == pytest.approx(got.item(), rel=1e-6)
    td3 = td.clone()
    td3["action"][1, 3] += 0.5  # a valid target: the loss moves
    assert loss(td3)["loss_action"].item() != pytest.approx(got.item(), rel=1e-6)


def test_the_policy_conditions_on_what_is_left_of_the_target_and_restarts_finished_episodes():
    policy = tiny_policy(eval_context=3, target_return=100.0, rtg_scale=10.0)
    policy.reset_context()
    obs = torch.zeros(2, 3)
    a = policy.act(obs)
    ctx = policy._context
    assert torch.equal(ctx.return_to_go[:, -1, 0], torch.tensor([10.0, 10.0]))
    policy.record(a, torch.tensor([5.0, 20.0]), torch.tensor([False, True]))
    policy.act(obs)
    # row 0 is 5 / 10 lower; row 1 ended and starts at the target again, with a fresh context
    assert torch.allclose(ctx.return_to_go[:, -1, 0], torch.tensor([9.5, 10.0]))
    assert ctx.mask.tolist() == [[False, True, True], [False, False, True]]
    assert ctx.timestep[:, -1].tolist() == [1, 0]


def test_dataset_actions_are_mapped_into_the_policys_unit_box(tmp_path):
    random_dataset("Pendulum-v1", DATASET, tmp_path, episodes=1, max_steps=20)
    data = read_dataset(DATASET, str(tmp_path))
    unit = unit_actions(data)
    assert torch.allclose(unit * 2.0, data.action.float(), atol=1e-6)  # Pendulum's box is [-2, 2]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    random_dataset("Pendulum-v1", DATASET, root)
    return root


def test_a_dt_run_trains_exactly_its_updates_and_evaluates(tmp_path, capsys, data_root):
    args = ["algo=dt", "env=pendulum", f"dataset={DATASET}", f"dataset_root={data_root}", "total_updates=250",
            "trainer.optim_steps_per_epoch=100", "eval.interval_updates=100", "eval.episodes=2",
            "checkpoint.interval_updates=0", "logger=csv", "progress=false", "model.hidden=32",
            "model.max_timestep=200", "buffer.slice_len=5", "buffer.batch_size=16", "optim.warmup_steps=50",
            "model.target_return=-100"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    summary = summary_of(only_run_dir(tmp_path))
    assert summary["optim_steps"] == 250 and summary["frames"] == 0
    assert np.isfinite(summary["eval/episode_return"]) and summary["eval/episodes"] == 2
    state = torch.load(only_run_dir(tmp_path) / "checkpoint.pt", weights_only=True)
    assert state["loss"]["policy.normalizer.mean"].abs().sum() > 0  # the dataset's statistics, saved


@pytest.mark.learning
def test_a_dt_conditioned_on_a_high_return_scores_higher_than_on_a_low_one(tmp_path):
    """Measured (seed 0, 1500 updates, 10 episodes): conditioned on the dataset's best return -685,
    on its worst -844 (gap 159). A model that ignores its return-to-go input acts the same under
    both targets (gap 0); the threshold is 100."""
    torch.set_num_threads(1)
    mixed_dataset("test/pendulum/mixed-v0", tmp_path)
    data = read_dataset("test/pendulum/mixed-v0", str(tmp_path))
    returns = data.episode_returns()
    torch.manual_seed(0)
    policy = decision_transformer(SPEC_PENDULUM, hidden=64, n_layers=2, n_heads=2, max_timestep=100,
                                  dropout=0.1, eval_context=10, rtg_scale=100.0)
    normalize_from_dataset(policy, data)
    buffer = trajectory_slices(data, batch_size=64, slice_len=10, rtg_scale=100.0, seed=0)
    loss = DTActionLoss(policy, SPEC_PENDULUM, 0.99)
    opt = OptimizerStep(loss.param_groups(), "adamw", lr=1e-3, weight_decay=1e-4, max_grad_norm=0.25,
                        lr_schedule="warmup", warmup_steps=100)
    for _ in range(1500):
        opt.step(loss(buffer.sample()))
    env = make_gym_env("Pendulum-v1", num_envs=5, max_episode_steps=100)
    evaluator = Evaluator(env, episodes=10, seed=123)
    scores = {}
    for name, target in {"high": float(returns.max()), "low": float(returns.min())}.items():
        policy.target_return = target
        scores[name] = evaluator.evaluate(policy.act, context=policy).mean()
    env.close()
    assert scores["high"] > scores["low"] + 100.0, scores


SPEC_PENDULUM = EnvSpec((3,), "float32", False, 1)
