"""MARL building blocks: per-agent MLP layouts, and GAE with the agent dim after time.

**group_mlp**: forward + backward of unshared per-agent MLPs (3 agents, obs 18,
256x256 tanh, one output), ratio reference/rlrun (above 1, rlrun is faster):
rlrun's ``GroupMLP`` (stacked weights, one ``baddbmm`` per layer) against a
Python loop over 3 ``nn.Sequential`` MLPs, and ``torch.func`` (``vmap`` over
stacked module states). Batch 600 (collection at 600 envs) and 4096 (a minibatch).

**gae_layout**: ``gae`` on ``[envs, T, agents]`` data with a shared done (its
kernel reads that layout in place, with the group loop order) against ``gae``
(a) on the same data already stored agent-major ``[envs, agents, T]`` (no copy:
*agent_major*) and (b) on views with the agent dim moved before time and the
done broadcast, which ``gae`` copies to contiguous time-last rows
(*moved_copy*, what the group layout cost before the kernel read it in place).
Ratio reference/rlrun.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from rlrun.benchmarks.common import interleave, median, ratio, table
from rlrun.modules.multiagent import GroupMLP
from rlrun.modules.networks import mlp
from rlrun.objectives.gae import gae, warm_up

N_AGENTS, OBS, HIDDEN = 3, 18, [256, 256]


def group_mlp_forwards(batch: int) -> dict:
    """The three implementations' forward passes, all with rlrun's weights (same outputs)."""
    from torch.func import functional_call, stack_module_state

    x = torch.randn(batch, N_AGENTS, OBS)
    group = GroupMLP(N_AGENTS, OBS, 1, HIDDEN, share_params=False)
    nets = nn.ModuleList(mlp(OBS, HIDDEN, 1) for _ in range(N_AGENTS))
    with torch.no_grad():
        for i, net in enumerate(nets):
            linears = [m for m in net if isinstance(m, nn.Linear)]
            for lin, w, b in zip(linears, group.weights, group.biases):
                lin.weight.copy_(w[i].T)
                lin.bias.copy_(b[i, 0])
    params, buffers = stack_module_state(list(nets))
    params = {k: v.detach().requires_grad_() for k, v in params.items()}
    base = copy.deepcopy(nets[0]).to("meta")
    vmapped = torch.vmap(lambda p, b, xx: functional_call(base, (p, b), (xx,)), in_dims=(0, 0, 1),
                         out_dims=1)

    return {"rlrun": lambda: group(x),
            "loop": lambda: torch.stack([nets[i](x[:, i]) for i in range(N_AGENTS)], 1),
            "torch.func": lambda: vmapped(params, buffers, x)}


def _fwd_bwd(fn):
    return lambda: fn().sum().backward()


def gae_cases(envs: int, steps: int) -> dict:
    g = torch.Generator().manual_seed(0)
    reward, value, next_value = (torch.randn(envs, steps, N_AGENTS, generator=g) for _ in range(3))
    done = torch.rand(envs, steps, generator=g) < 0.01
    terminated = done & (torch.rand(envs, steps, generator=g) < 0.5)
    agent_major = [x.transpose(1, 2).contiguous() for x in (reward, value, next_value)]
    flags = [x[:, None, :].expand(envs, N_AGENTS, steps).contiguous() for x in (terminated, done)]
    moved = [x.movedim(-1, -2) for x in (reward, value, next_value)]
    moved_flags = [x[:, None, :].expand(envs, N_AGENTS, steps) for x in (terminated, done)]
    return {"rlrun": lambda: gae(reward, value, next_value, terminated, done, 0.9, 0.9),
            "agent_major": lambda: gae(*agent_major, *flags, 0.9, 0.9),
            "moved_copy": lambda: gae(*moved, *moved_flags, 0.9, 0.9)}


def run(quick: bool = False, reps: int | None = None) -> dict:
    reps = reps or (3 if quick else 15)
    rows = []
    for batch in ([600] if quick else [600, 4096]):
        times = interleave({k: _fwd_bwd(f) for k, f in group_mlp_forwards(batch).items()}, reps)
        for ref in ("loop", "torch.func"):
            r = ratio(times[ref], times["rlrun"])
            rows.append({"part": "group_mlp", "size": f"batch {batch}", "reference": ref,
                         "rlrun_ms": 1e3 * median(times["rlrun"]), "ref_ms": 1e3 * median(times[ref]),
                         "ratio": r["median"], "min": r["min"], "max": r["max"]})
    warm_up()  # the kernel's load is not part of the figures
    for envs, steps in ([(600, 100)] if quick else [(600, 100), (1000, 1000)]):
        times = interleave(gae_cases(envs, steps), reps)
        for ref in ("agent_major", "moved_copy"):
            r = ratio(times[ref], times["rlrun"])
            rows.append({"part": "gae_layout", "size": f"{envs} x {steps} x {N_AGENTS}",
                         "reference": ref, "rlrun_ms": 1e3 * median(times["rlrun"]),
                         "ref_ms": 1e3 * median(times[ref]), "ratio": r["median"],
                         "min": r["min"], "max": r["max"]})
    return {"rows": rows, "reps": reps}


def render(result: dict) -> str:
    cols = [("part", "part", "s"), ("size", "size", "s"), ("reference", "reference", "s"),
            ("rlrun_ms", "rlrun ms", ".2f"), ("ref_ms", "reference ms", ".2f"),
            ("ratio", "ref time / rlrun time", ".2f"), ("min", "min", ".2f"), ("max", "max", ".2f")]
    return table(result["rows"], cols)
