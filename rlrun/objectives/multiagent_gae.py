"""GAE for agent groups: per-agent rewards and values, an episode end shared by the group.

Group data is laid out ``[*env, time, n_agents]`` (the agent dim after time) while
``gae``'s kernel runs along the last dim. ``gae`` already accepts any leading
dims, so the agent dim is moved in front of time (a view) and the shared
``terminated``/``done`` flags are broadcast over agents (a stride-0 view). The
kernel needs contiguous rows, so these views are copied once per call (five
inputs in, two outputs moved back as views); ``python -m rlrun.benchmarks
marl_parts`` measures that against data stored agent-major ``[*env, n_agents, T]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlrun.objectives.gae import gae


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
        backend: As for ``rlrun.objectives.gae.gae``.

    Returns:
        ``(advantage, value_target)``, each ``[*env, T, n_agents]``.
    """
    shape = value.shape

    def time_last(x: Tensor) -> Tensor:
        if x.dim() == len(shape) - 1:
            x = x.unsqueeze(-1)
        return x.expand(shape).movedim(-1, -2)  # [*env, n_agents, T], views only

    adv, target = gae(*(time_last(x) for x in (reward, value, next_value, terminated, done)), gamma, lmbda,
                      backend=backend)
    return adv.movedim(-1, -2), target.movedim(-1, -2)
