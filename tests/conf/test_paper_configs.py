"""Every reproduction config of the paper's Table 1 (32 cells, IMPALA's included) composes and runs
a few hundred frames."""

from __future__ import annotations

import importlib.util
from importlib.resources import files

import pytest
import yaml
from cli_utils import only_run_dir, run_cli, summary_of

from rlrun.lifecycle.compose import CONF_DIR

PAPER = sorted(p.stem for p in (CONF_DIR / "paper" / "table1").glob("*.yaml"))
ATARI = {"pong", "freeway", "boxing", "breakout"}
RESULTS = yaml.safe_load((files("rlrun.report") / "references.yaml").read_text())


def test_there_is_one_config_per_table1_cell():
    cells = {(a.lower(), e.lower()) for a, envs in RESULTS["table1"]["results"].items() for e in envs}
    assert {tuple(n.split("_", 1)) for n in PAPER} == cells
    assert len(PAPER) == 32


@pytest.mark.parametrize("name", PAPER)
def test_paper_config_runs_a_few_hundred_frames(name, tmp_path, capsys):
    algo, env = name.split("_", 1)
    if env in ATARI and importlib.util.find_spec("ale_py") is None:
        pytest.skip("ale-py not installed (pip install 'rlrun[atari]')")
    # Tiny budgets and short episodes; the networks, losses and everything else are the config's own.
    tiny = ["total_frames=128", "collector.frames_per_batch=64", "buffer.batch_size=16",
            "eval.episodes=1", "eval.max_envs=1", "eval.interval_frames=0", "logger=none",
            "checkpoint.interval_frames=0", "env.max_episode_steps=100"]
    if algo in ("sac", "td3", "ddpg"):
        tiny += ["collector.init_random_frames=64", "buffer.capacity=1000", "trainer.optim_steps_per_epoch=8"]
    if algo == "impala":  # 2 of the 12 workers, batches of 2 rollouts of 16 steps: the rest is the cell's
        tiny += ["collector.workers=2", "collector.rollouts_per_batch=2"]
    code, _, err = run_cli([f"+paper=table1/{name}", *tiny], tmp_path, capsys)
    assert code == 0, err
    summary = summary_of(only_run_dir(tmp_path))
    assert summary["frames"] == 128 and summary["status"] == "finished"
    config = yaml.safe_load((only_run_dir(tmp_path) / "config.yaml").read_text())
    ref = RESULTS["table1"]["results"][config["paper"]["algo"]][config["paper"]["env"]]
    assert [config["paper"]["reference_mean"], config["paper"]["reference_std"]] == ref
