"""Which of SAC's unmapped differences can act in a run? (issue 43)

``python -m rlrun.benchmarks sac_probe [--task sac_halfcheetah] [--seeds 1] [--seed-start 0] [--jobs 2]``

``peers.DIFFERENCES["sac"]`` names two differences between rlrun's SAC and SB3's that no setting
maps and that live in the actor's squashed Gaussian:

* the log-std clamp: rlrun's lower bound is -5, SB3's -20. They differ only where the log-std head
  goes below -5;
* the tanh correction of the log-probability: rlrun's exact log(1 - tanh(u)^2), SB3's
  log(1 - tanh(u)^2 + 1e-6). Per action entry the two differ by log(1 + 1e-6 / sech(u)^2): under
  1e-3 nats for |u| < 4.6, about 1 nat at |u| = 7.6, and growing with |u| beyond.

Each library trains the task exactly as the fidelity benchmark runs it (same settings, same seeds,
one child process per run) with its actor observed on the loss's calls: every ``EVERY``-th call on a
training batch, the log-std head *before* any clamp and u = mu + std * eps, eps from a generator of
the probe's own (the run's random streams are untouched). Reported per eighth of the updates, per
library over seeds: the lowest log-std the head asked for, the fraction of entries below -5, the
fraction with |u| > 6 and the mean and largest per-sample difference of the two corrections (nats,
summed over the action's entries). The SB3 side needs SB3 in this interpreter (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rlrun.benchmarks import fidelity, peers

EVERY = 10
"""Record one in this many loss calls: 8000 records over SAC HalfCheetah's 40,000 updates."""
RLRUN_MIN_LOG_STD = -5.0
SB3_MIN_LOG_STD = -20.0
PHASES = 8


@torch.no_grad()
def squash_stats(mu: torch.Tensor, log_std_head: torch.Tensor, own_min: float,
                 generator: torch.Generator) -> dict[str, float]:
    """One record: ``mu`` and the unclamped ``log_std_head`` of a batch (batch x action entries);
    u is drawn with the library's own clamp ``own_min`` (and the common upper bound 2)."""
    std = log_std_head.clamp(own_min, 2.0).exp()
    u = mu + std * torch.randn(mu.shape, generator=generator, dtype=mu.dtype)
    exact = 2 * (math.log(2) - u - F.softplus(-2 * u))  # log(1 - tanh(u)^2), stable
    capped = torch.log(1 - torch.tanh(u) ** 2 + 1e-6)  # SB3's form
    gap = (capped - exact).sum(-1)  # log pi(rlrun's form) - log pi(SB3's form), per sample
    return {
        "log_std_min": log_std_head.min().item(),
        "below_rlrun_clamp": (log_std_head < RLRUN_MIN_LOG_STD).float().mean().item(),
        "u_above_6": (u.abs() > 6).float().mean().item(),
        "correction_gap_mean": gap.mean().item(),
        "correction_gap_max": gap.abs().max().item(),
    }


class Recorder:
    """Counts the actor's calls on training batches (``batch`` rows) and keeps every EVERY-th's stats."""

    def __init__(self, batch: int, own_min: float):
        self.batch, self.own_min, self.calls, self.records = batch, own_min, 0, []
        self.generator = torch.Generator().manual_seed(12345)

    def due(self, rows: int) -> bool:
        """Counts a call of ``rows`` rows; True when it is a loss call to record. Asked before the
        heads are computed, so the probe's extra actor pass runs on one call in EVERY, not on all."""
        if rows != self.batch:  # collection's calls (one env), not the loss's
            return False
        self.calls += 1
        return self.calls % EVERY == 0

    def record(self, mu: torch.Tensor, log_std_head: torch.Tensor) -> None:
        self.records.append(squash_stats(mu, log_std_head, self.own_min, self.generator))


def summarise(records: list[dict]) -> dict:
    """Records (or summaries) as one: the lowest log-std, the mean fractions and gaps, the largest gap."""
    return {
        "log_std_min": min(r["log_std_min"] for r in records),
        **{k: float(np.mean([r[k] for r in records]))
           for k in ("below_rlrun_clamp", "u_above_6", "correction_gap_mean")},
        "correction_gap_max": max(r["correction_gap_max"] for r in records),
    }


def phases(records: list[dict], n: int = PHASES) -> list[dict]:
    """The records in ``n`` consecutive parts of the run, each summarised."""
    return [summarise([records[i] for i in part]) for part in np.array_split(np.arange(len(records)), n)]


# ----- the two sides, each in a child process -------------------------------------------------------


