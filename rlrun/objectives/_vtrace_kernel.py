"""The numba kernel behind :func:`rlrun.objectives.vtrace.vtrace` (imported on first use).

``out_t = delta_t + coef_t out_{t+1}`` backwards over each row: the one part of
V-trace that is a recursion. Serial and cached for the same reasons as the
GAE kernel (``_gae_kernel.py``).
"""

import numba


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def reverse_recurrence(delta, coef, out):
    """Writes the masked reverse linear recurrence of ``[N, T]`` float64 arrays into ``out``."""
    n, steps = delta.shape
    for i in range(n):
        acc = 0.0
        for t in range(steps - 1, -1, -1):
            acc = delta[i, t] + coef[i, t] * acc
            out[i, t] = acc
