"""Generalised advantage estimation (Schulman et al. 2016), vectorised over envs.

Termination and truncation differ: the TD error bootstraps from V(s') unless
the episode *terminated*; the advantage recursion stops at any episode end
(terminated or truncated), since the next row belongs to a new episode. With
the true final observation in ``("next", "observation")`` a truncated episode
therefore bootstraps from the value of its real last state.

On CPU the recursion runs in a numba kernel (``_gae_kernel.py``). No torch op
computes a masked linear recurrence, and a Python loop over time costs one op
dispatch per step: on the paper's Table 4 workload (1000 x 1000 steps) the
kernel measured 4.8-6.7x faster than a numpy reverse loop (median 5.9 over 15
runs) and 1.3-2.9x faster than a plain numba loop (``python -m rlrun.benchmarks
gae``). It accumulates in float64, so float32 inputs give advantages within
~1e-6 of a float64 reference. Other devices, or a machine without numba, use
a torch loop over time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from rlrun.objectives._kernels import numba_kernel


def _numba_kernel() -> Callable | None:
    return numba_kernel("_gae_kernel", "gae_kernel")


def warm_up() -> None:
    """Loads (or compiles) the kernel now, so the first training batch does not pay for it."""
    if _numba_kernel() is not None:
        x = torch.zeros(1, 2)
        gae(x, x, x, x.bool(), x.bool(), 0.9, 0.9)


def _rows(x: Tensor, steps: int) -> np.ndarray:
    """``x`` as a ``[-1, steps]`` numpy view (a copy only when ``x`` is not contiguous)."""
    x = x.detach()
    return (x if x.is_contiguous() else x.contiguous()).numpy().reshape(-1, steps)


def _gae_numba(kernel: Callable, reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor,
               done: Tensor, gamma: float, lmbda: float) -> tuple[Tensor, Tensor]:
    steps = reward.shape[-1]
    # numpy allocates the outputs: it asks for huge pages for arrays this large, and reshaping
    # numpy views is cheaper than torch ops; together this measured 0.17 ms of overhead per call
    # against 0.5 ms with torch.empty and torch reshapes (1000 x 1000, after other work).
    advantage = np.empty(value.shape, np.float32 if value.dtype == torch.float32 else np.float64)
    target = np.empty_like(advantage)
    kernel(*(_rows(x, steps) for x in (reward, value, next_value, terminated, done)), float(gamma),
           float(lmbda), advantage.reshape(-1, steps), target.reshape(-1, steps))
    return torch.from_numpy(advantage), torch.from_numpy(target)


def _gae_torch(reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor, done: Tensor,
               gamma: float, lmbda: float) -> tuple[Tensor, Tensor]:
    not_terminated = (~terminated).to(value.dtype)
    delta = reward + gamma * next_value * not_terminated - value
    coef = (gamma * lmbda) * (~done).to(value.dtype)
    # Time-major contiguous rows make each step one fused op on a contiguous [batch] vector.
    delta_t = delta.reshape(-1, delta.shape[-1]).T.contiguous()
    coef_t = coef.reshape(-1, coef.shape[-1]).T.contiguous()
    adv_t = torch.empty_like(delta_t)
    adv_t[-1] = delta_t[-1]
    for t in range(delta_t.shape[0] - 2, -1, -1):
        torch.addcmul(delta_t[t], coef_t[t], adv_t[t + 1], out=adv_t[t])
    advantage = adv_t.T.reshape(delta.shape)
    return advantage, advantage + value


@torch.no_grad()
def gae(reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor, done: Tensor,
        gamma: float, lmbda: float, backend: str = "auto") -> tuple[Tensor, Tensor]:
    """Advantages and value targets for ``[*batch, T]`` tensors (time last).

    Args:
        reward: Rewards r_t.
        value: V(s_t).
        next_value: V(s_{t+1}), computed on the true next observation.
        terminated: True where s_{t+1} is terminal (no bootstrap).
        done: True where the episode ended at t (terminated or truncated).
        gamma: Discount.
        lmbda: GAE lambda.
        backend: ``"auto"`` (numba kernel for CPU tensors when numba is installed, else torch),
            ``"numba"`` or ``"torch"``.

    Returns:
        ``(advantage, value_target)`` with ``value_target = advantage + value``.

    Examples:
        >>> r = torch.ones(1, 3); v = torch.zeros(1, 3); f = torch.zeros(1, 3, dtype=torch.bool)
        >>> adv, ret = gae(r, v, v, f, f, gamma=1.0, lmbda=1.0)
        >>> adv
        tensor([[3., 2., 1.]])
    """
    if backend not in ("auto", "numba", "torch"):
        raise ValueError(f"gae backend must be auto, numba or torch, not {backend!r}")
    on_cpu = all(x.device.type == "cpu" for x in (reward, value, next_value, terminated, done))
    kernel = _numba_kernel() if backend != "torch" and on_cpu else None
    if backend == "numba" and kernel is None:
        raise RuntimeError("gae backend 'numba' needs numba installed and CPU tensors")
    if kernel is not None and value.dtype in (torch.float32, torch.float64):
        return _gae_numba(kernel, reward, value, next_value, terminated, done, gamma, lmbda)
    return _gae_torch(reward, value, next_value, terminated, done, gamma, lmbda)
