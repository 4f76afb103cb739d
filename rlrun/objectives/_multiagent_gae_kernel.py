"""A numba GAE kernel for group data ``[B, T, n_agents]`` with episode ends shared by the group.

It reads the agent dim where it lies (innermost, after time), so
``multiagent_gae`` needs no copy to time-last rows. Per env the recursion walks
time backwards and advances every agent's chain at each step: the agents'
chains are independent, so their multiply-adds overlap (the interleaving that
``_gae_kernel`` gets from blocks of four steps comes here from the agents).
Serial and cached for the reasons ``_gae_kernel`` gives; accumulates in float64.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def multiagent_gae_kernel(reward, value, next_value, terminated, done, gamma, lmbda, advantage, target):
    """Advantages and targets of ``[B, T, N]`` arrays; ``terminated``/``done`` are ``[B, T]``."""
    n, steps, agents = reward.shape
    gl = gamma * lmbda
    a = np.empty(agents, np.float64)
    for b in range(n):
        a[:] = 0.0
        for t in range(steps - 1, -1, -1):
            bootstrap = gamma * (1.0 - terminated[b, t])
            coef = gl * (1.0 - done[b, t])
            for i in range(agents):
                v = np.float64(value[b, t, i])
                delta = np.float64(reward[b, t, i]) + bootstrap * np.float64(next_value[b, t, i]) - v
                a[i] = delta + coef * a[i]
                advantage[b, t, i] = a[i]
                target[b, t, i] = a[i] + v
