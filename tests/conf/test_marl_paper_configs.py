"""Every reproduction config of the paper's Figure 2 (MARL on VMAS, Table 10) runs a few steps."""

from __future__ import annotations

import pytest
import yaml
from cli_utils import only_run_dir, run_cli, summary_of

from rlrun.lifecycle.compose import CONF_DIR

pytest.importorskip("vmas")

PAPER = sorted(p.stem for p in (CONF_DIR / "paper" / "marl").glob("*.yaml"))


def test_there_is_one_config_per_algorithm_and_task():
    algos = ("mappo", "ippo", "maddpg", "marl_iql", "vdn", "qmix")
    assert set(PAPER) == {f"{a}_{t}" for a in algos for t in ("navigation", "balance", "sampling")}


@pytest.mark.parametrize("name", PAPER)
def test_marl_paper_config_runs_a_few_steps(name, tmp_path, capsys):
    algo = name.rsplit("_", 1)[0]
    # Tiny scale (4 envs, 10-step episodes); the networks, losses and learning settings are the config's own.
    tiny = ["total_frames=80", "env.num_envs=4", "env.max_steps=10", "collector.frames_per_batch=40",
            "buffer.batch_size=16", "trainer.epochs_per_batch=2", "eval.episodes=1", "eval.max_envs=1",
            "eval.interval_frames=0", "logger=none", "checkpoint.interval_frames=0"]
    if algo not in ("mappo", "ippo"):
        tiny.append("buffer.capacity=1000")
    code, _, err = run_cli([f"+paper=marl/{name}", *tiny], tmp_path, capsys)
    assert code == 0, err
    summary = summary_of(only_run_dir(tmp_path))
    assert summary["frames"] == 80 and summary["status"] == "finished"
    config = yaml.safe_load((only_run_dir(tmp_path) / "config.yaml").read_text())
    # Table 10, as the run resolved it (the tiny overrides above aside)
    assert config["gamma"] == 0.9 and config["optim"]["lr"] == 5e-5 and config["optim"]["max_grad_norm"] == 40
    assert config["model"]["hidden"] == [256, 256] and config["model"]["activation"] == "tanh"
    assert config["model"]["share_params"] == (algo != "maddpg")
    assert config["env"]["n_agents"] == 3 and config["env"]["continuous_actions"] == (
        algo in ("mappo", "ippo", "maddpg"))
    assert config["paper"]["table"] == "figure2_marl" and config["paper"]["budget_frames"] == 500 * 60000
    if algo in ("mappo", "ippo"):
        assert config["hooks"]["gae"]["lmbda"] == 0.9 and config["loss"]["clip_epsilon"] == 0.2
        assert config["model"]["centralised"] == (algo == "mappo")
    if algo in ("marl_iql", "vdn", "qmix"):
        assert config["env"]["discrete_actions"] == 5
        assert config["loss"]["mixer"] == {"marl_iql": "none"}.get(algo, algo)
