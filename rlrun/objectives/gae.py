"""Generalised advantage estimation (Schulman et al. 2016), vectorised over envs.

Termination and truncation differ: the TD error bootstraps from V(s') unless
the episode *terminated*; the advantage recursion stops at any episode end
(terminated or truncated), since the next row belongs to a new episode. With
the true final observation in ``("next", "observation")`` a truncated episode
therefore bootstraps from the value of its real last state.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def gae(reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor, done: Tensor,
        gamma: float, lmbda: float) -> tuple[Tensor, Tensor]:
    """Advantages and value targets for ``[*batch, T]`` tensors (time last).

    Args:
        reward: Rewards r_t.
        value: V(s_t).
        next_value: V(s_{t+1}), computed on the true next observation.
        terminated: True where s_{t+1} is terminal (no bootstrap).
        done: True where the episode ended at t (terminated or truncated).
        gamma: Discount.
        lmbda: GAE lambda.

    Returns:
        ``(advantage, value_target)`` with ``value_target = advantage + value``.

    Examples:
        >>> r = torch.ones(1, 3); v = torch.zeros(1, 3); f = torch.zeros(1, 3, dtype=torch.bool)
        >>> adv, ret = gae(r, v, v, f, f, gamma=1.0, lmbda=1.0)
        >>> adv
        tensor([[3., 2., 1.]])
    """
    not_terminated = (~terminated).to(value.dtype)
    delta = reward + gamma * next_value * not_terminated - value
    coef = (gamma * lmbda) * (~done).to(value.dtype)
    # Time-major contiguous rows make each step of the recursion one fused op on
    # a contiguous [batch] vector; this keeps the Python loop at T iterations of
    # a single addcmul, with no per-env loop.
    delta_t = delta.reshape(-1, delta.shape[-1]).T.contiguous()
    coef_t = coef.reshape(-1, coef.shape[-1]).T.contiguous()
    adv_t = torch.empty_like(delta_t)
    adv_t[-1] = delta_t[-1]
    for t in range(delta_t.shape[0] - 2, -1, -1):
        torch.addcmul(delta_t[t], coef_t[t], adv_t[t + 1], out=adv_t[t])
    advantage = adv_t.T.reshape(delta.shape)
    return advantage, advantage + value
