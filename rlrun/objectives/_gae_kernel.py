"""The numba GAE kernel (imported on first use by :mod:`rlrun.objectives.gae`: numba takes ~0.5 s to import).

Serial on purpose: numba's parallel thread pool keeps spinning after a parallel
region, which made the torch ops of a PPO run 2-5x slower on a 2-core machine
(measured). ``cache=True`` keeps the compiled code in ``__pycache__`` (or in
numba's user cache dir when that is read-only), so only the first process on a
machine pays the compile.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def gae_kernel(reward, value, next_value, terminated, done, gamma, lmbda, advantage, target):
    """Writes advantages and value targets of ``[N, T]`` arrays into ``advantage`` and ``target``."""
    n, steps = reward.shape
    for i in range(n):
        last = 0.0  # float64 whatever the input dtype
        for t in range(steps - 1, -1, -1):
            v = np.float64(value[i, t])
            # branch-free masks: episode ends are rare but unpredictable
            delta = reward[i, t] + gamma * next_value[i, t] * (1.0 - terminated[i, t]) - v
            last = delta + gamma * lmbda * (1.0 - done[i, t]) * last
            advantage[i, t] = last
            target[i, t] = last + v
