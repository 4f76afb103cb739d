"""End to end: wall time to a return threshold, rlrun against Stable-Baselines3 (same hyperparameters).

Tasks (one seed each by default, ``--seeds`` for more):

* ``ppo_cartpole``: PPO on CartPole-v1 until the evaluation return reaches 475,
  at most 100k frames. rlrun runs its shipped preset (``tuned/ppo_cartpole``:
  8 envs x 128 steps, 10 epochs of minibatches of 256, gamma 0.98, lambda 0.8,
  Adam 1e-3 annealed linearly to 0, clip 0.2, no entropy bonus, value coef
  0.5, max grad norm 0.5, separate 64x64 tanh actor and critic with
  orthogonal init, normalised advantages). GAE is computed once per batch
  (``hooks.gae.every_epoch=false``) because SB3 does so.
* ``sac_pendulum``: SAC on Pendulum-v1 until -200, at most 20k frames. rlrun
  runs ``tuned/sac_pendulum`` (1000 random frames, then 200 frames and 200
  updates per batch, batch 256, Adam 3e-4, 256x256 ReLU, tau 0.005, gamma 0.99,
  learned temperature from 1.0, target entropy -|A|). SB3 gets
  ``train_freq=200, gradient_steps=200``: the same update-to-data ratio and
  interleaving (its default is 1 and 1).

Both sides are evaluated the same way: every ``interval`` frames (at batch
boundaries), 10 deterministic episodes on their own envs seeded ``seed +
1_000_003``, and stop at the first evaluation at or above the threshold. The
time to threshold is training wall time with evaluation time taken out, from
the first collected frame (model and env construction excluded on both sides).
Each side runs in its own process with one torch thread (rlrun's ``threads:
1``); the process's total wall time, imports included, is reported too.
``ratio`` is SB3's time / rlrun's time: above 1, rlrun is faster.

SB3 comes with ``pip install 'rlrun[bench]'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rlrun.benchmarks.common import table

TASKS = {
    "ppo_cartpole": {"env": "CartPole-v1", "threshold": 475.0, "max_frames": 100_000, "interval": 10_240,
                     "rlrun": ["algo=ppo", "env=cartpole", "hooks.gae.every_epoch=false"]},
    "sac_pendulum": {"env": "Pendulum-v1", "threshold": -200.0, "max_frames": 20_000, "interval": 2_000,
                     "rlrun": ["algo=sac", "env=pendulum"]},
}
EVAL_EPISODES, EVAL_SEED_OFFSET = 10, 1_000_003


def run_rlrun(task: str, seed: int) -> dict:
    """rlrun's CLI in a subprocess, stopped by ``eval.target_return``; reads its ``summary.json``."""
    spec = TASKS[task]
    with tempfile.TemporaryDirectory(prefix="rlrun-e2e-") as tmp:
        args = [sys.executable, "-m", "rlrun.cli.main", *spec["rlrun"], f"seed={seed}", "logger=none",
                "progress=false", f"total_frames={spec['max_frames']}", "checkpoint.interval_frames=0",
                f"eval.interval_frames={spec['interval']}", f"eval.episodes={EVAL_EPISODES}",
                f"eval.target_return={spec['threshold']}", "threads=1", "resume=false",
                f"hydra.run.dir={tmp}/run"]
        start = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp)
        process_s = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"rlrun failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        s = json.loads((Path(tmp) / "run" / "summary.json").read_text())
    eval_s = s.get("eval/time_total_s", 0.0)
    return {"frames": s["frames"], "return": s["eval/episode_return"],
            "reached": s["eval/episode_return"] >= spec["threshold"],
            "train_s": s["wall_time_s"] - eval_s, "eval_s": eval_s, "process_s": process_s}


def _sb3_evaluate(model, env_id: str, seed: int) -> float:
    """Mean return of ``EVAL_EPISODES`` deterministic episodes, one per sub-env (as rlrun's Evaluator)."""
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * EVAL_EPISODES,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, _ = envs.reset(seed=seed + EVAL_SEED_OFFSET)
    returns, running = np.zeros(EVAL_EPISODES), np.ones(EVAL_EPISODES, bool)
    while running.any():
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, term, trunc, _ = envs.step(action)
        returns += reward * running
        running &= ~(term | trunc)
    envs.close()
    return float(returns.mean())


