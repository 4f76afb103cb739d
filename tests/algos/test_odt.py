"""Online DT: its loss terms by hand, the learned temperature, a run through both phases, resume."""

from __future__ import annotations

import math
import signal
import sys
import time

import numpy as np
import pytest
import torch
from cli_utils import logged, only_run_dir, run_cli, spawn, summary_of
from dataset_fakes import detuned_balancers_dataset, random_dataset
from tensordict import TensorDict
from torch.distributions import Normal

from rlrun.algos.dt import ODTActionLoss, decision_transformer
from rlrun.core.specs import EnvSpec
from rlrun.trainer.optim import OptimizerStep

SPEC = EnvSpec((3,), "float32", False, 2)
DATASET = "test/pendulum/random-v0"


def tiny():
    torch.manual_seed(0)
    policy = decision_transformer(SPEC, hidden=16, n_layers=1, n_heads=2, max_timestep=50, dropout=0.0,
                                  head="tanh_normal", normalize_observations=False)
    return policy, ODTActionLoss(policy, SPEC, 0.99, init_temperature=0.3)


def batch(seed: int = 1) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    b, k = 3, 4
    mask = torch.tensor([[True] * 4, [False, True, True, True], [False, False, False, True]])
    return TensorDict({"return_to_go": torch.randn(b, k, 1, generator=g),
                       "observation": torch.randn(b, k, 3, generator=g),
                       "action": (torch.rand(b, k, 2, generator=g) * 1.8 - 0.9),
                       "timestep": torch.arange(k).repeat(b, 1), "mask": mask}, [b, k])


def test_odt_loss_terms_match_a_tanh_normal_computed_by_hand():
    policy, loss = tiny()
    td = batch()
    torch.manual_seed(5)
    out = loss(td)
    with torch.no_grad():
        head = policy.model(td["return_to_go"], td["observation"], td["action"], td["timestep"], td["mask"])
    mu, log_std = head.chunk(2, -1)
    base = Normal(mu, log_std.exp())
    a = td["action"]
    log_lik = (base.log_prob(torch.atanh(a)) - torch.log(1 - a.pow(2))).sum(-1)  # change of variables
    torch.manual_seed(5)
    u = mu + log_std.exp() * torch.randn_like(mu)  # the same reparameterised draw
    log_p = (base.log_prob(u) - torch.log(1 - torch.tanh(u).pow(2))).sum(-1)
    valid = td["mask"]
    n = valid.sum()
    want_ll = log_lik[valid].sum() / n
    want_entropy = -log_p[valid].sum() / n
    assert out["nll"].item() == pytest.approx(-want_ll.item(), rel=1e-4)
    assert out["entropy"].item() == pytest.approx(want_entropy.item(), rel=1e-4)
    assert out["temperature"].item() == pytest.approx(0.3, rel=1e-6)
    assert out["loss_model"].item() == pytest.approx(-(want_ll + 0.3 * want_entropy).item(), rel=1e-4)
    target = -2.0  # -action_dim
    assert loss.target_entropy == target
    assert out["loss_temperature"].item() == pytest.approx(0.3 * (want_entropy.item() - target), rel=1e-4)
    # the temperature's loss reaches only the temperature; the model's loss only the model
    out["loss_temperature"].backward()
    assert loss.log_temperature.grad is not None
    assert all(p.grad is None for p in policy.model.parameters())


@pytest.mark.parametrize("target, direction", [(-20.0, -1), (20.0, 1)])
def test_the_temperature_moves_toward_its_target_entropy(target, direction):
    policy, loss = tiny()
    loss._inner.target_entropy = target  # far below / above what the policy's entropy can be
    opt = OptimizerStep(loss.param_groups(), "adam", lr=1e-2)
    td = batch()
    start = loss.log_temperature.item()
    for _ in range(20):
        opt.step(loss(td))
    moved = loss.log_temperature.item() - start
    assert math.copysign(1.0, moved) == direction and abs(moved) > 0.1


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    random_dataset("Pendulum-v1", DATASET, root, max_steps=50)
    return root


