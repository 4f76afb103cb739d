"""Table 3 at this machine's scale: frames/s of rlrun's VMAS env against the bare VMAS step loop.

The paper (Table 3) steps VMAS ``simple_spread`` with a random policy for 100
steps over growing numbers of vectorised envs (one A100). Here both sides run
on the CPU with 1 torch thread, ``max_steps=100`` (so the 100th step ends every
episode and both sides reset), 3 agents, continuous actions:

- *rlrun*: ``VmasEnv.step`` (actions stacked ``[envs, agents, 2]``; observations and
  rewards stacked along the agent dim; terminated/truncated apart; the true final
  observation kept and ended envs reset).
- *collector*: rlrun's ``SyncCollector`` (what a MARL run collects with, as ``collector=vmas``) over that env,
  one 100-step batch per repetition into its preallocated ``[envs, 100]`` TensorDict
  (per-agent data under ``agents``, the global state, episode statistics, trajectory ids),
  with a random policy.
- *bare*: ``vmas.make_env`` stepped with a list of per-agent action tensors, as VMAS's
  README does, then one ``env.reset()`` after the last step.

Both draw the same random actions from one ``torch.rand`` call per step. A frame is
one env step (all agents together), as the paper counts. Besides wall-clock time
(the suite's convention) each repetition records the process's CPU time, which
the other jobs of a shared machine disturb much less (``cpu ratio``).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable

import torch

from rlrun.benchmarks.common import median, ratio, table

SCENARIO, N_AGENTS, STEPS = "simple_spread", 3, 100
# The paper's Table 3 (one A100, TorchRL), for the rows printed beside ours.
PAPER = {1: 127, 3334: 263848, 6667: 398304, 10000: 529872}
# num_envs measured: 1 to 10000 (a 100-step repetition at 10000 envs takes seconds on one core;
# memory is not the limit on this machine, time is)
SIZES = (1, 10, 100, 1000, 3334, 10000)


def _bare(num_envs: int):
    import vmas

    env = vmas.make_env(SCENARIO, num_envs=num_envs, device="cpu", continuous_actions=True,
                        max_steps=STEPS, seed=0, n_agents=N_AGENTS)
    dim = env.get_agent_action_size(env.agents[0])

    def rollout() -> None:
        for _ in range(STEPS):
            action = torch.rand(num_envs, N_AGENTS, dim) * 2 - 1
            env.step(list(action.unbind(1)))
        env.reset()

    return rollout


def _rlrun(num_envs: int):
    from rlrun.envs.vmas import VmasEnv

    env = VmasEnv(SCENARIO, num_envs=num_envs, max_steps=STEPS, seed=0, n_agents=N_AGENTS)
    env.reset()
    dim = env.spec.action_dim

    def rollout() -> None:
        for _ in range(STEPS):
            out = env.step(torch.rand(num_envs, N_AGENTS, dim) * 2 - 1)
        assert bool(out.truncated.all())  # the 100th step ended (and reset) every episode

    return rollout


def _collector(num_envs: int):
    from rlrun.collectors.sync import SyncCollector
    from rlrun.envs.vmas import VmasEnv

    env = VmasEnv(SCENARIO, num_envs=num_envs, max_steps=STEPS, seed=0, n_agents=N_AGENTS)
    dim = env.spec.action_dim

    def policy(obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"action": torch.rand(num_envs, N_AGENTS, dim) * 2 - 1}

    frames = num_envs * STEPS
    coll = SyncCollector(env, policy, frames_per_batch=frames, total_frames=10**12)

    def rollout() -> None:
        batch = coll.collect()
        assert bool(batch["next", "truncated"][:, -1].all())  # the 100th step ended every episode

    return rollout


def _interleave_two_clocks(cases: dict[str, Callable[[], None]], reps: int) -> dict[str, dict]:
    """``common.interleave``'s alternating order, timing wall clock and process CPU time."""
    for fn in cases.values():
        fn()
    names = list(cases)
    out = {n: {"wall": [], "cpu": []} for n in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            cases[name]()
            out[name]["cpu"].append(time.process_time() - cpu)
            out[name]["wall"].append(time.perf_counter() - wall)
    return out


def run(quick: bool = False, reps: int | None = None) -> dict:
    if importlib.util.find_spec("vmas") is None:
        return {"skipped": "vmas is not installed (pip install 'rlrun[marl]')", "rows": []}
    reps = reps or (2 if quick else 5)
    sizes = [1, 10] if quick else list(SIZES)
    rows, raw = [], {}
    for n in sizes:
        times = _interleave_two_clocks({"rlrun": _rlrun(n), "collector": _collector(n), "bare": _bare(n)},
                                       reps)
        raw[n] = times
        frames = n * STEPS
        # time ratio bare/rlrun = frames/s ratio rlrun/bare
        r = ratio(times["bare"]["wall"], times["rlrun"]["wall"])
        c = ratio(times["bare"]["wall"], times["collector"]["wall"])
        rows.append({"envs": n, "rlrun_fps": frames / median(times["rlrun"]["wall"]),
                     "collector_fps": frames / median(times["collector"]["wall"]),
                     "bare_fps": frames / median(times["bare"]["wall"]), "ratio": r["median"],
                     "min": r["min"], "max": r["max"],
                     "cpu_ratio": ratio(times["bare"]["cpu"], times["rlrun"]["cpu"])["median"],
                     "collector_ratio": c["median"], "collector_min": c["min"],
                     "collector_cpu_ratio": ratio(times["bare"]["cpu"], times["collector"]["cpu"])["median"],
                     "paper_fps": PAPER.get(n)})
    growth = rows[-1]["rlrun_fps"] / rows[0]["rlrun_fps"]
    growth_collector = rows[-1]["collector_fps"] / rows[0]["collector_fps"]
    notes = [f"rlrun frames/s grow {growth:.0f}x (env) and {growth_collector:.0f}x (collector) from "
             f"{sizes[0]} to {sizes[-1]} envs.",
             f"{SCENARIO}, {N_AGENTS} agents, {STEPS} steps per repetition, {reps} interleaved "
             "repetitions; ours on this machine's CPU (1 torch thread), the paper's column on one A100 "
             "(TorchRL, only at the env counts it measured)."]
    return {"workload": {"scenario": SCENARIO, "agents": N_AGENTS, "steps": STEPS, "reps": reps},
            "rows": rows, "growth": growth, "growth_collector": growth_collector, "notes": notes,
            "times_s": raw}


def render(result: dict) -> str:
    if result.get("skipped"):
        return f"skipped: {result['skipped']}"
    cols = [("envs", "envs", "d"), ("bare_fps", "bare fps", ".0f"), ("rlrun_fps", "env fps", ".0f"),
            ("ratio", "env/bare", ".2f"), ("cpu_ratio", "cpu", ".2f"),
            ("collector_fps", "collector fps", ".0f"), ("collector_ratio", "collector/bare", ".2f"),
            ("collector_min", "min", ".2f"), ("collector_cpu_ratio", "cpu", ".2f"),
            ("paper_fps", "paper fps (A100)", "d")]
    return "\n".join([table(result["rows"], cols), *(f"\n{n}" for n in result["notes"])])
