"""Generalised advantage estimation (Schulman et al. 2016), vectorised over envs and agents.

Termination and truncation differ: the TD error bootstraps from V(s') unless
the episode *terminated*; the advantage recursion stops at any episode end
(terminated or truncated), since the next row belongs to a new episode. With
the true final observation in ``("next", "observation")`` a truncated episode
therefore bootstraps from the value of its real last state.

Two layouts: time last (``[*env, T]``), or agent groups with the agent dim
after time (``[*env, T, n_agents]``, ``agents=True``), whose ``terminated`` and
``done`` are per agent or shared by the group (``[*env, T]``). Both are read
in place, without copies to other layouts.

On CPU the recursion runs in a numba kernel (``_gae_kernel.py``). No torch op
computes a masked linear recurrence, and a Python loop over time costs one op
dispatch per step: on the paper's Table 4 workload (1000 x 1000 steps) the
kernel measured 4.8-6.7x faster than a numpy reverse loop (median 5.9 over 15
runs) and 1.3-2.9x faster than a plain numba loop (``python -m rlrun.benchmarks
gae``). It accumulates in float64, so float32 inputs give advantages within
~1e-6 of a float64 reference. Loading numba costs a process ~1 s, so batches of
at most ``SMALL`` elements first take a numpy path with the kernel's exact
rounding (``_gae_exact.py``), until that path has spent ``NUMPY_BUDGET_S`` in
the process; the kernel is loaded only for larger batches or after that, and
the results are the same bit for bit either way (on CPUs where the kernel uses
FMA, which that path emulates; elsewhere batches of every size take the kernel). Other devices, or a machine
without numba, use a torch loop over time.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from rlrun.objectives._gae_exact import gae_exact, kernel_fuses
from rlrun.objectives._kernels import numba_kernel

# Largest batch (elements, all agents) that takes the exact numpy path while numba is not loaded
# yet. Per call that path took 0.7 ms at 8 x 128 (PPO on CartPole), 15 ms at 8 x 100 x 3 (MAPPO)
# and 10-14 ms at 4096 elements, against 0.05-0.3 ms for the kernel and ~1 s (5 s at load 16)
# for numba's import and kernel load (``python -m rlrun.benchmarks gae``, 2-core machine at
# load 14-16): at this size a run needs ~70 calls before loading numba would have paid.
SMALL = 4096
# Time the numpy path may spend in a process before the kernel is loaded anyway: a long run of
# small batches then pays numba's load once instead of the numpy path at every batch.
NUMPY_BUDGET_S = 0.5
_numpy_spent_s = 0.0

BACKENDS = ("auto", "numba", "numpy", "torch")


def _numba_kernel() -> Callable | None:
    return numba_kernel("_gae_kernel", "gae_kernel")


def _kernel_loaded() -> bool:
    return "rlrun.objectives._gae_kernel" in sys.modules


def load_if_it_pays(seconds_per_call: float, calls: int) -> bool:
    """Loads the kernel now when ``calls`` more calls at ``seconds_per_call`` on the numpy path
    would spend more than that path's budget (``NUMPY_BUDGET_S``, after which ``gae`` loads the
    kernel anyway): a run that knows its length then pays numba's load once, at its start,
    instead of the numpy path's budget and then the load. Returns whether the kernel is loaded."""
    if _kernel_loaded():
        return True
    if seconds_per_call * calls <= NUMPY_BUDGET_S - _numpy_spent_s:
        return False
    warm_up()
    return _kernel_loaded()


def warm_up() -> None:
    """Loads (or compiles) the kernel now, so the first training batch does not pay for it."""
    if _numba_kernel() is not None:
        x = torch.zeros(1, 2)
        gae(x, x, x, x.bool(), x.bool(), 0.9, 0.9, backend="numba")


