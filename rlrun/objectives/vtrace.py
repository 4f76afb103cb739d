"""V-trace off-policy value targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA).

With ``rho_t = min(rho_bar, pi/mu)`` and ``c_t = lmbda * min(c_bar, pi/mu)``::

    delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
    v_t     = V(x_t) + delta_t + gamma c_t (v_{t+1} - V(x_{t+1}))
    adv_t   = rho_t (r_t + gamma v_{t+1} - V(x_t))

Episode ends follow :func:`rlrun.objectives.gae.gae`: ``terminated`` removes the
bootstrap term, ``done`` (terminated or truncated) cuts the recursion, and a
truncated step bootstraps from ``next_value``, the value of the true final
observation (whose V-trace target is its value: no data follows it). The last
step of a rollout likewise takes ``v_{T} = next_value``.

The TD errors and traces are whole-tensor torch ops; the recursion
``A_t = delta_t + gamma c_t A_{t+1}`` runs in a numba kernel on CPU, or a torch
loop over time elsewhere. On IMPALA's shapes (32 rollouts x 80 steps, 1 thread) a
whole call measured 0.12-0.22 ms with the kernel against 1.1-1.5 ms with the torch
loop; on 1000 x 1000 steps 60 ms against 86 ms (float64 whole-tensor ops dominate).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from rlrun.objectives._kernels import numba_kernel


def _numba_kernel() -> Callable | None:
    return numba_kernel("_vtrace_kernel", "reverse_recurrence")


def _recurrence_numba(kernel: Callable, delta: Tensor, coef: Tensor) -> Tensor:
    steps = delta.shape[-1]
    out = np.empty(delta.shape, np.float64)
    kernel(delta.contiguous().numpy().reshape(-1, steps), coef.contiguous().numpy().reshape(-1, steps),
           out.reshape(-1, steps))
    return torch.from_numpy(out)


def _recurrence_torch(delta: Tensor, coef: Tensor) -> Tensor:
    # time-major rows: each step is one fused op on a contiguous [batch] vector
    delta_t = delta.reshape(-1, delta.shape[-1]).T.contiguous()
    coef_t = coef.reshape(-1, coef.shape[-1]).T.contiguous()
    out = torch.empty_like(delta_t)
    out[-1] = delta_t[-1]
    for t in range(delta_t.shape[0] - 2, -1, -1):
        torch.addcmul(delta_t[t], coef_t[t], out[t + 1], out=out[t])
    return out.T.reshape(delta.shape)


@torch.no_grad()
def vtrace(log_rho: Tensor, reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor,
           done: Tensor, gamma: float, rho_bar: float = 1.0, c_bar: float = 1.0, lmbda: float = 1.0,
           backend: str = "auto") -> tuple[Tensor, Tensor]:
    """V-trace targets and policy-gradient advantages for ``[*batch, T]`` tensors (time last).

    Args:
        log_rho: ``log pi(a_t|x_t) - log mu(a_t|x_t)``, target minus behaviour log-probability.
        reward: Rewards r_t.
        value: V(x_t) under the current critic.
        next_value: V(x_{t+1}), on the true next observation.
        terminated: True where x_{t+1} is terminal (no bootstrap).
        done: True where the episode ended at t (terminated or truncated).
        gamma: Discount.
        rho_bar: Clip of the importance weight in the TD errors and the advantages.
        c_bar: Clip of the trace coefficients.
        lmbda: Extra trace discount (1 in the paper).
        backend: ``"auto"`` (numba on CPU when installed, else torch), ``"numba"`` or ``"torch"``.

    Returns:
        ``(vs, pg_advantage)``: the critic's targets v_t and ``rho_t (r_t + gamma v_{t+1} - V(x_t))``,
        in ``value``'s dtype.

    Examples:
        >>> z = torch.zeros(1, 3); f = z.bool()
        >>> vs, adv = vtrace(z, torch.ones(1, 3), z, z, f, f, gamma=1.0)
        >>> vs
        tensor([[3., 2., 1.]])
    """
    if backend not in ("auto", "numba", "torch"):
        raise ValueError(f"vtrace backend must be auto, numba or torch, not {backend!r}")
    dtype = value.dtype
    # float64 throughout: the recursion is cheap next to the networks, and exact targets make
    # the float32 outputs independent of trajectory length
    rho = log_rho.double().exp()
    r, v, nv = reward.double(), value.double(), next_value.double()
    bootstrap = nv * (~terminated).double()
    rho_c = rho.clamp(max=rho_bar)
    delta = rho_c * (r + gamma * bootstrap - v)
    coef = (gamma * lmbda) * rho.clamp(max=c_bar) * (~done).double()
    on_cpu = all(x.device.type == "cpu" for x in (log_rho, reward, value, next_value))
    kernel = _numba_kernel() if backend != "torch" and on_cpu else None
    if backend == "numba" and kernel is None:
        raise RuntimeError("vtrace backend 'numba' needs numba installed and CPU tensors")
    diff = _recurrence_numba(kernel, delta, coef) if kernel is not None else _recurrence_torch(delta, coef)
    vs = v + diff
    # v_{t+1}: the next step's target inside an episode; V(final obs) at an episode end or rollout end
    vs_next = torch.where(done, nv, torch.cat([vs[..., 1:], nv[..., -1:]], -1))
    pg_adv = rho_c * (r + gamma * vs_next * (~terminated).double() - v)
    return vs.to(dtype), pg_adv.to(dtype)
