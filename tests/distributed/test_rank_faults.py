"""A rank killed under torchrun stops the others and leaves no process behind; the same command
then resumes every rank from the last checkpoint all ranks committed (what the same command
run without a kill held at that frame) and trains to exactly its budget (issue 39)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rank_procs import alive, rank_pids

TORCHRUN = Path(sys.executable).with_name("torchrun")
ARGS = ["algo=ppo", "env=cartpole", "total_frames=16384", "logger=csv", "progress=false", "threads=1",
        "eval.episodes=1", "checkpoint.interval_frames=512", "checkpoint.keep_last=64"]


def test_a_killed_rank_stops_the_others_and_the_same_command_resumes(tmp_path):
    if not TORCHRUN.exists() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs torchrun and 2 cores")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RLRUN_TEST_PAUSE_AT": "checkpoint_write",
           "RLRUN_TEST_PAUSE_S": "0.5", "RLRUN_COLLECTIVE_TIMEOUT_S": "30"}
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "rlrun", *ARGS]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("runs/*/*/ranks/1/checkpoint.pt")):
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint of rank 1"
            time.sleep(0.2)
        workers = rank_pids(proc.pid)
        os.kill(workers[1], signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert stopped_in < 30, stopped_in  # torchrun ends the group as soon as a worker dies
    assert "Signal 9 (SIGKILL)" in err and "local_rank: 1" in err  # torchrun names the rank and cause
    assert not any(alive(pid) for pid in workers.values())
    (run_dir,) = tmp_path.glob("runs/*/*")
    committed = json.loads((run_dir / "world.json").read_text())["frames"]
    at_commit = _state(run_dir, run_dir / "ranks" / "1")
    assert at_commit["frames"] == committed > 0
    done = subprocess.run(cmd, cwd=tmp_path, env={**env, "RLRUN_TEST_PAUSE_AT": ""}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from frame {committed} of 16384" in done.stderr
    frames = [torch.load(p, weights_only=True)["frames"]
              for p in (run_dir / "checkpoint.pt", run_dir / "ranks" / "1" / "checkpoint.pt")]
    assert frames == [16384, 16384]  # the world's frames, on each rank
    # the same command without a kill: at the committed frame every rank held what the resume
    # restored, and it ends at the same counters (episodes restart on resume, as alone:
    # env states are not checkpointed, tests/lifecycle/test_resume_equivalence.py)
    straight = tmp_path / "straight"
    straight.mkdir()
    done = subprocess.run(cmd, cwd=straight, env={**env, "RLRUN_TEST_PAUSE_AT": ""}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (uninterrupted,) = straight.glob("runs/*/*")
    kept = f"checkpoints/{committed:012d}.pt"
    assert _state(uninterrupted / kept, uninterrupted / "ranks" / "1" / kept) == at_commit
    ends = [_state(d, d / "ranks" / "1") for d in (run_dir, uninterrupted)]
    assert ends[0]["frames"] == 16384 and (ends[0]["frames"], ends[0]["optim_steps"]) == (
        ends[1]["frames"], ends[1]["optim_steps"])


def _state(zero: Path, one: Path) -> dict:
    """Counters and hashes of rank 0's shared state and each rank's torch RNG, from a checkpoint's
    parts."""
    parts = [torch.load(p / "checkpoint.pt" if p.is_dir() else p, weights_only=True) for p in (zero, one)]
    return {"frames": parts[0]["frames"], "optim_steps": parts[0]["optim_steps"],
            "weights": _hash(parts[0]["policy"]), "optimizer": _hash(parts[0]["optimizer"]),
            # torch's RNG is the seeded one; numpy's and Python's global RNGs are never seeded by
            # rlrun (nothing of a run draws from them), so they differ from process to process
            "torch_rng": [_hash(part["rng"]["torch"]) for part in parts]}


def _hash(tree) -> str:
    digest = hashlib.sha256()

    def walk(node) -> None:
        if isinstance(node, dict):
            for key in sorted(node, key=str):
                digest.update(str(key).encode())
                walk(node[key])
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item)
        elif isinstance(node, torch.Tensor):
            digest.update(node.numpy().tobytes())
        else:
            digest.update(repr(node).encode())

    walk(tree)
    return digest.hexdigest()


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_batch_with_one_checkpoint(tmp_path):
    """SIGTERM to rank 1 alone (as a node's scheduler may deliver it): every rank leaves the loop
    after the same batch and the run's last checkpoint is committed by all of them, past the
    periodic one; the same command then finishes the run. A rank that stopped alone waited in
    the final checkpoint's barrier while rank 0 waited in the next batch's all-reduce, until the
    collective timeout failed the run without that checkpoint."""
    if not TORCHRUN.exists() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs torchrun and 2 cores")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RLRUN_COLLECTIVE_TIMEOUT_S": "30"}
    args = [*ARGS[:-2], "checkpoint.interval_frames=4096", "total_frames=65536", "eval.interval_frames=0"]
    args.remove("total_frames=16384")
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "rlrun", *args]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("runs/*/*/ranks/1/checkpoint.pt")):
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint committed"
            time.sleep(0.1)
        os.kill(rank_pids(proc.pid)[1], signal.SIGTERM)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=90)
        stopped_in = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    (run_dir,) = tmp_path.glob("runs/*/*")
    committed = json.loads((run_dir / "world.json").read_text())["frames"]
    parts = [torch.load(p, weights_only=True)["frames"]
             for p in (run_dir / "checkpoint.pt", run_dir / "ranks" / "1" / "checkpoint.pt")]
    assert committed > 4096 and parts == [committed, committed], (committed, parts, err[-3000:])
    assert stopped_in < 30, (stopped_in, err[-3000:])  # a batch and a checkpoint, not a collective timeout
    assert "SIGTERM: stopping after this batch" in err
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from frame {committed} of 65536" in done.stderr
