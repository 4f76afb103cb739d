"""A data-parallel learner learns (issue 39): PPO on CartPole and SAC on Pendulum on 2 gloo ranks
under torchrun, within the 1-process presets' budgets (which count both ranks' frames)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_utils import logged

pytestmark = [pytest.mark.learning, pytest.mark.slow, pytest.mark.timeout(1500)]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def _learn(tmp_path: Path, algo: str, env: str, interval: int, budget: int, target: float,
           end: float) -> None:
    if not TORCHRUN.exists() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs torchrun and 2 cores")
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "rlrun", f"algo={algo}",
           f"env={env}", "seed=0", "logger=csv", "progress=false", "threads=1",
           f"eval.interval_frames={interval}"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1400,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    frames = [torch.load(p, weights_only=True)["frames"]
              for p in [run_dir / "checkpoint.pt", run_dir / "ranks" / "1" / "checkpoint.pt"]]
    assert frames == [budget, budget]  # the world's frames, on each rank
    curve = logged(run_dir, "eval/episode_return")  # the world's frames -> return
    assert max(curve.values()) >= target, f"never reached {target}: {curve}"
    last = curve[max(curve)]
    assert last >= end, f"reached {max(curve.values())} but ended at {last}: {curve}"


def test_ppo_cartpole_on_2_ranks_reaches_500_and_ends_at_450_or_more(tmp_path):
    _learn(tmp_path, "ppo", "cartpole", 10_000, 100_000, 500, 450)


def test_sac_pendulum_on_2_ranks_ends_at_minus_225_or_more_within_20k_frames(tmp_path):
    _learn(tmp_path, "sac", "pendulum", 2_000, 20_000, -225, -225)
