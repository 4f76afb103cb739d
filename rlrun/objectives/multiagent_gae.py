"""GAE for agent groups: per-agent rewards and values, an episode end shared by the group.

Group data is laid out ``[*env, time, n_agents]`` (the agent dim after time).
On CPU with numba, and with ``terminated``/``done`` shared by the group
(``[*env, time]``), a kernel of its own (``_multiagent_gae_kernel.py``) reads
that layout in place: no copy. The alternative, moving the agent dim in front
of time and running ``gae`` (whose kernel needs contiguous time-last rows, so
five inputs are copied), measured 1.7-4.9x slower on 1000 envs x 1000 steps x 3
agents; data stored agent-major would skip the copies but not the layout
contract (``python -m rlrun.benchmarks marl_parts`` compares all three).
Per-agent flags, other devices and ``backend="torch"`` take the copying path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from rlrun.objectives._kernels import numba_kernel
from rlrun.objectives.gae import gae


def _numba_kernel() -> Callable | None:
    return numba_kernel("_multiagent_gae_kernel", "multiagent_gae_kernel")


def _rows(x: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    x = x.detach()
    return (x if x.is_contiguous() else x.contiguous()).numpy().reshape(shape)


@torch.no_grad()
def multiagent_gae(reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor, done: Tensor,
                   gamma: float, lmbda: float, backend: str = "auto") -> tuple[Tensor, Tensor]:
    """Advantages and value targets per agent.

    Args:
        reward: ``[*env, T, n_agents]`` per-agent rewards.
        value: ``[*env, T, n_agents]`` V_i(s_t) (centralised or not).
        next_value: ``[*env, T, n_agents]`` V_i(s_{t+1}) on the true next observations.
        terminated: ``[*env, T]`` (shared) or ``[*env, T, n_agents]``; no bootstrap where true.
        done: ``[*env, T]`` or ``[*env, T, n_agents]``; episode ends (terminated or truncated).
        gamma: Discount.
        lmbda: GAE lambda.
        backend: ``"auto"`` (the in-place kernel where it applies, else ``gae`` on
            time-last copies), ``"numba"`` (the in-place kernel; shared flags, CPU) or
            ``"torch"`` (``gae``'s torch loop on copies).

    Returns:
        ``(advantage, value_target)``, each ``[*env, T, n_agents]``.
    """
    if backend not in ("auto", "numba", "torch"):
        raise ValueError(f"multiagent_gae backend must be auto, numba or torch, not {backend!r}")
    shape = value.shape
    shared = terminated.dim() == done.dim() == len(shape) - 1
    on_cpu = all(x.device.type == "cpu" for x in (reward, value, next_value, terminated, done))
    kernel = _numba_kernel() if backend != "torch" and on_cpu and shared else None
    if backend == "numba" and kernel is None:
        raise RuntimeError("multiagent_gae backend 'numba' needs numba, CPU tensors and shared flags")
    if kernel is not None and value.dtype in (torch.float32, torch.float64):
        steps, agents = shape[-2], shape[-1]
        advantage = np.empty(shape, np.float32 if value.dtype == torch.float32 else np.float64)
        target = np.empty_like(advantage)
        kernel(*(_rows(x, (-1, steps, agents)) for x in (reward, value, next_value)),
               *(_rows(x, (-1, steps)) for x in (terminated, done)), float(gamma), float(lmbda),
               advantage.reshape(-1, steps, agents), target.reshape(-1, steps, agents))
        return torch.from_numpy(advantage), torch.from_numpy(target)

    def time_last(x: Tensor) -> Tensor:
        if x.dim() == len(shape) - 1:
            x = x.unsqueeze(-1)
        return x.expand(shape).movedim(-1, -2)  # [*env, n_agents, T], views (copied by gae's kernel)

    adv, target = gae(*(time_last(x) for x in (reward, value, next_value, terminated, done)), gamma, lmbda,
                      backend="torch" if backend == "torch" else "auto")
    return adv.movedim(-1, -2), target.movedim(-1, -2)
