"""The benchmark suite's references compute what rlrun computes (timings are not tested)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rlrun.benchmarks import BENCHMARKS
from rlrun.benchmarks import gae as gae_bench
from rlrun.benchmarks.__main__ import parse_args
from rlrun.objectives.gae import gae


def test_gae_references_agree_with_rlrun_on_small_data():
    d = gae_bench.make_data(7, 300, done_freq=0.02, seed=1)
    ours = gae(**{k: torch.from_numpy(v) for k, v in d.items()}, gamma=0.99, lmbda=0.95)[0].numpy()
    ref = gae_bench.reference64(d)
    time_major = {k: np.ascontiguousarray(v.T) for k, v in d.items()}
    for other in (gae_bench.gae_numpy(**time_major, gamma=0.99, lmbda=0.95)[0].T,
                  gae_bench.gae_torch(**{k: torch.from_numpy(v) for k, v in d.items()},
                                      gamma=0.99, lmbda=0.95)[0].numpy(), ours):
        assert np.abs(other - ref).max() < 1e-5
    numba_ref = gae_bench.make_gae_numba()
    if numba_ref is not None:
        assert np.abs(numba_ref(**d, gamma=0.99, lmbda=0.95)[0] - ref).max() < 1e-5


def test_gae_benchmark_runs_and_reports_the_error_check():
    result = gae_bench.run(quick=True, reps=1)
    assert result["rlrun_matches_1e-5"], result["rlrun_max_abs_err"]
    assert {r["impl"] for r in result["rows"]} >= {"rlrun", "numpy", "torch", "rlrun[torch]"}
    assert "| rlrun |" in gae_bench.render(result)


def test_command_line_names_the_benchmarks():
    assert parse_args(["end_to_end", "--quick"]).benchmarks == ["end_to_end"]
    with pytest.raises(SystemExit):
        parse_args(["gea"])
    assert "end_to_end" in BENCHMARKS


def test_collection_table5_runs_the_table5_benchmark_over_the_given_workers():
    args = parse_args(["collection", "--workers", "1,2,4", "--table5"])
    assert args.benchmarks == ["table5"] and args.workers == (1, 2, 4)
    assert parse_args(["collection", "gae"]).benchmarks == ["collection", "gae"]
    with pytest.raises(SystemExit):
        parse_args(["collection", "--workers", "0,2", "--table5"])


def test_marl_parts_references_compute_what_rlrun_computes():
    from rlrun.benchmarks import marl_parts

    outs = {k: f() for k, f in marl_parts.group_mlp_forwards(16).items()}
    for ref in ("loop", "torch.func"):
        torch.testing.assert_close(outs[ref], outs["rlrun"])
    cases = marl_parts.gae_cases(5, 40)
    adv, target = cases["rlrun"]()
    for ref in ("agent_major", "moved_copy"):
        adv_ref, target_ref = cases[ref]()
        torch.testing.assert_close(adv, adv_ref.transpose(1, 2))
        torch.testing.assert_close(target, target_ref.transpose(1, 2))


def test_vmas_benchmark_sides_step_the_same_env():
    vmas = pytest.importorskip("vmas")
    from rlrun.benchmarks import vmas as vmas_bench
    from rlrun.envs.vmas import VmasEnv

    ours = VmasEnv(vmas_bench.SCENARIO, num_envs=4, max_steps=vmas_bench.STEPS, seed=0,
                   n_agents=vmas_bench.N_AGENTS)
    obs_ours = ours.reset(seed=0)
    bare = vmas.make_env(vmas_bench.SCENARIO, num_envs=4, device="cpu", continuous_actions=True,
                         max_steps=vmas_bench.STEPS, seed=0, n_agents=vmas_bench.N_AGENTS)
    obs_bare = bare.reset(seed=0)
    torch.testing.assert_close(obs_ours, torch.stack(obs_bare, 1))
    for _ in range(3):
        action = torch.rand(4, vmas_bench.N_AGENTS, 2) * 2 - 1
        out = ours.step(action)
        obs_bare, rew_bare, _, _ = bare.step(list(action.unbind(1)))
        torch.testing.assert_close(out.next_obs, torch.stack(obs_bare, 1))
        torch.testing.assert_close(out.reward, torch.stack(rew_bare, 1))
    result = vmas_bench.run(quick=True, reps=1)
    assert [r["envs"] for r in result["rows"]] == [1, 10]
    assert "| 1 |" in vmas_bench.render(result)


def test_table5_times_every_case_on_the_same_frames():
    from rlrun.benchmarks import table5

    row = table5.bench_one("Pendulum-v1", workers=1, frames=200, rollout=100, reps=1)
    assert all(len(row["times_s"][c]) == 1 and row[f"fps_{c}"] > 0 for c in table5.CASES)
    assert row["ratio_gym_sync"] == 1.0
    rendered = table5.render({"rows": [row], "notes": []})
    assert "| Pendulum-v1 | 1 |" in rendered and "multi_async fps" in rendered


def test_offline_update_benchmark_times_both_iql_steps():
    from rlrun.benchmarks import offline_update

    result = offline_update.run(quick=True, reps=1)
    assert [r["workload"].split()[0] for r in result["rows"]] == ["IQL", "DT"]
    for row in result["rows"]:
        assert row["rlrun_per_s"] > 0 and row["hand_per_s"] > 0 and 0 < row["ratio"] < 100
    assert "IQL" in offline_update.render(result) and "DT update" in offline_update.render(result)


def test_offline_update_sides_compute_the_same_dt_step():
    """From the same weights and batches (dropout off), three updates leave both sides' DT equal."""
    from rlrun.benchmarks import offline_update as ou

    torch.manual_seed(0)
    mine = ou.dt_policy()
    with torch.no_grad():
        mine.normalizer.mean.fill_(0.5), mine.normalizer.var.fill_(4.0)  # a normaliser that matters
    ref = copy.deepcopy(mine)
    mine.model.eval(), ref.model.eval()  # dropout off: the same function on both sides
    batches = ou.dt_batches()
    before = [p.detach().clone() for p in mine.model.parameters()]
    ou.rlrun_dt(batches, mine, warmup_steps=2)(3)  # a short warm-up: weights move ~lr = 1e-4 per step
    ou.bare_dt(batches, ref, warmup_steps=2)(3)
    for a, b in zip(mine.model.parameters(), ref.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    moved = max((p - p0).abs().max().item() for p, p0 in zip(mine.model.parameters(), before))
    assert moved > 1e-5  # both sides updated, far beyond the tolerance


def test_offline_update_sides_compute_the_same_iql_step():
    """From the same weights and batch, one step moves V and the actor identically on both sides.

    (Q differs by design: the reference's Q target reads the V it has just updated, rlrun's
    the V of the same step.)
    """
    from rlrun.benchmarks import offline_update as ou

    torch.manual_seed(0)
    loss = ou.iql_loss()
    actor, v = copy.deepcopy(loss.actor.net), copy.deepcopy(loss.value.net)
    qs = []
    for k in range(2):  # unstack the twin-Q weights into two nn.Sequential nets
        q = ou._mlp([ou.OBS + ou.ACT, 256, 256, 1], torch.nn.ReLU)
        for lin, w, b in zip([m for m in q if isinstance(m, torch.nn.Linear)], loss.critic.weights,
                             loss.critic.biases):
            lin.weight.data.copy_(w[k].T)
            lin.bias.data.copy_(b[k, 0])
        qs.append(q)
    batches = ou.iql_batches()
    ou.rlrun_iql(batches, loss)(1)
    ou.handwritten_iql(batches, (actor, qs[0], qs[1], v))(1)
    for mine, ref in ((loss.value.net, v), (loss.actor.net, actor)):
        for a, b in zip(mine.parameters(), ref.parameters()):
            # Adam moves each weight by ~lr = 3e-4; float noise in tiny gradients stays far below
            torch.testing.assert_close(a, b, rtol=0, atol=2e-5)


def test_end_to_end_pairs_alternate_and_give_the_whole_process_ratio(monkeypatch):
    from rlrun.benchmarks import end_to_end

    order = []

    def fake(lib, seconds):
        def run(task, seed):
            order.append(lib)
            return {"frames": 100_000, "return": 500.0, "reached": True, "train_s": seconds - 1,
                    "eval_s": 0.5, "process_s": seconds}
        return run

    monkeypatch.setattr(end_to_end, "run_rlrun", fake("rlrun", 10.0))
    monkeypatch.setattr(end_to_end, "run_sb3", fake("sb3", 40.0))
    monkeypatch.setattr(end_to_end, "_has_sb3", lambda python: True)
    monkeypatch.setenv(end_to_end.SB3_PYTHON_ENV, "/some/venv/bin/python")
    assert end_to_end.sb3_python() == "/some/venv/bin/python"
    result = end_to_end.run(seeds=2, tasks=["ppo_cartpole_zoo"])
    assert order == ["rlrun", "sb3", "sb3", "rlrun"]  # a drift in load favours neither side
    assert result["summary"]["ppo_cartpole_zoo"]["median_process_ratio"] == 0.25
    assert "whole-process time ratio 0.25 over 2 pairs" in end_to_end.render(result)
