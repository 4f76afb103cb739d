"""``python -m rlrun.benchmarks ddp``: what the data-parallel learner's all-reduce costs (issue 39).

Measured here: for SAC (Pendulum's 256x256 actor and twin Q), PPO (CartPole's 64x64 actor-critic)
and PPO on Atari (the Nature CNN), one update's time in one process on the whole batch, and with
2 gloo ranks on this machine the same update on half the batch plus the all-reduce of its
gradients (bytes per step, time per step, the all-reduce's share). On paper: the all-reduce of
those bytes on 8 GPUs of a node and on 4 nodes x 8 GPUs, from the ring all-reduce's traffic
``2 (n - 1) / n x bytes / bus bandwidth`` plus a latency; the bandwidths and latencies are
inputs (``--nvlink-gbs`` etc.), defaulting to the order of NCCL's published all_reduce bus
bandwidths (NVLink node ~200 GB/s, 400 Gb/s InfiniBand between nodes ~40 GB/s), not measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tensordict import TensorDict

from rlrun.algos.ppo import PPOLoss
from rlrun.algos.sac import SACLoss
from rlrun.core.specs import EnvSpec
from rlrun.modules.cnn import actor_critic_cnn
from rlrun.modules.models import actor_critic, actor_twin_q
from rlrun.trainer.optim import OptimizerStep

CASES = ("sac", "ppo", "ppo_atari")
BATCH = {"sac": 256, "ppo": 256, "ppo_atari": 256}


def _case(name: str, batch: int) -> tuple[torch.nn.Module, Callable[[], TensorDict]]:
    torch.manual_seed(0)
    if name == "sac":
        spec = EnvSpec((3,), np.dtype(np.float32), False, 1)
        loss = SACLoss(actor_twin_q(spec), spec, gamma=0.99)
        return loss, lambda: TensorDict({
            "observation": torch.randn(batch, 3), "action": torch.rand(batch, 1) * 2 - 1,
            ("next", "observation"): torch.randn(batch, 3), ("next", "reward"): torch.randn(batch, 1),
            ("next", "terminated"): torch.zeros(batch, 1, dtype=torch.bool)}, [batch])
    if name == "ppo":
        spec, obs = EnvSpec((4,), np.dtype(np.float32), True, 2), (4,)
        loss = PPOLoss(actor_critic(spec))
    else:
        spec, obs = EnvSpec((4, 84, 84), np.dtype(np.uint8), True, 6), (4, 84, 84)
        loss = PPOLoss(actor_critic_cnn(spec))
    dtype = torch.uint8 if name == "ppo_atari" else torch.float32
    return loss, lambda: TensorDict({
        "observation": torch.randint(0, 255, (batch, *obs)).to(dtype) if dtype == torch.uint8
        else torch.randn(batch, *obs), "action": torch.randint(0, spec.action_dim, (batch,)),
        "sample_log_prob": torch.full((batch,), -1.0), "advantage": torch.randn(batch),
        "value_target": torch.randn(batch)}, [batch])


def _time_updates(name: str, batch: int, reps: int) -> tuple[list[float], list[float], int]:
    """Per update: (total seconds, all-reduce seconds), and the gradient bytes per step."""
    loss, make = _case(name, batch)
    step = OptimizerStep(loss.param_groups(), "adam", lr=1e-4)
    import rlrun.trainer.optim as optim

    spent: list[float] = []
    real = optim.average_gradients

    def timed(params):
        t0 = time.perf_counter()
        real(params)
        spent.append(time.perf_counter() - t0)

    optim.average_gradients = timed
    td = make()
    totals = []
    try:
        for i in range(reps + 2):
            t0 = time.perf_counter()
            step.step(loss(td))
            if i >= 2:
                totals.append(time.perf_counter() - t0)
    finally:
        optim.average_gradients = real
    nbytes = sum(p.numel() * p.element_size() for p in loss.parameters() if p.requires_grad)
    return totals, spent[2:], nbytes


def _rank(rank: int, rendezvous: str, reps: int, out: dict) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        for name in CASES:
            totals, reduces, _ = _time_updates(name, BATCH[name] // 2, reps)
            if rank == 0:
                out[name] = (statistics.median(totals), statistics.median(reduces))
    finally:
        dist.destroy_process_group()


def run(reps: int = 20) -> dict:
    torch.set_num_threads(1)
    result: dict = {}
    for name in CASES:
        totals, _, nbytes = _time_updates(name, BATCH[name], reps)
        result[name] = {"bytes": nbytes, "one_s": statistics.median(totals)}
    with tempfile.TemporaryDirectory() as tmp, mp.Manager() as manager:
        out = manager.dict()
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_rank, args=(r, os.path.join(tmp, "rdv"), reps, out)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        for name in CASES:
            result[name]["two_s"], result[name]["reduce_s"] = out[name]
    return result


def project(nbytes: int, ranks: int, bus_gbs: float, latency_us: float) -> float:
    """Seconds of one ring all-reduce of ``nbytes`` over ``ranks`` at ``bus_gbs`` bus bandwidth."""
    return 2 * (ranks - 1) / ranks * nbytes / (bus_gbs * 1e9) + 2 * (ranks - 1) * latency_us * 1e-6


def render(result: dict, nvlink_gbs: float, ib_gbs: float, latency_us: float) -> str:
    lines = ["| update | grad bytes | 1 process (whole batch) | 2 ranks (half batch) | all-reduce | "
             "share | 8 GPUs, 1 node | 4 nodes x 8 |", "|---|---|---|---|---|---|---|---|"]
    for name, r in result.items():
        node = project(r["bytes"], 8, nvlink_gbs, latency_us)
        nodes = project(r["bytes"], 32, ib_gbs, latency_us)
        lines.append(f"| {name} | {r['bytes'] / 1e6:.2f} MB | {r['one_s'] * 1e3:.2f} ms "
                     f"| {r['two_s'] * 1e3:.2f} ms | {r['reduce_s'] * 1e3:.2f} ms "
                     f"| {r['reduce_s'] / r['two_s']:.0%} | {node * 1e6:.0f} us | {nodes * 1e6:.0f} us |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlrun.benchmarks ddp")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--nvlink-gbs", type=float, default=200.0, help="bus bandwidth in a node (GB/s)")
    p.add_argument("--ib-gbs", type=float, default=40.0, help="bus bandwidth across nodes (GB/s)")
    p.add_argument("--latency-us", type=float, default=5.0, help="per ring step (us)")
    args = p.parse_args(argv)
    result = run(args.reps)
    print(render(result, args.nvlink_gbs, args.ib_gbs, args.latency_us))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def ranks_check(device: str, work: str, ranks: int = 2) -> list[str]:
    """The device check's data-parallel case: PPO CartPole on ``ranks`` ranks under torchrun (gloo
    on CPU, NCCL on CUDA); problems found (none: both ranks end with the same weights)."""
    import subprocess
    from pathlib import Path

    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--standalone", "--nproc-per-node", str(ranks), "-m", "rlrun", "algo=ppo",
           "env=cartpole", "total_frames=4096", "logger=none", "progress=false", f"device={device}",
           "eval.episodes=1"]
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("rlrun: error:")]
        said = (lines or done.stderr.splitlines()[-1:] or ["no output"])[0]
        return [f"{ranks} ranks on {device}: exit {done.returncode}: {said}"]
    (run_dir,) = Path(work).glob("runs/*/*")
    # the checkpoint holds the weights once (rank 0's part): each rank's policy.pt holds its own
    parts = [torch.load(d / "policy.pt", weights_only=True, map_location="cpu")
             for d in [run_dir, *(run_dir / "ranks" / str(r) for r in range(1, ranks))]]
    return [f"rank {r}'s weights differ from rank 0's" for r, part in enumerate(parts[1:], 1)
            if any(not torch.equal(v, part["policy"][k]) for k, v in parts[0]["policy"].items())]
