"""GAE in numpy with the numba kernel's exact rounding, for batches too small to be worth loading numba.

Importing numba and loading the cached kernel costs ~1 s per process; a short
run's few small batches take a few milliseconds here instead. The results are
bit-identical to ``_gae_kernel.gae_kernel``: the same float64 operations in the
same order, the kernel's fused multiply-adds (``fastmath={"contract"}`` lets LLVM
fuse ``x + y * z``; the CPUs rlrun runs on have FMA) emulated exactly, and the
recursions vectorised over rows with the same association (the four-step blocks
of the time-last layout included). Where an input is not finite the
emulation is not exact (it may give NaN where the kernel gives inf); such a
batch has diverged anyway.
"""

from __future__ import annotations

import numpy as np

_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a float64 into two 26-bit halves


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once (float64), as the FMA instruction computes it.

    Boldo and Melquiond's emulation (IEEE Trans. Computers 57(4), 2008): the product
    split exactly into ``uh + ul`` (Dekker), ``c + uh`` exactly into ``th + tl``, then
    ``th + RO(tl + ul)`` where RO rounds to odd, which makes the final rounding the
    single rounding of the exact sum. Exact unless the product under- or overflows.
    """
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                  np.asarray(c, np.float64))
    uh = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl
    th, tl = _two_sum(c, uh)
    v, err = _two_sum(tl, ul)
    # round to odd: an inexact v whose last bit is even moves one ulp towards the exact sum
    even = (v.view(np.int64) & 1) == 0
    v = np.where((err != 0) & even, np.nextafter(v, np.where(err > 0, np.inf, -np.inf)), v)
    out = th + v
    plain = a * b + c
    return np.where(np.isfinite(plain), out, plain)


def gae_exact(reward: np.ndarray, value: np.ndarray, next_value: np.ndarray, terminated: np.ndarray,
              done: np.ndarray, gamma: float, lmbda: float, blocked: bool) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's ``(advantage, target)`` for ``[B, T, A]`` arrays and ``[B, T, 1 or A]`` flags.

    Returned in the dtype of ``value``.
    """
    gamma, lmbda = float(gamma), float(lmbda)
    gl = gamma * lmbda
    r, v, nv = (np.asarray(x, np.float64) for x in (reward, value, next_value))
    not_term = 1.0 - np.asarray(terminated, np.float64)
    coef = np.broadcast_to(gl * (1.0 - np.asarray(done, np.float64)), r.shape)
    steps = r.shape[1]
    adv = np.empty(r.shape, np.float64)
    if blocked:
        # gamma * V(s') rounds first; the 0/1 mask keeps x * mask + r exact with or without FMA
        delta = (r + gamma * nv * not_term) - v
        rem, a = steps % 4, np.zeros(r[:, 0].shape)
        if steps >= 4:
            d = delta[:, rem:].reshape(r.shape[0], -1, 4, r.shape[2])  # [B, blocks, 4, A]
            c = coef[:, rem:].reshape(d.shape)
            d0, d1, d2, d3 = (d[:, :, k] for k in range(4))
            c0, c1, c2, c3 = (c[:, :, k] for k in range(4))
            p2, q2 = fma(c2, d3, d2), c2 * c3
            p1, q1 = fma(c1, p2, d1), c1 * q2
            p0, q0 = fma(c0, p1, d0), c0 * q1
            chain = np.empty_like(p0)  # A_{t+4} entering each block: the only serial part
            for k in range(d.shape[1] - 1, -1, -1):
                chain[:, k] = a
                a = fma(q0[:, k], a, p0[:, k])
            out = np.stack([fma(q0, chain, p0), fma(q1, chain, p1), fma(q2, chain, p2),
                            fma(c3, chain, d3)], axis=2)
            adv[:, rem:] = out.reshape(adv[:, rem:].shape)
        for s in range(rem - 1, -1, -1):  # the first T mod 4 steps
            a = fma(coef[:, s], a, delta[:, s])
            adv[:, s] = a
    else:
        delta = fma(gamma * not_term, nv, r) - v  # bootstrap and reward fused, as in the kernel
        a = np.zeros(r[:, 0].shape)
        for t in range(steps - 1, -1, -1):
            a = fma(coef[:, t], a, delta[:, t])
            adv[:, t] = a
    dtype = np.asarray(value).dtype
    return adv.astype(dtype), (adv + v).astype(dtype)
