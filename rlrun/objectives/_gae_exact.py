"""GAE in numpy with the numba kernel's exact rounding, for batches too small to be worth loading numba.

Importing numba and loading the cached kernel costs ~1 s per process; a short
run's few small batches take a few milliseconds here instead. The results are
bit-identical to ``_gae_kernel.gae_kernel``: the same float64 operations in the
same order, the kernel's fused multiply-adds (``fastmath={"contract"}`` lets LLVM
fuse each ``x + y * z`` on a CPU with FMA) emulated exactly, and the same
association (the four-step blocks of the time-last layout included). The
vectorisable parts run in numpy over whole arrays; the serial recursion per
series, in Python floats. ``kernel_fuses()`` says whether this machine's kernel
uses FMA; where it may not, ``gae`` does not take this path. Where an input is
not finite the emulation is not exact (it may give NaN where the kernel gives
inf); such a batch has diverged anyway.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import re
from pathlib import Path

import numpy as np

_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's split of a float64 into two 26-bit halves
# Up to this many rows the serial recursion runs in Python floats: ~3 us a row-step against
# ~170 us a step for the vectorised emulation (measured on a loaded 2-core machine: ratio ~55)
_PYTHON_ROWS = 32


@functools.cache
def kernel_fuses() -> bool:
    """Whether numba compiles the kernel with FMA here: a host-tuned build on an FMA CPU.

    True on x86-64 CPUs with the ``fma`` flag (Linux) and on AArch64, where FMA is part of
    the base ISA; False elsewhere, or when ``NUMBA_CPU_NAME`` targets another CPU.
    """
    if os.environ.get("NUMBA_CPU_NAME", "host") != "host":
        return False
    machine = platform.machine().lower()
    if machine in ("arm64", "aarch64"):
        return True
    if machine not in ("x86_64", "amd64"):
        return False
    try:
        return re.search(r"^flags\s*:.*\bfma\b", Path("/proc/cpuinfo").read_text(), re.M) is not None
    except OSError:
        return False


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


def _recurrence_rows(q: list[float], p: list[float], a: float) -> list[float]:
    """``out[k] = fma(q[k], out[k + 1], p[k])`` backwards from ``a``, in Python floats (one row)."""
    out = [0.0] * len(q)
    fsum = math.fsum  # correctly rounded: fsum of the product's exact two parts and p is the FMA
    for k in range(len(q) - 1, -1, -1):
        qk = q[k]
        c = _SPLIT * qk
        qh = c - (c - qk)
        c = _SPLIT * a
        ah = c - (c - a)
        uh = qk * a
        ul = ((qh * ah - uh) + qh * (a - ah) + (qk - qh) * ah) + (qk - qh) * (a - ah)
        try:
            r = fsum((uh, ul, p[k]))
        except (ValueError, OverflowError):  # inf - inf or an overflow: the plain result says as much
            r = math.nan
        a = r if r != 0.0 and math.isfinite(r) else qk * a + p[k]  # zeros keep the FMA's sign rules
        out[k] = a
    return out


def recurrence(q: np.ndarray, p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``out[:, k] = fma(q[:, k], out[:, k + 1], p[:, k])`` backwards from ``out[:, K] = a``, float64.

    The serial part: per row in Python floats (~1-3 us a step) when rows are few, else one
    vectorised emulated FMA per step (~25 numpy ops, ~50-170 us a step whatever the rows).
    """
    if q.shape[0] <= _PYTHON_ROWS:
        rows = [_recurrence_rows(qr, pr, ar) for qr, pr, ar in zip(q.tolist(), p.tolist(), a.tolist())]
        return np.array(rows, np.float64).reshape(q.shape)
    out = np.empty(q.shape, np.float64)
    for k in range(q.shape[1] - 1, -1, -1):
        a = fma(q[:, k], a, p[:, k])
        out[:, k] = a
    return out


def _series(q: np.ndarray, p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``recurrence`` over the time dim of ``[B, T, A]`` arrays, from ``a`` (``[B, A]``)."""
    b, steps, agents = p.shape
    rows = [np.moveaxis(np.broadcast_to(x, p.shape), 2, 1).reshape(b * agents, steps) for x in (q, p)]
    return np.moveaxis(recurrence(*rows, a.reshape(-1)).reshape(b, agents, steps), 1, 2)


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
            starts = _series(q0, p0, a)  # A_t at each block's start: the only serial part
            a = starts[:, 0]
            chain = np.concatenate([starts[:, 1:], np.zeros_like(starts[:, :1])], axis=1)
            out = np.stack([fma(q0, chain, p0), fma(q1, chain, p1), fma(q2, chain, p2),
                            fma(c3, chain, d3)], axis=2)
            adv[:, rem:] = out.reshape(adv[:, rem:].shape)
        if rem:  # the first T mod 4 steps
            adv[:, :rem] = _series(coef[:, :rem], delta[:, :rem], a)
    else:
        delta = fma(gamma * not_term, nv, r) - v  # bootstrap and reward fused, as in the kernel
        adv[:] = _series(coef, delta, np.zeros(r[:, 0].shape))
    dtype = np.asarray(value).dtype
    return adv.astype(dtype), (adv + v).astype(dtype)
