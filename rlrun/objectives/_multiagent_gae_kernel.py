"""A numba GAE kernel for group data ``[B, T, n_agents]`` with episode ends shared by the group.

It reads the agent dim where it lies (innermost, after time), so
``multiagent_gae`` needs no copy to time-last rows. Per env it first turns the
shared flags into per-step bootstrap and trace coefficients, then runs each
agent's recursion backwards with the chain in a register; one env's rows
(``T x n_agents``) stay in cache across the agents. Measured against two other
loop orders (all agents advanced at each step with the chains in an array:
1.1-1.7x slower; TD errors precomputed in a separate pass: 1.3-1.7x slower).
Serial and cached for the reasons ``_gae_kernel`` gives; accumulates in float64.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def multiagent_gae_kernel(reward, value, next_value, terminated, done, gamma, lmbda, advantage, target):
    """Advantages and targets of ``[B, T, N]`` arrays; ``terminated``/``done`` are ``[B, T]``."""
    n, steps, agents = reward.shape
    gl = gamma * lmbda
    bootstrap = np.empty(steps, np.float64)
    coef = np.empty(steps, np.float64)
    for b in range(n):
        for t in range(steps):
            bootstrap[t] = gamma * (1.0 - terminated[b, t])
            coef[t] = gl * (1.0 - done[b, t])
        for i in range(agents):
            a = 0.0
            for t in range(steps - 1, -1, -1):
                v = np.float64(value[b, t, i])
                delta = np.float64(reward[b, t, i]) + bootstrap[t] * np.float64(next_value[b, t, i]) - v
                a = delta + coef[t] * a
                advantage[b, t, i] = a
                target[b, t, i] = a + v