def sb3_child(task: str, seed: int) -> dict:
    """Trains SB3 in this process with the same hyperparameters and evaluation as rlrun."""
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    spec = TASKS[task]

    class EvalStop(BaseCallback):
        """Evaluates at rollout starts (after the previous batch's updates, as rlrun does) and stops."""

        def __init__(self):
            super().__init__()
            self.next_at, self.eval_s, self.last, self.stop = spec["interval"], 0.0, None, False

        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= self.next_at:
                start = time.perf_counter()
                self.last = _sb3_evaluate(self.model, spec["env"], seed)
                self.eval_s += time.perf_counter() - start
                self.stop = self.last >= spec["threshold"]
                while self.next_at <= self.num_timesteps:
                    self.next_at += spec["interval"]

        def _on_step(self) -> bool:
            return not self.stop

    if task == "ppo_cartpole":
        env = make_vec_env(spec["env"], n_envs=8, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=128, batch_size=256, n_epochs=10, gamma=0.98, gae_lambda=0.8,
                    learning_rate=lambda remaining: 1e-3 * remaining, clip_range=0.2, ent_coef=0.0,
                    vf_coef=0.5, max_grad_norm=0.5, seed=seed, device="cpu",
                    policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                                   "activation_fn": torch.nn.Tanh})
    else:
        env = make_vec_env(spec["env"], n_envs=1, seed=seed)
        model = SAC("MlpPolicy", env, learning_rate=3e-4, buffer_size=1_000_000, learning_starts=1000,
                    batch_size=256, tau=0.005, gamma=0.99, train_freq=200, gradient_steps=200,
                    ent_coef="auto_1.0", seed=seed, device="cpu", policy_kwargs={"net_arch": [256, 256]})
    callback = EvalStop()
    start = time.perf_counter()
    model.learn(total_timesteps=spec["max_frames"], callback=callback)
    wall = time.perf_counter() - start
    if callback.last is None or not callback.stop:  # the final evaluation, as rlrun's after its last batch
        t = time.perf_counter()
        callback.last = _sb3_evaluate(model, spec["env"], seed)
        callback.eval_s += time.perf_counter() - t
        wall += time.perf_counter() - t
    return {"frames": int(model.num_timesteps), "return": callback.last,
            "reached": callback.last >= spec["threshold"], "train_s": wall - callback.eval_s,
            "eval_s": callback.eval_s}


def run_sb3(task: str, seed: int) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlrun.benchmarks.end_to_end", "--sb3-child", task,
                           str(seed)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"SB3 failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": time.perf_counter() - start}


def run(quick: bool = False, reps: int | None = None, seeds: int | None = None) -> dict:
    """Runs each task with rlrun then SB3, seed by seed (``reps`` = seeds; ``--quick``: PPO only)."""
    if importlib.util.find_spec("stable_baselines3") is None:
        return {"rows": [], "notes": ["skipped: Stable-Baselines3 is not installed "
                                      "(pip install 'rlrun[bench]')."]}
    tasks = ["ppo_cartpole"] if quick else list(TASKS)
    rows = []
    for task in tasks:
        for seed in range(seeds or reps or 1):
            for lib, fn in (("rlrun", run_rlrun), ("sb3", run_sb3)):
                result = fn(task, seed)
                rows.append({"task": task, "seed": seed, "lib": lib, **result})
                print(f"  {task} seed {seed} {lib}: {result['frames']} frames, "
                      f"return {result['return']:.1f}, train {result['train_s']:.1f} s", flush=True)
    for row in rows:
        if row["lib"] == "sb3":
            ours = next(r for r in rows if r["lib"] == "rlrun" and r["task"] == row["task"]
                        and r["seed"] == row["seed"])
            ours["ratio"] = row["train_s"] / ours["train_s"] if ours["reached"] and row["reached"] else None
    summary = {}
    for task in tasks:
        ratios = [r["ratio"] for r in rows if r["task"] == task and r.get("ratio") is not None]
        seeds_run = sum(r["task"] == task and r["lib"] == "rlrun" for r in rows)
        summary[task] = {"median_ratio": float(np.median(ratios)) if ratios else None,
                         "seeds_both_reached": len(ratios), "seeds": seeds_run}
    notes = [f"{task}: median SB3/rlrun time ratio {v['median_ratio']:.2f} over {v['seeds_both_reached']} "
             f"of {v['seeds']} seeds where both reached the threshold" if v["median_ratio"] is not None
             else f"{task}: no seed where both reached the threshold" for task, v in summary.items()]
    return {"rows": rows, "summary": summary, "notes": [
        *notes, "time = training wall time to the first evaluation at or above the threshold, evaluation "
        "excluded; ratio = SB3 time / rlrun time (set when both reached the threshold)."]}


def render(result: dict) -> str:
    for row in result["rows"]:  # throughput apart from sample efficiency
        row["ms_per_frame"] = 1e3 * row["train_s"] / max(row["frames"], 1)
    cols = [("task", "task", "s"), ("seed", "seed", "d"), ("lib", "library", "s"),
            ("reached", "reached", ""), ("frames", "frames", "d"), ("return", "eval return", ".1f"),
            ("train_s", "time to threshold s", ".1f"), ("ms_per_frame", "ms per frame", ".2f"),
            ("eval_s", "eval s (excluded)", ".1f"),
            ("process_s", "process s", ".1f"), ("ratio", "SB3 time / rlrun time", ".2f")]
    return "\n".join([table(result["rows"], cols), *(f"\n{n}" for n in result["notes"])])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sb3-child", nargs=2, metavar=("TASK", "SEED"), required=True)
    task_, seed_ = parser.parse_args().sb3_child
    print(json.dumps(sb3_child(task_, int(seed_))))
