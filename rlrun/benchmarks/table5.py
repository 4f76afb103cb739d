"""The paper's Table 5 at this machine's scale: collection frames/s with a random policy.

For each env and worker count W, every case steps W sub-envs in all, with the
same random policy (a torch module drawing uniform actions), and the cases are
interleaved within each repetition:

* ``gym_sync``: gymnasium ``SyncVectorEnv`` over W sub-envs (``GymVecEnv(...).env``: rlrun's
  wrappers, SAME_STEP autoreset), a bare loop. The reference: ratios are fps / its fps.
* ``gym_async``: gymnasium ``AsyncVectorEnv``, one process per sub-env, a bare loop.
* ``sync``: rlrun's ``SyncCollector`` over the ``SyncVectorEnv`` (one process).
* ``multi_sync`` / ``multi_async``: rlrun's multi-process collectors, W workers of one sub-env.

Each repetition collects the same frames per case; a collector's repetition
runs its iteration to the end, so no rollout is left in flight to steal time
from the next case. ``per_worker`` is fps / (W x the 1-worker ``sync`` fps):
the scaling that predicts the paper's 32 workers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from rlrun.benchmarks.common import interleave, median, ratio, table
from rlrun.collectors.multiprocess import MultiCollector
from rlrun.collectors.sync import SyncCollector
from rlrun.envs.gym import GymVecEnv

CASES = ("gym_sync", "gym_async", "sync", "multi_sync", "multi_async")


class RandomPolicy(nn.Module):
    """Uniform random actions in the policy's action bounds ([-1, 1] for Box, as rlrun rescales)."""

    def __init__(self, discrete: bool, action_dim: int):
        super().__init__()
        self.discrete, self.action_dim = discrete, action_dim

    def forward(self, obs: Tensor) -> dict[str, Tensor]:
        n = obs.shape[0]
        if self.discrete:
            return {"action": torch.randint(self.action_dim, (n,))}
        return {"action": torch.rand(n, self.action_dim) * 2 - 1}


def _env_fn(env_id: str, num_envs: int, vectorization: str = "sync") -> Callable[[], GymVecEnv]:
    if env_id.startswith("ALE/"):
        from rlrun.envs.atari import make_atari_env

        return lambda: make_atari_env(env_id, num_envs, vectorization, fire_reset=True)
    return lambda: GymVecEnv(env_id, num_envs, vectorization)


def _bare(venv: Any, policy: RandomPolicy, steps: int) -> Callable[[], None]:
    venv.reset(seed=0)

    obs = torch.zeros(venv.num_envs)  # the random policy reads only the batch size

    def run() -> None:
        with torch.inference_mode():
            for _ in range(steps):
                venv.step(policy(obs)["action"].numpy())
    return run


def _drain(coll: Any, frames: int) -> Callable[[], None]:
    def run() -> None:
        coll.total_frames = coll.frames + frames
        for _ in coll:
            pass
    return run


def bench_one(env_id: str, workers: int, frames: int, rollout: int, reps: int) -> dict:
    """Interleaves the five cases on ``workers`` sub-envs of ``env_id``."""
    envs = [_env_fn(env_id, workers)(), _env_fn(env_id, workers, "async")(), _env_fn(env_id, workers)()]
    spec = envs[0].spec
    policy = RandomPolicy(spec.discrete, spec.action_dim)
    colls: list[Any] = []
    start_s = {}
    try:
        colls.append(SyncCollector(envs[2], policy, workers * rollout, 0, seed=0))
        for mode in ("sync", "async"):
            t = time.perf_counter()
            per_batch = rollout * (workers if mode == "sync" else 1)
            colls.append(MultiCollector(_env_fn(env_id, 1), policy, per_batch, 0, workers=workers, mode=mode,
                                        method="forward"))
            start_s[mode] = time.perf_counter() - t
        steps = frames // workers
        times = interleave({"gym_sync": _bare(envs[0].env, policy, steps),
                            "gym_async": _bare(envs[1].env, policy, steps),
                            "sync": _drain(colls[0], frames), "multi_sync": _drain(colls[1], frames),
                            "multi_async": _drain(colls[2], frames)}, reps)
    finally:
        for c in colls[1:]:
            c.shutdown()
        for env in envs:
            env.close()
    row: dict[str, Any] = {"env": env_id, "workers": workers, "frames_per_rep": frames, "reps": reps,
                           "times_s": times, "startup_s_multi_sync": start_s.get("sync"),
                           "startup_s_multi_async": start_s.get("async")}
    for case in CASES:
        row[f"fps_{case}"] = frames / median(times[case])
        row[f"ratio_{case}"] = ratio(times["gym_sync"], times[case])["median"]
    return row


def run(quick: bool = False, reps: int | None = None, workers: tuple[int, ...] | None = None) -> dict:
    """Runs every (env, workers) pair; ``quick``: Pendulum only, 1 worker, fewer frames."""
    torch.set_num_threads(1)
    workers = workers or ((1,) if quick else (1, 2))
    reps = reps or (3 if quick else 5)
    configs = [("Pendulum-v1", 2000 if quick else 8000, 200)]
    notes = [f"{os.cpu_count()} cores (usable: {len(os.sched_getaffinity(0))}), shared with other jobs; "
             "load average at start " + f"{os.getloadavg()[0]:.1f}." if hasattr(os, "getloadavg") else ""]
    if not quick:
        configs.append(("HalfCheetah-v5", 4000, 200))
        try:
            import ale_py  # noqa: F401
            configs.append(("ALE/Breakout-v5", 800, 100))
        except ImportError as err:
            notes.append(f"Breakout skipped: {err}")
    rows = []
    for env_id, frames, rollout in configs:
        for w in workers:
            rows.append(bench_one(env_id, w, frames, rollout, reps))
            r = rows[-1]
            print(f"  table5 {env_id} x{w}: " + ", ".join(f"{c} {r[f'fps_{c}']:.0f}" for c in CASES),
                  flush=True)
    base = {r["env"]: r["fps_sync"] for r in rows if r["workers"] == 1}
    for r in rows:
        for case in ("multi_sync", "multi_async"):
            one = base.get(r["env"])
            r[f"per_worker_{case}"] = r[f"fps_{case}"] / (r["workers"] * one) if one else None
    return {"rows": rows, "notes": notes}


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("env", "env", "s"), ("workers", "W", "d")]
    cols += [(f"fps_{c}", f"{c} fps", ".0f") for c in CASES]
    cols += [(f"ratio_{c}", f"{c}/gym_sync", ".2f") for c in CASES[1:]]
    cols += [("per_worker_multi_sync", "multi_sync / (W x sync 1)", ".2f"),
             ("per_worker_multi_async", "multi_async / (W x sync 1)", ".2f"),
             ("startup_s_multi_sync", "multi_sync start s", ".1f")]
    return "\n".join([table(result["rows"], cols), *(f"\n{n}" for n in result["notes"])])
