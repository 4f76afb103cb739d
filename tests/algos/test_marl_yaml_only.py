"""A MARL algorithm that is configuration only: conf/algo/maa2c.yaml (A2C's loss on group keys).

It names registered components (group_actor_critic, a2c, multiagent_gae, vmas) and no code of
its own; the run builds through the same builder, loop, evaluator and layout check as the rest.
"""

from __future__ import annotations

import pytest
from cli_utils import logged, only_run_dir, run_cli, summary_of

pytest.importorskip("vmas")

SMOKE = ["algo=maa2c", "env=vmas/navigation", "seed=0", "logger=csv", "env.num_envs=8",
         "collector.frames_per_batch=800", "total_frames=1600", "buffer.batch_size=400",
         "eval.interval_frames=0", "eval.episodes=2", "progress=false"]


def test_maa2c_trains_and_evaluates_as_a2c_on_the_agent_group(tmp_path, capsys):
    code, _, err = run_cli(SMOKE, tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    summary = summary_of(run_dir)
    assert summary["frames"] == 1600 and summary["optim_steps"] == 4  # 2 batches x 2 minibatches
    assert summary["eval/episodes"] == 2
    # A2C's loss terms, computed on per-agent keys (a loss reading root keys would fail to build)
    assert logged(run_dir, "loss/objective") and logged(run_dir, "loss/critic")