def child(side: str, task_name: str, seed: int, out: Path, frames: int | None = None) -> None:
    """Trains ``side`` on the task with its actor observed; writes ``out`` (records, final return)."""
    task = peers.TASKS[task_name]
    if task.algo != "sac":
        raise ValueError(f"{task_name} is not a SAC task")
    if side == "rlrun":
        from rlrun.cli.main import main as rlrun_main
        from rlrun.modules import networks

        record = Recorder(task.values["batch"], RLRUN_MIN_LOG_STD)
        sample = networks.Actor.sample

        def observed(self: networks.Actor, obs: torch.Tensor):
            if record.due(obs.shape[0]):
                with torch.no_grad():
                    record.record(*self.features(obs).chunk(2, -1))
            return sample(self, obs)

        networks.Actor.sample = observed
        run_dir = out.parent / f"{out.stem}_run"
        sys.argv = ["rlrun", *fidelity.rlrun_args(task, seed, frames, run_dir)]
        try:
            rlrun_main()
        except SystemExit as e:
            if e.code:
                raise
        final = json.loads((run_dir / "summary.json").read_text())["eval/episode_return"]
    else:
        from stable_baselines3.sac.policies import Actor

        from rlrun.benchmarks import peer_run

        record = Recorder(task.values["batch"], SB3_MIN_LOG_STD)
        action_log_prob = Actor.action_log_prob

        def observed(self: Actor, obs: torch.Tensor):
            if record.due(obs.shape[0]):
                with torch.no_grad():
                    latent = self.latent_pi(self.extract_features(obs, self.features_extractor))
                    record.record(self.mu(latent), self.log_std(latent))  # the head before SB3's clamp
            return action_log_prob(self, obs)

        Actor.action_log_prob = observed
        final = peer_run.peer_child("sb3", task_name, seed, frames)["return"]
    out.write_text(json.dumps({"side": side, "task": task_name, "seed": seed, "return": final,
                               "calls": record.calls, "records": record.records}))


def run(task: str, seeds: list[int], out: Path, jobs: int, frames: int | None = None) -> dict:
    """Both sides on every seed, ``jobs`` children at once; their records merged per library."""
    out.mkdir(parents=True, exist_ok=True)
    runs = [(side, seed, out / f"{side}_s{seed}.json") for seed in seeds for side in ("rlrun", "sb3")]

    def one(side: str, seed: int, path: Path) -> dict:
        args = [sys.executable, "-m", "rlrun.benchmarks.sac_probe", "--child", side, "--task", task,
                "--seed-start", str(seed), "--out", str(path), *(["--frames", str(frames)] if frames else [])]
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{side} seed {seed} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return json.loads(path.read_text())

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda r: one(*r), runs))
    result = {"task": task, "seeds": seeds, "frames": frames, "every": EVERY, "libs": {}}
    for side in ("rlrun", "sb3"):
        mine = [d for d in done if d["side"] == side]
        per_seed = [phases(d["records"]) for d in mine]
        result["libs"][side] = {
            "returns": [d["return"] for d in mine],
            "calls": [d["calls"] for d in mine],
            "phases": [summarise([p[i] for p in per_seed]) for i in range(PHASES)],
        }
    return result


def markdown(result: dict) -> str:
    """One table: a row per library and eighth of the run."""
    lines = [
        f"{result['task']}, seeds {', '.join(map(str, result['seeds']))}; every {result['every']}th loss "
        "call of the actor on a training batch",
        "",
        "| library | part of the updates | lowest log-std head | entries below -5 | entries with abs(u) > 6 "
        "| correction gap, mean (nats) | correction gap, largest (nats) |",
        "|---|---|---|---|---|---|---|",
    ]
    for side, lib in result["libs"].items():
        for i, p in enumerate(lib["phases"]):
            lines.append(
                f"| {side} | {i + 1}/{PHASES} | {p['log_std_min']:.2f} | {p['below_rlrun_clamp']:.2%} "
                f"| {p['u_above_6']:.4%} | {p['correction_gap_mean']:.2e} | {p['correction_gap_max']:.2f} |"
            )
    lines.append("")
    lines += [f"- {side}: final returns {', '.join(f'{r:.1f}' for r in lib['returns'])}"
              for side, lib in result["libs"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m rlrun.benchmarks sac_probe``; exit 2 with one line on bad input."""
    p = argparse.ArgumentParser(
        prog="python -m rlrun.benchmarks sac_probe", description=__doc__.split("\n")[0]
    )
    sac_tasks = [name for name, t in peers.TASKS.items() if t.algo == "sac"]
    p.add_argument("--task", default="sac_halfcheetah", help=f"one of {', '.join(sac_tasks)}")
    p.add_argument("--seeds", type=int, default=1, help="seeds per side (default 1)")
    p.add_argument("--seed-start", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="runs at once")
    p.add_argument("--frames", type=int, default=None, help="a shorter budget (a smoke run)")
    p.add_argument("--out", type=Path, default=Path("bench_results/sac_probe"))
    p.add_argument("--child", choices=("rlrun", "sb3"), default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.task not in sac_tasks:
        print(f"error: --task: {args.task!r} is not a SAC task; choose from {', '.join(sac_tasks)}",
              file=sys.stderr)
        return 2
    if args.seeds < 1 or args.jobs < 1 or (args.frames is not None and args.frames < 1):
        print("error: --seeds, --jobs and --frames must be >= 1", file=sys.stderr)
        return 2
    if args.child:
        child(args.child, args.task, args.seed_start, args.out, args.frames)
        return 0
    result = run(args.task, list(range(args.seed_start, args.seed_start + args.seeds)), args.out,
                 args.jobs, args.frames)
    text = markdown(result)
    (args.out / "sac_probe.json").write_text(json.dumps(result, indent=1))
    (args.out / "sac_probe.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