def test_an_odt_run_goes_through_both_phases_and_ends_at_exactly_its_updates(tmp_path, capsys, data_root):
    args = ["algo=odt", "env=pendulum", f"dataset={DATASET}", f"dataset_root={data_root}",
            "total_updates=230", "online.offline_updates=100", "online.updates_per_round=50",
            "eval.interval_updates=100", "eval.episodes=2", "checkpoint.interval_updates=0", "logger=csv",
            "progress=false", "model.hidden=16", "model.max_timestep=60", "buffer.slice_len=4",
            "buffer.batch_size=8", "optim.warmup_steps=20", "env.max_episode_steps=40",
            "model.target_return=-100"]
    code, _, err = run_cli(args, tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    summary = summary_of(run_dir)
    assert summary["optim_steps"] == 230
    # rounds of 50 updates: 2 offline, then 3 online rounds (the last cut at 230), each one episode
    # of 40 steps on env=pendulum's sub-envs
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    n_envs = state["collector"]["frames"] // (3 * 40)
    assert state["collector"]["rounds"] == 5 and n_envs >= 1
    assert summary["frames"] == 3 * 40 * n_envs
    assert np.isfinite(summary["eval/episode_return"])
    assert "log_temperature" in state["loss"]
    # the trajectory buffer holds the dataset's 6 episodes and the collected ones
    assert len(state["buffer"]["episodes"]) == 6 + 3 * n_envs


def test_a_bad_online_value_is_one_line_naming_its_online_key(tmp_path, capsys, data_root):
    """A value of the ``online`` section is checked before anything is built, under its own key."""
    code, _, err = run_cli(["algo=odt", "env=pendulum", f"dataset={DATASET}", f"dataset_root={data_root}",
                            "online.updates_per_round=0", "logger=csv", "progress=false"], tmp_path, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "rlrun: error: online.updates_per_round: must be a positive integer" in err, err


def test_explain_describes_an_odt_run(tmp_path, capsys, data_root):
    """`rlrun explain` on oDT (its source keeps the dataset in its buffer, not as ``.data``)."""
    code, out, err = run_cli(["explain", "algo=odt", "env=pendulum", f"dataset={DATASET}",
                              f"dataset_root={data_root}"], tmp_path, capsys)
    assert code == 0, err
    assert f"OnlineDTSource: dataset {DATASET}" in out and "updates in rounds of" in out


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_sigtermed_odt_run_resumes_with_its_collected_episodes_and_ends_at_exactly_its_updates(
        tmp_path, data_root):
    # 2 offline rounds of 50 updates, then online rounds of one 40-step episode per sub-env
    args = ["algo=odt", "env=pendulum", f"dataset={DATASET}", f"dataset_root={data_root}",
            "total_updates=1000", "online.offline_updates=100", "online.updates_per_round=50",
            "eval.interval_updates=0", "eval.episodes=1", "checkpoint.interval_updates=50", "logger=csv",
            "progress=false", "model.hidden=16", "model.max_timestep=60", "buffer.slice_len=4",
            "buffer.batch_size=8", "optim.warmup_steps=20", "env.max_episode_steps=40",
            "model.target_return=-100"]
    proc = spawn(args, tmp_path)
    deadline = time.time() + 120
    before = None
    while time.time() < deadline:  # until a checkpoint holds collected episodes (checkpoints are atomic)
        assert proc.poll() is None, proc.communicate()
        ckpt = list(tmp_path.glob("runs/*/*/checkpoint.pt"))
        if ckpt:
            before = torch.load(ckpt[0], weights_only=False)
            if before["collector"]["rounds"] >= 4:
                break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    run_dir = only_run_dir(tmp_path)
    stopped = summary_of(run_dir)
    assert stopped["status"] == "interrupted" and 150 <= stopped["optim_steps"] < 1000, stopped
    saved = torch.load(run_dir / "checkpoint.pt", weights_only=False)  # what the resume starts from
    n_envs = saved["collector"]["frames"] // ((saved["collector"]["rounds"] - 2) * 40)
    # past the 2 offline rounds (the source's schedule, saved once): the buffer samples the episodes
    assert saved["collector"]["rounds"] > 2 and len(saved["buffer"]["episodes"]) > 6

    proc = spawn(args, tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"resuming from update {stopped['optim_steps']} of 1000" in err
    summary = summary_of(run_dir)
    assert summary["optim_steps"] == 1000 and summary["status"] == "finished"
    final = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    # 20 rounds in all: 2 offline, 18 online, counted across the two processes
    assert final["collector"]["rounds"] == 20 and summary["frames"] == 18 * 40 * n_envs
    # the buffer came back: the dataset's 6 episodes, those collected before the signal (unchanged,
    # in order), then those collected after the resume
    episodes = final["buffer"]["episodes"]
    assert len(episodes) == 6 + 18 * n_envs
    for old, new in zip(saved["buffer"]["episodes"], episodes):
        assert all(torch.equal(a, b) for a, b in zip(old, new))


ODT_LEARNING = [
    "algo=odt", "env=inverted_pendulum", "env.num_envs=8", "dataset=test/invertedpendulum/detuned-v0",
    "logger=csv", "progress=false", "threads=1", "checkpoint.interval_updates=0",
    # a small model: an update of the default one takes about half a second on one core here
    "model.hidden=32", "model.n_layers=1", "model.n_heads=1", "model.eval_context=10",
    "buffer.slice_len=10", "buffer.batch_size=64", "buffer.rtg_scale=100", "model.target_return=1000",
    "optim.name=adamw", "optim.lr=1e-3", "optim.weight_decay=1e-4", "optim.warmup_steps=100",
    # offline until the score has levelled off, then 24 rounds of 8 episodes and 100 updates each
    "online.offline_updates=1800", "online.updates_per_round=100", "total_updates=4200",
    "eval.interval_updates=600", "eval.episodes=20"]


@pytest.mark.learning
@pytest.mark.timeout(900)
def test_the_online_phase_improves_on_the_offline_score(tmp_path, capsys):
    """On InvertedPendulum-v5 episodes of detuned balancing controllers (40 episodes, returns 4 to
    117, mean 33): the mean of the last two evaluations (20 episodes each) beats the mean of the
    last two offline ones, at updates 1200 and 1800, by 15. And the temperature does its job: the
    policy's entropy starts below its target (-1, one action dim), the temperature rises from 0.1,
    and the entropy ends near the target (seeds 0 / 1 / 2: -2.12 / -2.17 / -2.18 at update 1500,
    -0.91 / -0.88 / -0.89 at the end; the temperature peaks at 0.90 / 0.92 / 0.91).

    Calibration (offline -> online means; seed 0 / 1 / 2): 42.6 -> 77.1, 38.8 -> 71.0,
    74.9 -> 91.3. The same run (seed 0) with no online phase (``online.offline_updates=4200``,
    so more offline updates in its place): 42.6 -> 41.8, which fails.
    """
    root = tmp_path / "datasets"
    detuned_balancers_dataset("test/invertedpendulum/detuned-v0", root)
    code, _, err = run_cli([*ODT_LEARNING, f"dataset_root={root}", "seed=0"], tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    evals = logged(run_dir, "eval/episode_return")
    offline, online = (evals[1200] + evals[1800]) / 2, (evals[3600] + evals[4200]) / 2
    assert summary_of(run_dir)["frames"] > 0  # it did collect
    assert online >= offline + 15.0, evals
    entropy, temperature = logged(run_dir, "train/entropy"), logged(run_dir, "train/temperature")
    assert entropy[1500] < -1.5 and abs(entropy[4200] - -1.0) < 0.3, entropy
    assert max(temperature.values()) > 0.5, temperature
