"""Fixed-seed fingerprints of short runs of every family: run before and after a refactor.

    python tests/fingerprints.py OUT.json [--only ppo,sac] [--work DIR]
    python tests/fingerprints.py --compare BEFORE.json AFTER.json

Each run is a whole ``python -m rlrun`` process with ``logger=none``, one thread and a tiny
budget; its fingerprint is the summary's frames, optimiser steps and final evaluation return,
and a SHA-256 over every floating-point tensor saved in its ``checkpoint.pt`` (weights,
optimiser moments, replay storage, normaliser statistics), taken in sorted key order. Identical
fingerprints mean identical arithmetic, not only similar learning. Not a test: it takes minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COMMON = ["logger=none", "progress=false", "threads=1", "seed=0"]
# name -> overrides; budgets are a few batches each, enough to train, evaluate and checkpoint
RUNS: dict[str, list[str]] = {
    "ppo": ["algo=ppo", "env=cartpole", "total_frames=4096", "eval.interval_frames=0"],
    "a2c": ["algo=a2c", "env=cartpole", "total_frames=2048", "eval.interval_frames=0"],
    "dqn": ["algo=dqn", "env=cartpole", "total_frames=3000", "collector.init_random_frames=1000",
            "eval.interval_frames=0"],
    "sac": ["algo=sac", "env=pendulum", "total_frames=1500", "collector.init_random_frames=500",
            "eval.interval_frames=0"],
    "td3": ["algo=td3", "env=pendulum", "total_frames=1500", "collector.init_random_frames=500",
            "eval.interval_frames=0"],
    "ddpg": ["algo=ddpg", "env=pendulum", "total_frames=1500", "collector.init_random_frames=500",
             "eval.interval_frames=0"],
    "ppo_halfcheetah": ["algo=ppo", "env=halfcheetah", "total_frames=4096", "env.num_envs=2",
                        "eval.interval_frames=0", "eval.episodes=1"],
    "impala_sync": ["algo=impala", "env=cartpole", "collector=sync", "total_frames=4096",
                    "eval.interval_frames=0"],
    "iql": ["algo=iql", "env=pendulum", "dataset=rlrun/pendulum/medium-replay-v0",
            "total_updates=300", "eval.interval_updates=0", "eval.episodes=2"],
    "cql": ["algo=cql", "env=pendulum", "dataset=rlrun/pendulum/medium-replay-v0",
            "total_updates=200", "eval.interval_updates=0", "eval.episodes=2"],
    "dt": ["algo=dt", "env=pendulum", "dataset=rlrun/pendulum/medium-replay-v0",
           "total_updates=100", "eval.interval_updates=0", "eval.episodes=2"],
    "odt": ["algo=odt", "env=pendulum", "dataset=rlrun/pendulum/medium-replay-v0",
            "total_updates=200", "online.offline_updates=100", "online.updates_per_round=50",
            "eval.interval_updates=0", "eval.episodes=2", "optim.name=adamw", "optim.lr=3e-4",
            "optim.warmup_steps=20", "buffer.batch_size=16", "env.max_episode_steps=50",
            "model.target_return=-200"],
    "mappo": ["algo=mappo", "env=vmas/navigation", "env.num_envs=8", "buffer.batch_size=400",
              "trainer.epochs_per_batch=4", "total_frames=2400",
              "collector.frames_per_batch=800", "eval.interval_frames=0", "eval.episodes=2"],
    "ippo": ["algo=ippo", "env=vmas/navigation", "env.num_envs=8", "buffer.batch_size=400",
             "trainer.epochs_per_batch=4", "total_frames=1600",
             "collector.frames_per_batch=800", "eval.interval_frames=0", "eval.episodes=2"],
    "qmix": ["algo=qmix", "env=vmas/navigation", "env.num_envs=8", "total_frames=2400",
             "collector.frames_per_batch=800", "eval.interval_frames=0", "eval.episodes=2"],
    "vdn": ["algo=vdn", "env=vmas/navigation", "env.num_envs=8", "total_frames=2400",
            "collector.frames_per_batch=800", "eval.interval_frames=0", "eval.episodes=2"],
    "maddpg": ["algo=maddpg", "env=vmas/navigation", "env.num_envs=8", "total_frames=2400",
               "collector.frames_per_batch=800", "eval.interval_frames=0", "eval.episodes=2"],
}


def tensor_hash(path: Path) -> str:
    """SHA-256 over every floating-point tensor of a checkpoint, in sorted key order."""
    import torch

    digest = hashlib.sha256()

    def walk(obj: Any, key: str) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point():
                digest.update(key.encode())
                digest.update(obj.detach().contiguous().cpu().numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                walk(obj[k], f"{key}/{k}")
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{key}/{i}")

    state = torch.load(path, map_location="cpu", weights_only=True)
    # the policy's own key repeats the loss's policy.* entries (rlrun.lifecycle.load reads it): hashing the
    # rest keeps fingerprints comparable with those taken before the trainer saved it apart
    state.pop("policy", None)
    walk(state, "")
    return digest.hexdigest()[:16]


def ensure_dataset(work: Path) -> Path:
    root = work / "datasets"
    if not (root / "rlrun" / "pendulum" / "medium-replay-v0").exists():
        subprocess.run([sys.executable, "-m", "rlrun", "dataset", "make", "env=pendulum",
                        "kind=medium-replay", "seed=0", f"root={root}", f"run_dir={work / 'sac-run'}",
                        "progress=false", "threads=1"], check=True)
    return root


def fingerprint(name: str, work: Path, env: dict[str, str]) -> dict[str, Any]:
    run_dir = work / "runs" / name
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    cmd = [sys.executable, "-m", "rlrun", *RUNS[name], *COMMON, f"hydra.run.dir={run_dir}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": f"rc={proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"frames": summary.get("frames"), "optim_steps": summary.get("optim_steps"),
            "eval/episode_return": summary.get("eval/episode_return"),
            "tensors": tensor_hash(run_dir / "checkpoint.pt"), "wall_s": round(time.perf_counter() - t0, 1)}


def compare(before: dict, after: dict) -> int:
    changed = 0
    for name in sorted(set(before) | set(after)):
        a, b = dict(before.get(name, {})), dict(after.get(name, {}))
        a.pop("wall_s", None), b.pop("wall_s", None)
        same = a == b
        changed += not same
        detail = "" if same else f"\n  before {a}\n  after  {b}"
        print(f"{name:16s} {'identical' if same else 'CHANGED'}{detail}")
    print(f"{len(set(before) | set(after)) - changed} identical, {changed} changed")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--only", default="")
    parser.add_argument("--work", default="/tmp/rlrun-fingerprints")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        return compare(*(json.loads(Path(p).read_text()) for p in args.compare))
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(RUNS)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if any(RUNS[n][2].startswith("dataset=") for n in names):
        env["MINARI_DATASETS_PATH"] = str(ensure_dataset(work))
    results = {}
    for name in names:
        results[name] = fingerprint(name, work, env)
        print(name, results[name], flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
