"""Every number of the synthetic table-1 cells, the paper layout, missing cells and ad-hoc grouping."""

from __future__ import annotations

import math
import statistics

import pytest

from rlrun.report import stats
from rlrun.report.table import build_grouped, build_table, references

NAN = pytest.approx(float("nan"), nan_ok=True)
ROWS = ["A2C", "PPO", "DDPG", "TD3", "SAC", "IMPALA"]
COLS = ["HalfCheetah", "Hopper", "Walker2d", "Ant", "Pong", "Freeway", "Boxing", "Breakout"]


@pytest.fixture(scope="module")
def table1(runs):
    return build_table(runs, "table1")


def test_references_match_the_papers_results_yaml():
    refs = references()
    assert list(refs["table1"]["results"]) == ROWS
    assert refs["table1"]["results"]["SAC"]["HalfCheetah"] == [11077, 323]
    assert refs["table1"]["results"]["IMPALA"]["Breakout"] == [525.57, 105.47]
    assert refs["table2"]["results"]["oDT"]["Hopper"] == [2830, 96]
    assert refs["table2"]["caption"].startswith("Offline RL, D4RL medium-replay")


def test_layout_is_the_papers(table1):
    assert table1.rows == ROWS and table1.cols == COLS
    assert len(table1.cells) == 8 + 8 + 4 + 4 + 4 + 4  # every reference cell, no more
    assert [c.key for c in table1.cells][:2] == [("A2C", "HalfCheetah"), ("A2C", "Hopper")]
    assert table1.cell("DDPG", "Pong") is None  # not in the paper, no runs
    assert any("1 duplicate run" in n for n in table1.notes)


def test_sac_halfcheetah_five_finished_seeds(table1):
    c = table1.cell("SAC", "HalfCheetah")
    assert (c.seeds, c.partial) == (5, 0)
    assert c.mean == pytest.approx(3000)
    assert c.std == pytest.approx(1581.1388300841897)  # ddof=1: sqrt(1e7 / 4)
    assert (c.paper_mean, c.paper_std) == (11077, 323)
    assert c.ratio == pytest.approx(3000 / 11077)
    assert c.frames == 1_000_000 and c.budget == 1_000_000
    assert c.iqm == pytest.approx(3000)
    assert 1000 <= c.iqm_low < c.iqm < c.iqm_high <= 5000
    assert (c.iqm_low, c.iqm_high) == stats.bootstrap_iqm_ci([1000, 2000, 3000, 4000, 5000])


def test_ppo_hopper_with_a_partial_seed_and_a_duplicate(table1):
    c = table1.cell("PPO", "Hopper")
    finals = [1500, 1700, 900]  # seed 1's older KILLED run (50 at 100k frames) is left out
    assert (c.seeds, c.partial) == (3, 1)
    assert c.mean == pytest.approx(4100 / 3)
    assert c.std == pytest.approx(statistics.stdev(finals)) and c.std == pytest.approx(416.3331999)
    assert (c.paper_mean, c.paper_std) == (1703, 742)
    assert c.ratio == pytest.approx(4100 / 3 / 1703)
    assert c.frames == pytest.approx(800_000) and c.budget == 1_000_000
    assert c.iqm == pytest.approx((900 + 1500 + 1700) / 3)  # trim_mean(x, 0.25) cuts nothing of 3
    assert c.iqm_low <= c.iqm <= c.iqm_high
    assert 900 <= c.iqm_low and c.iqm_high <= 1700


def test_td3_ant_single_partial_seed_budget_from_references(table1):
    c = table1.cell("TD3", "Ant")
    assert (c.seeds, c.partial, c.mean, c.std) == (1, 1, 2000, NAN)
    assert (c.iqm, c.iqm_low, c.iqm_high) == (2000, 2000, 2000)
    assert c.ratio == pytest.approx(2000 / 5373)
    assert c.frames == 600_000 and c.budget == 1_000_000  # no paper.budget_frames param


def test_missing_cells_keep_the_paper_values(table1):
    for algo, env, ref, budget in (("SAC", "Hopper", (2963, 644), 1e6), ("A2C", "Pong", (20.57, 0.65), 1e7),
                                   ("IMPALA", "Breakout", (525.57, 105.47), 5e7)):
        c = table1.cell(algo, env)
        assert c.missing and (c.seeds, c.partial) == (0, 0)
        assert all(math.isnan(v) for v in (c.mean, c.std, c.iqm, c.ratio, c.frames))
        assert ((c.paper_mean, c.paper_std), c.budget) == (ref, budget)


def test_table2_is_separate(runs):
    t2 = build_table(runs, "table2")
    assert t2.rows == ["DT", "oDT", "IQL"] and t2.cols == ["HalfCheetah", "Hopper"]
    c = t2.cell("DT", "Hopper")
    assert (c.seeds, c.mean, c.paper_mean, c.paper_std) == (1, 1000, 1048, 226)
    assert math.isnan(c.budget)  # the paper's budget is gradient updates, not frames
    assert sum(not c.missing for c in t2.cells) == 1


def test_group_by_tags_over_all_runs(runs):
    report = build_grouped(runs, ["algo", "env"])
    assert [c.key for c in report.cells] == [("dt", "hopper"), ("ppo", "cartpole"), ("ppo", "hopper"),
                                             ("sac", "halfcheetah"), ("sac", "pendulum"), ("td3", "ant")]
    cart = report.cell("ppo", "cartpole")  # two experiments: 450, 500, 300 and 42
    assert (cart.seeds, cart.mean, cart.paper_mean) == (4, pytest.approx(323), NAN)
    assert cart.std == pytest.approx(statistics.stdev([450, 500, 300, 42]))
    sac = report.cell("sac", "halfcheetah")  # paper values from the runs' paper.* params
    assert (sac.mean, sac.paper_mean, sac.ratio, sac.budget) == (3000, 11077, pytest.approx(3000 / 11077),
                                                                  1_000_000)
    assert report.cell("sac", "pendulum").mean == -180.5


def test_group_by_params_and_unset_keys(runs):
    report = build_grouped(runs, ["params.loss.clip_epsilon", "sweep"])
    keys = {c.key: c for c in report.cells}
    assert keys[("0.1", "(unset)")].mean == 300
    assert keys[("0.2", "clip")].mean == 475 and keys[("0.2", "clip")].seeds == 2
    cell = keys[("(unset)", "(unset)")]  # 13 runs, PPO/Hopper seed 1 twice in one run_dir
    assert (cell.seeds, cell.runs_count) == (6, 12)  # distinct seeds 0-4 and 7
    assert any("1 duplicate run" in n for n in report.notes)
