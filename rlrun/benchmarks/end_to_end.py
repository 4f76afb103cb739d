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

* ``ppo_cartpole_zoo`` (issue 27): whole processes, no early stop. rlrun is the bare
  ``rlrun logger=none progress=false`` command (PPO CartPole, its default 100k frames, its
  periodic evaluations included); SB3 runs rl-zoo3's tuned CartPole-v1 hyperparameters
  (``hyperparams/ppo.yml`` of rl-zoo3 2.9.2: 8 envs x 32 steps, batch 256, 20 epochs, gamma
  0.98, lambda 0.8, no entropy bonus, learning rate and clip range annealed linearly from
  1e-3 and 0.2, SB3's default MlpPolicy) for 100k frames, then one evaluation as below. The
  figure is the whole process's wall time, imports included; ``process_ratio`` = rlrun's
  process time / SB3's (below 1, rlrun is faster; the issue's target is <= 0.5).

Both sides of the threshold tasks are evaluated the same way: every ``interval`` frames (at batch
boundaries), 10 deterministic episodes on their own envs seeded ``seed +
1_000_003``, and stop at the first evaluation at or above the threshold. The
time to threshold is training wall time with evaluation time taken out, from
the first collected frame (model and env construction excluded on both sides).
Each side runs in its own process with one torch thread (rlrun's ``threads:
1``); the process's total wall time, imports included, is reported too.
``ratio`` is SB3's time / rlrun's time: above 1, rlrun is faster.

SB3 comes with ``pip install 'rlrun[bench]'``; to keep it out of rlrun's environment, give
another interpreter that has it (and rlrun) with ``--sb3-python`` or ``RLRUN_SB3_PYTHON``::

    python -m rlrun.benchmarks.end_to_end --sb3-python /path/to/venv-sb3/bin/python \
        --tasks ppo_cartpole_zoo --seeds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rlrun.benchmarks import fidelity, peers
from rlrun.benchmarks.common import table


def _mapped(task: str) -> list[str]:
    """rlrun's side of a mapped task (``rlrun.benchmarks.peers``), its budget left to the caller."""
    return [o for o in peers.rlrun_overrides(peers.TASKS[task]) if not o.startswith("total_frames=")]


TASKS = {  # "mapped": both sides from rlrun.benchmarks.peers (the fidelity benchmark's mapping)
    "ppo_cartpole": {"env": "CartPole-v1", "threshold": 475.0, "max_frames": 102_400, "interval": 10_240,
                     "rlrun": _mapped("ppo_cartpole"), "mapped": "ppo_cartpole"},
    "sac_pendulum": {"env": "Pendulum-v1", "threshold": -200.0, "max_frames": 20_000, "interval": 2_000,
                     "rlrun": _mapped("sac_pendulum"), "mapped": "sac_pendulum"},
    # whole processes, full budget (no early stop): `rlrun` against SB3 with rl-zoo3's tuned settings
    "ppo_cartpole_zoo": {"env": "CartPole-v1", "threshold": 475.0, "max_frames": 100_000, "whole": True,
                         "rlrun": []},
}
DEFAULT_TASKS = ("ppo_cartpole", "sac_pendulum")
SB3_PYTHON_ENV = "RLRUN_SB3_PYTHON"
EVAL_EPISODES, EVAL_SEED_OFFSET = peers.EVAL_EPISODES, peers.EVAL_SEED_OFFSET


def run_rlrun(task: str, seed: int) -> dict:
    """rlrun's CLI in a subprocess, stopped by ``eval.target_return``; reads its ``summary.json``."""
    spec = TASKS[task]
    with tempfile.TemporaryDirectory(prefix="rlrun-e2e-") as tmp:
        if spec.get("whole"):  # the command as a user types it, its defaults untouched
            args = [sys.executable, "-m", "rlrun", *spec["rlrun"], f"seed={seed}", "logger=none",
                    "progress=false", f"hydra.run.dir={tmp}/run"]
        else:
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