def _rows(x: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` as a numpy view of ``shape`` (a copy only when ``x`` is not contiguous)."""
    x = x.detach()
    return (x if x.is_contiguous() else x.contiguous()).numpy().reshape(shape)


def _gae_torch(reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor, done: Tensor,
               gamma: float, lmbda: float) -> tuple[Tensor, Tensor]:
    """The time-last recursion as a torch loop over time (any device)."""
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


def _choose(backend: str, tensors: tuple[Tensor, ...], value: Tensor) -> str:
    on_cpu = all(x.device.type == "cpu" for x in tensors)
    floating = value.dtype in (torch.float32, torch.float64)
    if backend == "numba" and not (on_cpu and floating and _numba_kernel() is not None):
        raise RuntimeError("gae backend 'numba' needs numba installed and float CPU tensors")
    if backend == "numpy" and not (on_cpu and floating):
        raise RuntimeError("gae backend 'numpy' needs float CPU tensors")
    if backend != "auto":
        return backend
    if not (on_cpu and floating):
        return "torch"
    # the path may change within a run (the budget is wall time): it never changes the numbers
    if (not _kernel_loaded() and value.numel() <= SMALL and _numpy_spent_s < NUMPY_BUDGET_S
            and kernel_fuses()):
        return "numpy"
    return "numba" if _numba_kernel() is not None else "torch"


@torch.no_grad()
def gae(reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor, done: Tensor,
        gamma: float, lmbda: float, backend: str = "auto",
        agents: bool | None = None) -> tuple[Tensor, Tensor]:
    """Advantages and value targets for ``[*env, T]`` or ``[*env, T, n_agents]`` tensors.

    Args:
        reward: Rewards r_t.
        value: V(s_t).
        next_value: V(s_{t+1}), computed on the true next observation.
        terminated: True where s_{t+1} is terminal (no bootstrap); the shape of ``value``, or
            ``[*env, T]`` for a group whose episode ends together.
        done: True where the episode ended at t (terminated or truncated); shaped as ``terminated``.
        gamma: Discount.
        lmbda: GAE lambda.
        backend: ``"auto"`` (see the module doc), ``"numba"`` (the kernel), ``"numpy"`` (the
            kernel's arithmetic in numpy) or ``"torch"`` (a loop over time, any device).
        agents: Whether the last dim indexes agents (time second to last). ``None``: only when
            ``terminated`` has one dim fewer than ``value`` (flags shared by the group).

    Returns:
        ``(advantage, value_target)``, shaped as ``value``, with ``value_target = advantage + value``.

    Examples:
        >>> r = torch.ones(1, 3); v = torch.zeros(1, 3); f = torch.zeros(1, 3, dtype=torch.bool)
        >>> adv, ret = gae(r, v, v, f, f, gamma=1.0, lmbda=1.0)
        >>> adv
        tensor([[3., 2., 1.]])
    """
    global _numpy_spent_s
    if backend not in BACKENDS:
        raise ValueError(f"gae backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    shape = value.shape
    if agents is None:
        agents = terminated.dim() == value.dim() - 1
    if agents and terminated.dim() != done.dim():  # one flag per agent, the other shared: per agent
        terminated, done = (x if x.dim() == len(shape) else x.unsqueeze(-1).expand(shape)
                            for x in (terminated, done))
    choice = _choose(backend, (reward, value, next_value, terminated, done), value)
    if choice == "torch":
        if not agents:
            return _gae_torch(reward, value, next_value, terminated, done, gamma, lmbda)

        def time_last(x: Tensor) -> Tensor:  # [*env, n_agents, T] views
            return (x if x.dim() == len(shape) else x.unsqueeze(-1)).expand(shape).movedim(-1, -2)

        adv, target = _gae_torch(*(time_last(x) for x in (reward, value, next_value, terminated, done)),
                                 gamma, lmbda)
        return adv.movedim(-1, -2), target.movedim(-1, -2)
    steps, width = (shape[-2], shape[-1]) if agents else (shape[-1], 1)
    flag_width = width if terminated.dim() == len(shape) else 1
    data = [_rows(x, (-1, steps, width)) for x in (reward, value, next_value)]
    flags = [_rows(x, (-1, steps, flag_width)) for x in (terminated, done)]
    if choice == "numpy":
        start = time.perf_counter()
        advantage, target = gae_exact(*data, *flags, gamma, lmbda, blocked=not agents)
        _numpy_spent_s += time.perf_counter() - start
        return torch.from_numpy(advantage.reshape(shape)), torch.from_numpy(target.reshape(shape))
    # numpy allocates the outputs: it asks for huge pages for arrays this large, and reshaping
    # numpy views is cheaper than torch ops; together this measured 0.17 ms of overhead per call
    # against 0.5 ms with torch.empty and torch reshapes (1000 x 1000, after other work).
    advantage = np.empty(shape, np.float32 if value.dtype == torch.float32 else np.float64)
    target = np.empty_like(advantage)
    _numba_kernel()(*data, *flags, float(gamma), float(lmbda), not agents,
                    advantage.reshape(-1, steps, width), target.reshape(-1, steps, width))
    return torch.from_numpy(advantage), torch.from_numpy(target)
