"""``torchrun --nproc-per-node 2 -m rlrun`` end to end on gloo (issue 39): one run directory with
rank 1's part beside it, the world size recorded, the same weights on both ranks, one metrics
record without repeated (metric, step); a resume under another world size refused in one line."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_utils import logged

TORCHRUN = Path(sys.executable).with_name("torchrun")
ARGS = ["algo=ppo", "env=cartpole", "total_frames=4096", "logger=csv", "progress=false",
        "eval.episodes=2", "threads=1"]


def _torchrun(cwd: Path, nproc: int, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLRUN_COLLECTIVE_TIMEOUT_S": "60", "OMP_NUM_THREADS": "1"}
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", str(nproc), "-m", "rlrun", *ARGS, *extra]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    if not TORCHRUN.exists() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs torchrun and 2 cores")
    cwd = tmp_path_factory.mktemp("torchrun")
    done = _torchrun(cwd, 2)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (cwd / "runs" / "ppo-cartpole").iterdir()
    return cwd, run_dir, done


def test_one_run_directory_with_each_ranks_part(two_ranks):
    _, run_dir, _ = two_ranks
    assert json.loads((run_dir / "world.json").read_text()) == {"world_size": 2, "frames": 4096}
    assert not list(run_dir.glob("**/checkpoint.pending-*"))  # the last commit completed
    assert (run_dir / "checkpoint.pt").is_file() and (run_dir / "ranks" / "1" / "checkpoint.pt").is_file()
    assert not (run_dir / "ranks" / "1" / "metrics.csv").exists()  # rank 1 logs nothing
    done = two_ranks[2]
    closing = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("[rlrun] finished")]
    assert closing == [f"{closing[0]}"] and closing[0].endswith(str(run_dir)), closing


def test_both_ranks_hold_the_same_weights_and_their_own_collectors(two_ranks):
    _, run_dir, _ = two_ranks
    zero = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    one = torch.load(run_dir / "ranks" / "1" / "checkpoint.pt", weights_only=True)
    assert {"policy", "loss", "optimizer"} <= zero.keys() and not {"policy", "loss", "optimizer"} & one.keys()
    assert zero["world_size"] == one["world_size"] == 2  # the shared state once, each rank's own beside it
    policy = torch.load(run_dir / "ranks" / "1" / "policy.pt", weights_only=True)["policy"]
    assert zero["policy"].keys() == policy.keys()
    assert all(torch.equal(v, policy[k]) for k, v in zero["policy"].items())
    assert zero["optim_steps"] == one["optim_steps"] > 0
    assert zero["frames"] == one["frames"] == 4096  # the budget counts both ranks' frames
    assert zero["collector"]["frames"] == one["collector"]["frames"] == 2048  # each collected half
    assert not torch.equal(zero["rng"]["torch"], one["rng"]["torch"])  # seeded per rank


def test_no_metric_is_logged_twice_at_one_step(two_ranks):
    _, run_dir, _ = two_ranks
    with open(run_dir / "metrics.csv") as f:
        rows = [(r["key"], r["step"]) for r in csv.DictReader(f)]
    assert rows and len(rows) == len(set(rows))


def test_metrics_count_every_ranks_frames(two_ranks):
    _, run_dir, _ = two_ranks
    frames = logged(run_dir, "frames")
    assert max(frames) == 4096 and all(step == value for step, value in frames.items()), frames
    returns = logged(run_dir, "train/episode_return")
    assert returns and set(returns) <= set(frames)


def test_another_world_size_is_refused_in_one_line(two_ranks, tmp_path):
    _, run_dir, _ = two_ranks
    copy = tmp_path / "runs" / "ppo-cartpole"
    shutil.copytree(run_dir.parent, copy)
    (tmp_path / "runs" / "ppo-cartpole" / run_dir.name / "world.json").write_text(
        '{"world_size": 4, "frames": 4096}')
    done = _torchrun(tmp_path, 2)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("rlrun: error:")]
    assert errors and "trained on 4 ranks, this run has 2" in errors[0], done.stderr[-2000:]


def test_a_refusal_is_said_once_for_all_ranks(tmp_path):
    if not TORCHRUN.exists() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs torchrun and 2 cores")
    done = _torchrun(tmp_path, 2, "total_frames=4097")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("rlrun: error:")]
    assert errors == ["rlrun: error: total_frames: 4097 does not divide by the world size 2"], done.stderr


def test_a_port_in_use_is_one_line_naming_master_port(tmp_path):
    """rlrun's own group start (a SLURM task, or RANK/WORLD_SIZE/MASTER_PORT set by hand; under
    torchrun the launcher's store holds the port and fails itself before any rank starts)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
               "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        done = subprocess.run([sys.executable, "-m", "rlrun", *ARGS], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    first = done.stderr.splitlines()[0]
    assert first == (f"rlrun: error: MASTER_PORT: port {port} (MASTER_PORT) on 127.0.0.1 is in use by "
                     "another process, so rank 0 cannot open the group's store there"), done.stderr
    assert "Traceback" not in done.stderr


def _float_tensors(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}

    def walk(node, key: str) -> None:
        if isinstance(node, torch.Tensor) and node.is_floating_point():
            out[key] = node
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}/{k}")
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{key}/{i}")

    walk(torch.load(path, weights_only=True), "")
    return out


def test_a_two_rank_run_repeated_with_the_same_seed_is_bit_identical(two_ranks, tmp_path):
    """Each rank's checkpoint part (weights, optimiser moments, replay/rollout state, RNG) equals the
    first run's bit for bit: gloo's sum of two ranks' gradients is taken in one fixed order."""
    _, run_dir, _ = two_ranks
    done = _torchrun(tmp_path, 2)
    assert done.returncode == 0, done.stderr[-3000:]
    (again,) = (tmp_path / "runs" / "ppo-cartpole").iterdir()
    for part in ("checkpoint.pt", "ranks/1/checkpoint.pt"):
        first, second = _float_tensors(run_dir / part), _float_tensors(again / part)
        assert first.keys() == second.keys() and first
        assert [k for k in first if not torch.equal(first[k], second[k])] == [], part


def test_the_device_checks_two_rank_case_runs_on_cpu(tmp_path):
    """``python -m rlrun.benchmarks device --device cpu --ranks 2``: what runs with NCCL on a GPU
    machine runs with gloo here, so the script cannot rot."""
    if not TORCHRUN.exists() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs torchrun and 2 cores")
    cmd = [sys.executable, "-m", "rlrun.benchmarks", "device", "--device", "cpu", "--ranks", "2",
           "--work", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RLRUN_COLLECTIVE_TIMEOUT_S": "60"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "device check: 2 ranks on cpu: OK" in done.stdout
