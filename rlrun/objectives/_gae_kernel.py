"""The numba GAE kernel (imported on first use by :mod:`rlrun.objectives.gae`: numba takes ~0.5 s to import).

One kernel for both layouts, read in place as ``[B, T, A]`` arrays: time-last
rows are ``[N, T, 1]``, agent groups ``[envs, T, n_agents]`` (the agent dim
after time); ``terminated``/``done`` are ``[B, T, 1]`` (shared by a group) or
``[B, T, A]``. It keeps two loop orders, each the arithmetic the fixed-seed
runs of its layout were fingerprinted with, as two jitted functions (both
orders in one function measured ~20% slower on groups, 600 x 100 x 3):

* ``blocked`` (time-last rows). The recursion ``A_t = delta_t + c_t A_{t+1}``
  (``c_t = gamma * lambda * (1 - done_t)``) is latency-bound when written step
  by step: every step waits for the previous multiply-add. Per row it first
  computes every ``delta_t`` and ``c_t`` in a loop that LLVM vectorises, then
  walks the row in blocks of four steps, writing the block's advantages as
  ``A_{t+k} = P_k + Q_k A_{t+4}``: ``P_k`` and ``Q_k`` depend on the block's own
  data only, so the chain advances four steps per multiply-add and the rest
  overlaps. On the Table 4 workload this measured 1.6-3x faster than the same
  recursion step by step (see ``python -m rlrun.benchmarks gae``).
* step by step, per agent (groups). Per env it turns the flags into per-step
  bootstrap and trace coefficients, then runs each agent's recursion backwards
  with the chain in a register; one env's rows (``T x n_agents``) stay in cache
  across the agents. Measured against two other loop orders (all agents advanced
  at each step with the chains in an array: 1.1-1.7x slower; TD errors
  precomputed in a separate pass: 1.3-1.7x slower).

The two differ in rounding, not in meaning: ``blocked`` rounds ``gamma * V(s')``
before adding the reward, the group order fuses them (one FMA), and the chains
associate differently. ``rlrun.objectives._gae_exact`` reproduces both bit for bit.

Serial on purpose: numba's parallel thread pool keeps spinning after a parallel
region, which made the torch ops of a PPO run 2-5x slower on a 2-core machine
(measured). ``cache=True`` keeps the compiled code in ``__pycache__`` (or in
numba's user cache dir when that is read-only), so only the first process on a
machine pays the compile. ``fastmath={"contract"}`` only allows fused
multiply-adds; NaN and inf keep their meaning. Accumulates in float64.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _blocked(reward, value, next_value, terminated, done, gamma, lmbda, advantage, target):
    n, steps, agents = reward.shape
    per_agent = terminated.shape[2] > 1
    gl = gamma * lmbda
    delta = np.empty(steps, np.float64)  # one series' scratch, in L1; float64 whatever the input dtype
    coef = np.empty(steps, np.float64)
    adv = np.empty(steps, np.float64)
    for b in range(n):
        for i in range(agents):
            f = i if per_agent else 0
            for t in range(steps):  # branch-free masks: episode ends are rare but unpredictable
                bootstrap = gamma * np.float64(next_value[b, t, i]) * (1.0 - terminated[b, t, f])
                delta[t] = np.float64(reward[b, t, i]) + bootstrap - np.float64(value[b, t, i])
                coef[t] = gl * (1.0 - done[b, t, f])
            a = 0.0  # A_{t+4}, the chain
            t = steps
            while t >= 4:
                t -= 4
                d0, d1, d2, d3 = delta[t], delta[t + 1], delta[t + 2], delta[t + 3]
                c0, c1, c2, c3 = coef[t], coef[t + 1], coef[t + 2], coef[t + 3]
                p2, q2 = d2 + c2 * d3, c2 * c3
                p1, q1 = d1 + c1 * p2, c1 * q2
                p0, q0 = d0 + c0 * p1, c0 * q1
                a3, a2, a1, a = d3 + c3 * a, p2 + q2 * a, p1 + q1 * a, p0 + q0 * a
                adv[t], adv[t + 1], adv[t + 2], adv[t + 3] = a, a1, a2, a3
            for s in range(t - 1, -1, -1):  # the first T mod 4 steps
                a = delta[s] + coef[s] * a
                adv[s] = a
            for t in range(steps):
                advantage[b, t, i] = adv[t]
                target[b, t, i] = adv[t] + value[b, t, i]


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _stepwise(reward, value, next_value, terminated, done, gamma, lmbda, advantage, target):
    n, steps, agents = reward.shape
    per_agent = terminated.shape[2] > 1
    gl = gamma * lmbda
    bootstrap = np.empty(steps, np.float64)
    coef = np.empty(steps, np.float64)
    for b in range(n):
        for i in range(agents):
            if i == 0 or per_agent:
                f = i if per_agent else 0
                for t in range(steps):
                    bootstrap[t] = gamma * (1.0 - terminated[b, t, f])
                    coef[t] = gl * (1.0 - done[b, t, f])
            a = 0.0
            for t in range(steps - 1, -1, -1):
                v = np.float64(value[b, t, i])
                delta = np.float64(reward[b, t, i]) + bootstrap[t] * np.float64(next_value[b, t, i]) - v
                a = delta + coef[t] * a
                advantage[b, t, i] = a
                target[b, t, i] = a + v


def gae_kernel(reward, value, next_value, terminated, done, gamma, lmbda, blocked, advantage, target):
    """Writes advantages and value targets of ``[B, T, A]`` arrays into ``advantage`` and ``target``.

    ``terminated``/``done`` are ``[B, T, 1]`` (shared by the ``A`` series of a row) or
    ``[B, T, A]``; ``blocked`` picks the time-last loop order, else the group one.
    """
    (_blocked if blocked else _stepwise)(reward, value, next_value, terminated, done, gamma, lmbda,
                                         advantage, target)
