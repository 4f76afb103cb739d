"""The peer-fidelity benchmark: its statistics (values worked out by hand), its mapping, a smoke run."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from rlrun.benchmarks import fidelity, peers


def test_auc_is_the_trapezoid_over_the_frames_spanned():
    # (0,0)-(10,10): area 50; (10,10)-(20,10): area 100; over 20 frames: 7.5
    assert fidelity.auc([(0, 0.0), (10, 10.0), (20, 10.0)]) == pytest.approx(7.5)
    # unevenly spaced: (10,2)-(30,4): 60, (30,4)-(40,0): 20; over 30 frames
    assert fidelity.auc([(10, 2.0), (30, 4.0), (40, 0.0)]) == pytest.approx(80 / 30)
    assert fidelity.auc([(5, 3.0)]) == 3.0


def test_iqm_difference_point_and_a_degenerate_interval():
    # IQM of [0, 1, 2, 10, 100]: one value cut at each end, (1 + 2 + 10) / 3; of four 5s: 5
    diff, low, high = fidelity.iqm_difference([100, 0, 10, 2, 1], [5, 5, 5, 5])
    assert diff == pytest.approx(13 / 3 - 5)
    assert low <= diff <= high
    # constant sides: every resample gives the same IQMs, so the interval is the point
    assert fidelity.iqm_difference([7.0] * 6, [4.0] * 5) == pytest.approx((3.0, 3.0, 3.0))


def test_difference_interval_covers_the_true_gap_with_the_width_normal_theory_gives():
    rng = np.random.default_rng(1)
    a, b = rng.normal(10.0, 1.0, 400), rng.normal(0.0, 1.0, 400)
    diff, low, high = fidelity.iqm_difference(list(a), list(b))
    assert low < 10.0 < high
    # the mean's 95 % width would be 2 * 1.96 * sqrt(2 / 400) = 0.277; the IQM of a normal sample is a
    # little less efficient (variance about 1.2x the mean's), so its width is about 0.30
    assert 0.22 < high - low < 0.40, (low, high)


def test_verdicts_equivalent_different_inconclusive():
    base = list(np.linspace(0.0, 1.0, 20))
    assert fidelity.verdict(base, base, margin=0.5)["verdict"] == "equivalent"
    assert fidelity.verdict([x + 5.0 for x in base], base, margin=0.5)["verdict"] == "different"
    # 3 seeds each with a wide spread: the interval spans 0 and the margin's edge
    wide = fidelity.verdict([0.0, 10.0, 20.0], [1.0, 11.0, 19.0], margin=1.0)
    assert wide["verdict"] == "inconclusive"
    # a small real gap inside the margin is equivalent, though its 95 % interval excludes 0
    many = list(np.linspace(0.0, 1.0, 40))
    small = fidelity.verdict([x + 0.4 for x in many], many, margin=0.8)
    assert small["diff_low"] > 0 and small["verdict"] == "equivalent"


def test_self_equivalence_is_the_tests_power_at_no_difference():
    # one value repeated: every draw and resample gives a difference of exactly 0
    assert fidelity.self_equivalence([500.0] * 10, margin=47.8) == 1.0
    # runs that end at 0 or at 500 (a preset that collapses): 10 seeds' IQM swings by hundreds
    assert fidelity.self_equivalence([0.0, 500.0] * 5, margin=47.8) == 0.0
    # normal, sd 100, margin 47.8: the difference of two IQMs has sd about 100 * sqrt(2 * 1.2 / n)
    # (IQM variance ~1.2x the mean's): 49 at 10 seeds, so the 90 % interval's half-width (~80) is
    # past the margin; 11 at 200 seeds (half-width ~18), inside it whenever the point is within ~30
    spread = np.random.default_rng(3).normal(0.0, 100.0, 200)
    assert fidelity.self_equivalence(list(spread[:10]), margin=47.8) < 0.1
    assert fidelity.self_equivalence(list(spread), margin=47.8) > 0.9
    some = list(spread[:30])
    assert fidelity.self_equivalence(some, 47.8) == fidelity.self_equivalence(some, 47.8)  # seeded


def test_summarise_reads_final_and_auc_per_side():
    task = peers.TASKS["ppo_cartpole"]
    runs = [
        {
            "lib": lib,
            "seed": s,
            "return": ret,
            "curve": [(10, 0.0), (20, ret)],
            "train_s": 1.0,
            "process_s": 2.0,
        }
        for lib, rets in (("rlrun", [500, 500, 480]), ("peer", [500, 490, 500]))
        for s, ret in enumerate(rets)
    ]
    row = fidelity.summarise(task, runs)
    assert row["margin"] == pytest.approx(0.1 * (500 - 22))
    assert row["rlrun_final"] == pytest.approx(np.mean([500, 500, 480]))  # 3 values: nothing cut
    assert row["peer_auc"] == pytest.approx(np.mean([250, 245, 250]))
    assert row["final_diff"] == pytest.approx(-10 / 3)
    # the peer's three AUCs (250, 245, 250) against themselves: always within 5 of each other
    assert row["auc_peer_self"] == 1.0


def test_page_is_the_report_document_with_an_html_table():
    """fidelity.html goes through rlrun.report.page.document (one style, one skeleton): the table as
    rows of cells, a verdict per metric, the curves as inlined PNGs."""
    from rlrun.report.page import STYLE

    runs = [
        {"task": "sac_pendulum", "lib": lib, "seed": s, "return": ret,
         "curve": [(1000, -1200.0), (10_000, ret)], "train_s": 1.0, "process_s": 2.0}
        for lib, rets in (("rlrun", [-150, -160, -140]), ("peer", [-155, -150, -145]))
        for s, ret in enumerate(rets)
    ]  # fmt: skip
    page = fidelity.html({"peer": "sb3", "runs": runs}, "cmd")
    assert (
        page.count(STYLE) == 1 and page.startswith("<!DOCTYPE html>") and "<title>rlrun peer fidelity" in page
    )
    assert page.count("<tr><td>sac_pendulum</td>") == 2 and "<th>SB3 IQM [95% CI]</th>" in page
    assert page.count("<td>equivalent</td>") + page.count("<td>inconclusive</td>") == 2
    assert page.count("data:image/png;base64,") == 1 and "<pre>" not in page  # no Markdown in a <pre>
    assert "<td>polyak tau</td><td>0.005</td>" in page  # the mapping, a table too


def test_child_cpu_seconds_are_the_childs_own_not_its_wall_time():
    """A child that burns 0.3 s of CPU and sleeps 0.5 s: its CPU time is >= 0.3 s and well under its wall."""
    code = "import time\nwhile time.process_time() < 0.3: pass\ntime.sleep(0.5)\nprint('ok')"
    done, wall, cpu = fidelity._child([sys.executable, "-c", code])
    assert done.returncode == 0 and done.stdout.strip() == "ok"
    assert 0.3 <= cpu <= wall - 0.4


def test_mapping_translates_what_differs_in_form():
    ppo = peers.peer_spec(peers.TASKS["ppo_cartpole"])["model"]
    assert ppo["vf_coef"] == 0.25  # rlrun's value loss is critic_coef * 0.5 * err^2, SB3's vf_coef * err^2
    assert ppo["policy_kwargs"]["net_arch"] == {"pi": [64, 64], "vf": [64, 64]}
    assert ppo["learning_rate"] == ("linear", 1e-3) and ppo["n_steps"] * 8 == 1024
    dqn_task = peers.TASKS["dqn_cartpole"]
    dqn = peers.peer_spec(dqn_task)["model"]
    assert dqn["exploration_fraction"] == pytest.approx(0.30)  # 5k warm-up + 25k annealing of 100k
    overrides = peers.rlrun_overrides(dqn_task)
    assert dqn["target_update_interval"] == 500 and "+hooks.target_update.interval_frames=500" in overrides
    assert "hooks.target_update.interval_updates=null" in overrides  # frames, not updates, on both sides
    ddpg = peers.peer_spec(peers.TASKS["ddpg_pendulum"])["model"]
    assert ddpg["action_noise"] == ("ou", 0.02, 0.15, 1.0) and ddpg["train_freq"] == 200
    for task in peers.TASKS.values():
        for s in peers.mapping(task):
            assert s.rlrun and (s.peer or s.note), (task.name, s.name)


def test_every_task_composes_on_rlrun_with_its_mapped_values(tmp_path):
    """Each task's overrides name keys rlrun has: one composed config per task (`--cfg job`)."""
    for task in peers.TASKS.values():
        out = subprocess.run(
            [sys.executable, "-m", "rlrun", *peers.rlrun_overrides(task), "--cfg", "job"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert out.returncode == 0, (task.name, out.stderr[-800:])
        assert f"total_frames: {task.frames}" in out.stdout


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert fidelity.main(["--tasks", "nope"]) == 2
    assert fidelity.main(["--peer", "sbx", "--tasks", "a2c_cartpole"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("error: --tasks") and "SBX has no a2c_cartpole" in err[1]


def test_two_seed_smoke_run_writes_table_csv_and_page(tmp_path):
    """CI's smoke of the benchmark (not its statistics): PPO CartPole, two short seeds a side."""
    pytest.importorskip("stable_baselines3")
    code = fidelity.main(
        ["--tasks", "ppo_cartpole", "--seeds", "2", "--frames", "2048", "--out", str(tmp_path)]
    )
    assert code == 0
    result = json.loads((tmp_path / "fidelity.json").read_text())
    assert sorted((r["lib"], r["seed"]) for r in result["runs"]) == [
        ("peer", 0),
        ("peer", 1),
        ("rlrun", 0),
        ("rlrun", 1),
    ]
    for r in result["runs"]:
        assert r["frames"] == 2048 and r["curve"][-1] == [2048, r["return"]] and 8 < r["return"] <= 500
        assert 0 < r["cpu_s"] < 4 * r["process_s"]  # one torch thread a side (a few helper threads)
    table = (tmp_path / "fidelity.md").read_text()
    assert table.count("| ppo_cartpole |") == 2 and "0-1 (2)" in table
    page = (tmp_path / "fidelity.html").read_text()
    assert page.count("data:image/png;base64,") == 1 and "model.hidden=[64,64]" in page
    assert "ppo_cartpole" in (tmp_path / "fidelity.csv").read_text()


def test_one_side_rerun_merges_with_the_other_sides_earlier_runs(monkeypatch, tmp_path):
    """``--sides rlrun`` runs rlrun alone (after a change to rlrun); merged with an earlier run of
    both sides, its runs replace rlrun's and the peer's stay: one row per metric with a verdict."""
    task = peers.TASKS["dqn_cartpole"]
    done = []

    def fake(side: str, value: float):
        def run(*args, **kwargs):
            done.append(side)
            return {"curve": [[task.frames, value]], "return": value, "train_s": 1.0, "eval_s": 0.1,
                    "process_s": 2.0, "cpu_s": 1.0}
        return run

    monkeypatch.setattr(fidelity, "run_peer", fake("peer", 500.0))
    monkeypatch.setattr(fidelity, "run_rlrun", fake("rlrun", 100.0))
    (tmp_path / "both").mkdir(), (tmp_path / "new").mkdir()
    old = fidelity.run(["dqn_cartpole"], [0, 1, 2], log=lambda *_: None)
    monkeypatch.setattr(fidelity, "run_rlrun", fake("rlrun", 499.0))
    done.clear()
    assert fidelity.main(["--tasks", "dqn_cartpole", "--seeds", "3", "--sides", "rlrun",
                          "--out", str(tmp_path / "new")]) == 0
    assert done == ["rlrun"] * 3
    (tmp_path / "both" / "fidelity.json").write_text(json.dumps(old))
    merged = fidelity.merge([tmp_path / "both" / "fidelity.json", tmp_path / "new" / "fidelity.json"])
    (row,) = fidelity.rows_of(merged)
    assert row["rlrun_final"] == 499.0 and row["peer_final"] == 500.0 and row["final_diff"] == -1.0
    assert row["final_verdict"] == "equivalent"


def test_paired_end_to_end_splits_fixed_and_per_update_cost(monkeypatch):
    """Issue 46's pairing: fixed cost = the short run; per update = extra time over extra updates."""
    from rlrun.benchmarks import end_to_end

    task = peers.TASKS["ppo_cartpole"]  # 4000 updates at its budget, 400 at one eval interval
    calls = []

    def timed(base: float, per_update_s: float, frames: int) -> dict:
        calls.append(frames)
        seconds = base + per_update_s * peers.updates(task, frames)
        return {"process_s": seconds, "train_s": 1.0, "return": 500.0}

    monkeypatch.setattr(fidelity, "run_rlrun", lambda t, seed, frames: timed(2.0, 0.001, frames))
    monkeypatch.setattr(fidelity, "run_peer", lambda lib, t, seed, frames, python: timed(10.0, 0.002, frames))
    result = end_to_end.run_paired(["ppo_cartpole"], seeds=2, libs=("sb3",), log=lambda *_: None)
    assert sorted(set(calls)) == [10_240, 102_400]
    (item,) = result["summary"]
    assert item["pairs"] == 2 and item["updates"] == 4000
    # fixed: the short run less its 400 updates at the per-update cost
    assert item["rlrun_fixed_s"] == pytest.approx(2.0) and item["peer_fixed_s"] == pytest.approx(10.0)
    assert item["rlrun_per_update_ms"] == pytest.approx(1.0)
    assert item["peer_per_update_ms"] == pytest.approx(2.0)
    assert item["per_update_ms_ratio"] == pytest.approx(0.5)
    assert item["process_s_ratio"] == pytest.approx(6.0 / 18.0)
    assert "| ppo_cartpole | sb3 | 2 |" in end_to_end.render_paired(result)
    assert item["cpu_s_ratio"] is None  # the stand-ins start no child process: no CPU time to compare


def test_paired_end_to_end_counts_child_cpu_and_takes_another_budget(monkeypatch):
    """CPU seconds of each child beside its wall time; ``frames`` replaces the task's budget."""
    from rlrun.benchmarks import end_to_end

    task, cpu, calls = peers.TASKS["sac_pendulum"], [0.0], []

    def timed(base: float, per_update_s: float, frames: int) -> dict:
        calls.append(frames)
        seconds = base + per_update_s * peers.updates(task, frames)
        cpu[0] += seconds / 2  # the child ran half the time: a shared machine
        return {"process_s": seconds, "train_s": 1.0, "return": -150.0}

    monkeypatch.setattr(end_to_end, "_child_cpu_s", lambda: cpu[0])
    monkeypatch.setattr(fidelity, "run_rlrun", lambda t, seed, frames: timed(2.0, 0.004, frames))
    monkeypatch.setattr(fidelity, "run_peer", lambda lib, t, seed, frames, python: timed(20.0, 0.003, frames))
    result = end_to_end.run_paired(["sac_pendulum"], seeds=3, libs=("sbx",), log=lambda *_: None, frames=6000)
    assert sorted(set(calls)) == [task.eval_interval, 6000]  # the short run: one eval interval
    (item,) = result["summary"]
    assert item["pairs"] == 3 and item["updates"] == peers.updates(task, 6000)
    assert item["rlrun_per_update_cpu_ms"] == pytest.approx(2.0)
    assert item["peer_per_update_cpu_ms"] == pytest.approx(1.5)
    assert item["fixed_cpu_s_ratio"] == pytest.approx(2.0 / 20.0)
    full = peers.updates(task, 6000)
    assert item["cpu_s_ratio"] == pytest.approx(item["process_s_ratio"])
    assert item["cpu_s_ratio"] == pytest.approx((2.0 + 0.004 * full) / (20.0 + 0.003 * full))


def _sb3_updates(task: peers.Task, frames: int, shrink: bool) -> int:
    """SB3's gradient steps on ``task`` for ``frames`` (the warm-up the task's, or shrunk as a smoke's)."""
    from rlrun.benchmarks import peer_run

    model, _, _ = peer_run.build("sb3", task.name, 0, frames if shrink else None)
    steps, train = [], model.train

    def counted(gradient_steps: int, batch_size: int) -> None:
        steps.append(gradient_steps)
        train(gradient_steps, batch_size)

    model.train = counted
    model.learn(total_timesteps=frames)
    return sum(steps)


def test_off_policy_updates_start_in_the_batch_after_the_warm_up_as_the_peer(tmp_path):
    """SB3 first trains once num_timesteps > learning_starts; rlrun, mapped, takes the same optimiser
    steps (DQN CartPole at 6000 frames: batches 5100..6000, 10 x 25 = 250; unmapped rlrun took 275),
    and ``peers.updates`` counts them at a short budget (warm-up 150: batches 200..3000, 29 x 25;
    it said 28 x 25)."""
    pytest.importorskip("stable_baselines3")
    frames = 6000
    task = peers.TASKS["dqn_cartpole"]
    out = subprocess.run(
        [sys.executable, "-m", "rlrun", *peers.rlrun_overrides(task), f"total_frames={frames}",
         "eval.interval_frames=0", "checkpoint.interval_frames=0", "progress=false", "threads=1",
         f"hydra.run.dir={tmp_path}/run"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-800:]
    rlrun_steps = json.loads((tmp_path / "run" / "summary.json").read_text())["optim_steps"]
    assert rlrun_steps == _sb3_updates(task, frames, shrink=False) == 250
    assert _sb3_updates(task, 3000, shrink=True) == peers.updates(task, 3000) == 29 * 25


@pytest.mark.parametrize("name", ["dqn_cartpole", "dqn_cartpole_tuned"])
def test_dqn_epsilon_is_one_line_on_both_sides_after_the_warm_up(name):
    """SB3 anneals epsilon from frame 0, rlrun from the warm-up's end (both act uniformly at random
    before it). The mapping starts rlrun's line at SB3's value there, so that every frame after the
    warm-up explores alike; mapping only the end point left rlrun at 1.0 where SB3 was at 0.67
    (dqn_cartpole_tuned), and its area under the curve came out "different" from SB3's."""
    from rlrun.modules.exploration import EpsilonGreedy

    task = peers.TASKS[name]
    model, v = peers.peer_spec(task)["model"], peers.values(task)
    start, end, fraction = model["exploration_initial_eps"], model["exploration_final_eps"], model[
        "exploration_fraction"]

    def sb3(frame: int) -> float:  # SB3's get_linear_fn at progress = frame / budget
        progress = frame / task.frames
        return end if progress > fraction else start + progress * (end - start) / fraction

    overrides = dict(o.split("=", 1) for o in peers.rlrun_overrides(task))
    ours = EpsilonGreedy(actor=None, num_envs=1, num_actions=2,
                         eps_init=float(overrides["exploration.eps_init"]),
                         eps_end=float(overrides["exploration.eps_end"]),
                         annealing_frames=int(overrides["exploration.annealing_frames"]))
    warm_up = int(overrides["collector.init_random_frames"])
    for frame in range(warm_up, task.frames, 1000):
        ours.frames = frame - warm_up  # rlrun's exploration counts the frames it acted on
        assert ours.epsilon == pytest.approx(sb3(frame), abs=1e-5), frame
    assert sb3(warm_up) < start - 0.1 and v["eps_after_warmup"] == pytest.approx(sb3(warm_up), abs=1e-5)


def test_dqn_target_copies_fall_at_the_same_updates_on_both_sides():
    """SB3 copies DQN's target in its collection callback, every ``target_update_interval`` env
    steps: between two training phases, never inside one. The mapped rlrun hook, driven in the
    loop's order (process_batch, then the batch's updates with post_optim after each), copies after
    the same optimiser steps. The old mapping (every 89 updates for SB3's 178 frames at 50 updates a
    100-frame batch) copied mid-batch: same mean period, yet its AUC came out 35 below SB3's over
    20 seeds (rlrun/benchmarks/README.md)."""
    pytest.importorskip("stable_baselines3")
    from types import SimpleNamespace

    import stable_baselines3.dqn.dqn as sb3_dqn

    from rlrun.benchmarks import peer_run
    from rlrun.core.registry import build
    from rlrun.trainer.hooks import dispatch

    task, frames = peers.TASKS["dqn_cartpole_tuned"], 8000
    model, _, _ = peer_run.build("sb3", task.name, 0, None)
    done, copies, train, copy = [0], [], model.train, sb3_dqn.polyak_update

    def counted(gradient_steps: int, batch_size: int) -> None:
        train(gradient_steps, batch_size)
        done[0] += gradient_steps

    def recorded(params, target_params, tau):
        copies.append(done[0])
        copy(params, target_params, tau)

    model.train = counted
    sb3_dqn.polyak_update = recorded
    try:
        model.learn(total_timesteps=frames)
    finally:
        sb3_dqn.polyak_update = copy
    sb3 = sorted(set(copies))

    overrides = dict(o.lstrip("+").split("=", 1) for o in peers.rlrun_overrides(task))
    node = {"name": "target_update"}
    for key, value in overrides.items():
        if key.startswith("hooks.target_update."):
            node[key.rsplit(".", 1)[1]] = None if value == "null" else int(value)
    taken, ours = [0], []  # optimiser steps taken; the count at each copy
    loss = SimpleNamespace(has_targets=True, update_targets=lambda: ours.append(taken[0]))
    hook = build("hook", node, loss=loss)
    trainer = SimpleNamespace(loss=loss, optim_steps=0, clock=0, last_clock=0,
                              budget=SimpleNamespace(unit="frames"))
    batch_frames, per_batch = int(overrides["collector.frames_per_batch"]), task.values["updates"]
    process_batch, post_optim = dispatch(hook, "process_batch"), dispatch(hook, "post_optim")
    for clock in range(batch_frames, frames + 1, batch_frames):
        trainer.last_clock, trainer.clock = clock - batch_frames, clock
        process_batch(trainer, None)
        if clock >= int(overrides["trainer.learning_starts"]):
            for _ in range(per_batch):
                taken[0] += 1  # the optimiser step; the trainer counts it after post_optim
                post_optim(trainer)
                trainer.optim_steps += 1
    assert sb3 == sorted(set(ours)), (sb3, ours)
    assert len(sb3) > 10 and all(n % per_batch == 0 for n in sb3)  # copies between phases only