def sb3_child(task: str, seed: int) -> dict:
    """Trains SB3 in this process with the same hyperparameters and evaluation as rlrun."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from rlrun.benchmarks import peer_run

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
                self.last = peer_run.peer_evaluate(self.model, spec["env"], seed)
                self.eval_s += time.perf_counter() - start
                self.stop = self.last >= spec["threshold"]
                while self.next_at <= self.num_timesteps:
                    self.next_at += spec["interval"]

        def _on_step(self) -> bool:
            return not self.stop

    if task == "ppo_cartpole_zoo":  # rl-zoo3 2.9.2's hyperparams/ppo.yml, CartPole-v1 ("Tuned")
        env = make_vec_env(spec["env"], n_envs=8, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate=lambda remaining: 1e-3 * remaining,
                    clip_range=lambda remaining: 0.2 * remaining, seed=seed, device="cpu")
        start = time.perf_counter()
        model.learn(total_timesteps=spec["max_frames"])
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        ret = peer_run.peer_evaluate(model, spec["env"], seed)
        return {"frames": int(model.num_timesteps), "return": ret, "reached": ret >= spec["threshold"],
                "train_s": train_s, "eval_s": time.perf_counter() - start}
    model = peer_run.build("sb3", spec["mapped"], seed)[0]  # every setting from rlrun.benchmarks.peers
    callback = EvalStop()
    start = time.perf_counter()
    model.learn(total_timesteps=spec["max_frames"], callback=callback)
    wall = time.perf_counter() - start
    if callback.last is None or not callback.stop:  # the final evaluation, as rlrun's after its last batch
        t = time.perf_counter()
        callback.last = peer_run.peer_evaluate(model, spec["env"], seed)
        callback.eval_s += time.perf_counter() - t
        wall += time.perf_counter() - t
    return {"frames": int(model.num_timesteps), "return": callback.last,
            "reached": callback.last >= spec["threshold"], "train_s": wall - callback.eval_s,
            "eval_s": callback.eval_s}


def sb3_python() -> str:
    """The interpreter that runs SB3: ``RLRUN_SB3_PYTHON`` if set, else this one."""
    return os.environ.get(SB3_PYTHON_ENV) or sys.executable


def _has_sb3(python: str) -> bool:
    if python == sys.executable:
        return importlib.util.find_spec("stable_baselines3") is not None
    return subprocess.run([python, "-c", "import stable_baselines3"], capture_output=True).returncode == 0


def run_sb3(task: str, seed: int) -> dict:
    """SB3 in a child process of ``sb3_python()``; its ``process_s`` is the whole process."""
    start = time.perf_counter()
    proc = subprocess.run([sb3_python(), "-m", "rlrun.benchmarks.end_to_end", "--sb3-child", task,
                           str(seed)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"SB3 failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": time.perf_counter() - start}


def run(quick: bool = False, reps: int | None = None, seeds: int | None = None,
        tasks: list[str] | None = None) -> dict:
    """Runs each task with rlrun and SB3, seed by seed (``reps`` = seeds; ``--quick``: PPO only).

    The order within a pair alternates by seed (rlrun first on even seeds), so a drift in the
    machine's load favours neither side.
    """
    if not _has_sb3(sb3_python()):
        return {"rows": [], "notes": [f"skipped: Stable-Baselines3 is not installed for {sb3_python()} "
                                      f"(pip install 'rlrun[bench]', or set {SB3_PYTHON_ENV})."]}
    tasks = tasks or (["ppo_cartpole"] if quick else list(DEFAULT_TASKS))
    rows = []
    for task in tasks:
        for seed in range(seeds or reps or 1):
            pair = (("rlrun", run_rlrun), ("sb3", run_sb3))
            for lib, fn in (pair if seed % 2 == 0 else pair[::-1]):
                result = fn(task, seed)
                rows.append({"task": task, "seed": seed, "lib": lib, "load": os.getloadavg()[0], **result})
                print(f"  {task} seed {seed} {lib}: {result['frames']} frames, "
                      f"return {result['return']:.1f}, train {result['train_s']:.1f} s, "
                      f"process {result['process_s']:.1f} s, load {rows[-1]['load']:.1f}", flush=True)
    for row in rows:
        if row["lib"] == "sb3":
            ours = next(r for r in rows if r["lib"] == "rlrun" and r["task"] == row["task"]
                        and r["seed"] == row["seed"])
            ours["ratio"] = row["train_s"] / ours["train_s"] if ours["reached"] and row["reached"] else None
            ours["process_ratio"] = ours["process_s"] / row["process_s"]
    summary = {}
    for task in tasks:
        ratios = [r["ratio"] for r in rows if r["task"] == task and r.get("ratio") is not None]
        process = [r["process_ratio"] for r in rows if r["task"] == task and "process_ratio" in r]
        seeds_run = sum(r["task"] == task and r["lib"] == "rlrun" for r in rows)
        summary[task] = {"median_ratio": float(np.median(ratios)) if ratios else None,
                         "seeds_both_reached": len(ratios), "seeds": seeds_run,
                         "median_process_ratio": float(np.median(process)) if process else None}
    notes = [f"{task}: median SB3/rlrun time ratio {v['median_ratio']:.2f} over {v['seeds_both_reached']} "
             f"of {v['seeds']} seeds where both reached the threshold" if v["median_ratio"] is not None
             else f"{task}: no seed where both reached the threshold" for task, v in summary.items()]
    notes += [f"{task}: median rlrun/SB3 whole-process time ratio {v['median_process_ratio']:.2f} over "
              f"{v['seeds']} pairs" for task, v in summary.items() if v["median_process_ratio"] is not None]
    return {"rows": rows, "summary": summary, "notes": [
        *notes, "time = training wall time to the first evaluation at or above the threshold, evaluation "
        "excluded (ppo_cartpole_zoo: the whole budget); ratio = SB3 time / rlrun time (set when both "
        "reached the threshold); process ratio = rlrun process time / SB3 process time."]}


PAIRED = ("ppo_cartpole", "a2c_cartpole", "dqn_cartpole", "sac_pendulum", "td3_pendulum", "sac_halfcheetah")
"""Issue 46's pairing: rlrun, SB3 and SBX on each task at the mapping's identical settings and updates."""
SBX_PYTHON_ENV = "RLRUN_SBX_PYTHON"


def _child_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_paired(tasks: list[str], seeds: int = 3, libs: tuple[str, ...] = ("sb3", "sbx"),
               pythons: dict[str, str] | None = None, log=print, frames: int | None = None) -> dict:
    """Whole processes of every side per task and seed, at the task's budget (``frames``: another,
    a whole number of eval intervals) and at one eval interval.

    The same settings and update counts on all sides (``peers.mapping``; SBX where it has the
    algorithm). Per-update cost = the difference of the two runs' process times over the difference
    of their update counts (``peers.updates``; the frames those updates collect included); fixed
    cost = the short run's time less its updates at that cost (start-up, imports, jit compiles).
    Each figure also in CPU seconds of the child process (user + system, all its threads): on a
    shared machine wall time measures the scheduler's share as much as the code. The sides' order
    alternates by seed.
    """
    pythons = pythons or {}
    rows = []
    for name in tasks:
        task = peers.TASKS[name]
        short, full = task.eval_interval, frames or task.frames
        sides = ["rlrun", *(lib for lib in libs if lib != "sbx" or task.sbx)]
        for seed in range(seeds):
            for lib in sides if seed % 2 == 0 else sides[::-1]:
                out = {}
                for label, budget in (("full", full), ("short", short)):
                    cpu = _child_cpu_s()
                    out[label] = (fidelity.run_rlrun(task, seed, budget) if lib == "rlrun" else
                                  fidelity.run_peer(lib, task, seed, budget, pythons.get(lib)))
                    out[label]["cpu_s"] = _child_cpu_s() - cpu
                updates, few = peers.updates(task, full), peers.updates(task, short)
                row = {"task": name, "seed": seed, "lib": lib, "updates": updates, "frames": full,
                       "return": out["full"]["return"], "train_s": out["full"]["train_s"]}
                for clock, fixed, per in (("process_s", "fixed_s", "per_update_ms"),
                                          ("cpu_s", "fixed_cpu_s", "per_update_cpu_ms")):
                    slope = (out["full"][clock] - out["short"][clock]) / (updates - few)
                    row[clock], row[per] = out["full"][clock], 1e3 * slope
                    row[fixed] = out["short"][clock] - slope * few
                row["load"] = os.getloadavg()[0]
                rows.append(row)
                log(f"  {name} seed {seed} {lib}: process {row['process_s']:.1f} s "
                    f"({row['cpu_s']:.1f} s CPU), fixed {row['fixed_s']:.1f} s "
                    f"({row['fixed_cpu_s']:.1f} s CPU), "
                    f"{row['per_update_ms']:.2f} ms/update ({row['per_update_cpu_ms']:.2f} CPU), "
                    f"return {row['return']:.1f}, load {row['load']:.1f}")
    summary = []
    for name in tasks:
        for lib in libs:
            by_seed = {r["seed"]: r for r in rows if r["task"] == name and r["lib"] == lib}
            pairs = [(r, by_seed[r["seed"]]) for r in rows
                     if r["task"] == name and r["lib"] == "rlrun" and r["seed"] in by_seed]
            if not pairs:
                continue
            item = {"task": name, "peer": lib, "pairs": len(pairs), "updates": pairs[0][0]["updates"]}
            for key in ("process_s", "fixed_s", "per_update_ms", "cpu_s", "fixed_cpu_s", "per_update_cpu_ms"):
                ratios = [a[key] / b[key] for a, b in pairs if b[key] > 0]  # CPU: 0 where not measured
                item[f"{key}_ratio"], item[f"{key}_min"], item[f"{key}_max"] = (
                    (float(np.median(ratios)), min(ratios), max(ratios)) if ratios else (None, None, None))
                item[f"rlrun_{key}"] = float(np.median([a[key] for a, _ in pairs]))
                item[f"peer_{key}"] = float(np.median([b[key] for _, b in pairs]))
            summary.append(item)
    return {"rows": rows, "summary": summary}


def render_paired(result: dict) -> str:
    """One row per task and peer: medians of the paired ratios rlrun / peer (below 1: rlrun is faster)."""
    cols = [("task", "task", "s"), ("peer", "peer", "s"), ("pairs", "pairs", "d"),
            ("updates", "updates", "d"),
            ("rlrun_process_s", "rlrun process s", ".1f"), ("peer_process_s", "peer process s", ".1f"),
            ("process_s_ratio", "process rlrun/peer", ".2f"), ("process_s_min", "min", ".2f"),
            ("process_s_max", "max", ".2f"), ("rlrun_fixed_s", "rlrun fixed s", ".1f"),
            ("peer_fixed_s", "peer fixed s", ".1f"), ("fixed_s_ratio", "fixed rlrun/peer", ".2f"),
            ("rlrun_per_update_ms", "rlrun ms/update", ".2f"),
            ("peer_per_update_ms", "peer ms/update", ".2f"),
            ("per_update_ms_ratio", "per-update rlrun/peer", ".2f"), ("per_update_ms_min", "min", ".2f"),
            ("per_update_ms_max", "max", ".2f"), ("cpu_s_ratio", "CPU process rlrun/peer", ".2f"),
            ("cpu_s_min", "min", ".2f"), ("cpu_s_max", "max", ".2f"),
            ("fixed_cpu_s_ratio", "CPU fixed rlrun/peer", ".2f"),
            ("rlrun_per_update_cpu_ms", "rlrun CPU ms/update", ".2f"),
            ("peer_per_update_cpu_ms", "peer CPU ms/update", ".2f"),
            ("per_update_cpu_ms_ratio", "CPU per-update rlrun/peer", ".2f"),
            ("per_update_cpu_ms_min", "min", ".2f"), ("per_update_cpu_ms_max", "max", ".2f")]
    return table(result["summary"], cols) + (
        "\n\nIdentical settings and update counts on every side (rlrun.benchmarks.peers). Ratios: median "
        "of the per-seed ratios, min and max of them. Per update: the extra process time of the full run "
        "over its extra updates, against a run of one evaluation interval; fixed: that short run's time "
        "less its updates at that cost. CPU: the same from the child processes' user + system seconds.")


def render(result: dict) -> str:
    for row in result["rows"]:  # throughput apart from sample efficiency
        row["ms_per_frame"] = 1e3 * row["train_s"] / max(row["frames"], 1)
    cols = [("task", "task", "s"), ("seed", "seed", "d"), ("lib", "library", "s"),
            ("reached", "reached", ""), ("frames", "frames", "d"), ("return", "eval return", ".1f"),
            ("train_s", "time to threshold s", ".1f"), ("ms_per_frame", "ms per frame", ".2f"),
            ("eval_s", "eval s (excluded)", ".1f"),
            ("process_s", "process s", ".1f"), ("ratio", "SB3 time / rlrun time", ".2f"),
            ("process_ratio", "rlrun process / SB3 process", ".2f"), ("load", "load", ".1f")]
    return "\n".join([table(result["rows"], cols), *(f"\n{n}" for n in result["notes"])])


def main(argv: list[str] | None = None) -> int:
    """``python -m rlrun.benchmarks.end_to_end``: the benchmark (or, with ``--sb3-child``, SB3's side)."""
    parser = argparse.ArgumentParser(prog="python -m rlrun.benchmarks.end_to_end")
    parser.add_argument("--sb3-child", nargs=2, metavar=("TASK", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(DEFAULT_TASKS))
    parser.add_argument("--seeds", type=int, default=3, help="pairs per task (seeds 0..N-1)")
    parser.add_argument("--sb3-python", help=f"interpreter with stable-baselines3 (or ${SB3_PYTHON_ENV})")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--paired", nargs="*", metavar="TASK", default=None,
                        help=f"issue 46's pairing with SB3 and SBX at identical settings (default tasks: "
                             f"{' '.join(PAIRED)}; any of {', '.join(peers.TASKS)})")
    parser.add_argument("--sbx-python", help=f"interpreter with sbx-rl (or ${SBX_PYTHON_ENV})")
    parser.add_argument("--frames", type=int, help="--paired: this budget instead of each task's "
                        "(a whole number of its eval intervals; fixed and per-update costs extrapolate)")
    args = parser.parse_args(argv)
    if args.paired is not None:
        tasks = args.paired or list(PAIRED)
        if unknown := [t for t in tasks if t not in peers.TASKS]:
            print(f"error: --paired: unknown {', '.join(unknown)}; choose from {', '.join(peers.TASKS)}",
                  file=sys.stderr)
            return 2
        pythons = {"sb3": args.sb3_python or sb3_python(),
                   "sbx": args.sbx_python or os.environ.get(SBX_PYTHON_ENV) or sys.executable}
        libs = tuple(lib for lib in ("sb3", "sbx") if subprocess.run(
            [pythons[lib], "-c", f"import {'stable_baselines3' if lib == 'sb3' else 'sbx'}"],
            capture_output=True).returncode == 0)
        print(f"load average at start: {os.getloadavg()[0]:.2f}; peers: "
              + (", ".join(f"{lib} ({pythons[lib]})" for lib in libs) or "none installed"), flush=True)
        result = run_paired(tasks, args.seeds, libs, pythons, frames=args.frames)
        print(render_paired(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        return 0
    if args.sb3_child:
        print(json.dumps(sb3_child(args.sb3_child[0], int(args.sb3_child[1]))))
        return 0
    if args.sb3_python:
        os.environ[SB3_PYTHON_ENV] = args.sb3_python
    print(f"load average at start: {os.getloadavg()[0]:.2f}; SB3 python: {sb3_python()}", flush=True)
    result = run(seeds=args.seeds, tasks=args.tasks)
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
