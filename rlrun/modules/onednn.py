"""``gemm=onednn``: the MLPs' large matrix products on CPU through oneDNN rather than the BLAS.

Why: torch's float32 ``mm``/``linear``/``bmm`` on CPU call MKL, whose fast (AVX-512) kernels are
chosen for Intel processors only. On this project's machine (AMD EPYC with AVX-512, one thread)
a 256x256x256 product took 305-311 us in MKL, 144-153 us in oneDNN (torch's other CPU library,
which picks its kernels by instruction set, not vendor) and 210 us in XLA's, which is how SBX's
SAC update ran 2.7x faster than rlrun's on the same core. oneDNN's fixed cost per call is ~10 us
against MKL's ~2 us, so only products of at least ``MIN_MACS`` multiply-adds go to it (SAC/TD3's
256-wide layers at batch 256; PPO's 64-wide ones and the collector's few rows stay on the BLAS).

The values are the same products, summed in another order: results differ from the BLAS's in
the last bits (max 4e-5 on a 256x256x256 product of unit normals), so fixed-seed results of
runs with large layers differ from ``gemm=blas``'s, as they do between MKL on Intel and on AMD.

torch's oneDNN linear (``torch.ops.mkldnn._linear_pointwise``, the kernel inductor's CPU fusion
calls) is private: ``rlrun.core.private.torch.onednn_linear`` looks it up, guarded; where it is
missing or fails, the BLAS serves.
Its backward is two more products (``dX = dY W``, ``dW = dY^T X``) under the same size rule
and a sum for the bias; it is differentiable once (no double backward through it).
"""

from __future__ import annotations

import platform
from typing import Literal

import torch
from torch import Tensor
from torch.nn import functional as F

from rlrun.core.private.torch import onednn_linear as _kernel

Gemm = Literal["auto", "blas", "onednn"]
MIN_MACS = 1 << 21  # below this, oneDNN's per-call cost exceeds what its faster kernel saves (measured)
_STATE = {"on": False}


def intel_cpu() -> bool:
    """Whether the CPU is Intel's (where MKL's own kernels are its fastest)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return "GenuineIntel" in line
    except OSError:
        pass
    return "intel" in platform.processor().lower()


def use(gemm: Gemm) -> bool:
    """Routes large MLP products through oneDNN (``onednn``; ``auto``: on non-Intel CPUs) or not
    (``blas``); returns whether oneDNN is on (False where this torch has no oneDNN linear)."""
    on = gemm == "onednn" or (gemm == "auto" and not intel_cpu())
    _STATE["on"] = bool(on and _kernel() is not None and _works())
    return _STATE["on"]


def enabled() -> bool:
    return _STATE["on"]


def _works() -> bool:
    """One small call, so that a build whose kernel refuses plain tensors falls back at start."""
    try:
        x = torch.ones(2, 3)
        out = _kernel()(x, torch.ones(4, 3), None, "none", [], "")
        return out.shape == (2, 4) and bool((out == 3).all())
    except Exception:  # any failure of the private kernel: the BLAS serves
        return False


def _product(a: Tensor, w: Tensor) -> Tensor:
    """``a @ w.T`` (``a`` [m, k], ``w`` [n, k]); oneDNN for large products."""
    if a.shape[0] * a.shape[1] * w.shape[0] >= MIN_MACS:
        return _kernel()(a, w, None, "none", [], "")
    return F.linear(a, w)


class _Linear(torch.autograd.Function):
    """``x @ w.T + b`` with oneDNN's forward product and the backward's two products."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return _kernel()(x, w, b, "none", [], "")

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, w = ctx.saved_tensors
        gx = _product(grad, w.t()) if ctx.needs_input_grad[0] else None
        gw = _product(grad.t(), x.t()) if ctx.needs_input_grad[1] else None
        gb = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


class _Batched(torch.autograd.Function):
    """``baddbmm(b, x, w)`` for stacked networks (``x`` [q or 1, m, k], ``w`` [q, k, n], ``b`` [q, 1, n]),
    network by network: oneDNN has no batched linear. The gradients of the stacked ``w`` and ``b``
    are written whole, not through per-network views (whose backward zero-fills the stack each)."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        kernel, shared = _kernel(), x.shape[0] == 1
        return torch.stack([kernel(x[0 if shared else q], w[q].t(), b[q, 0], "none", [], "")
                            for q in range(w.shape[0])])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, w = ctx.saved_tensors
        shared, gx, gw = x.shape[0] == 1, None, None
        if ctx.needs_input_grad[0]:
            parts = [_product(grad[q], w[q]) for q in range(w.shape[0])]
            gx = (torch.stack(parts).sum(0, keepdim=True) if shared else torch.stack(parts))
        if ctx.needs_input_grad[1]:
            gw = torch.stack([_product(x[0 if shared else q].t(), grad[q].t()) for q in range(w.shape[0])])
        gb = grad.sum(1, keepdim=True) if ctx.needs_input_grad[2] else None
        return gx, gw, gb


def batched_linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """``torch.baddbmm(b, x.expand(len(w), -1, -1), w)``; through oneDNN when on (``use``) for large
    float32 CPU products outside compilation and tracing, else that very call."""
    if (not _STATE["on"] or x.device.type != "cpu" or x.dtype != torch.float32 or w.dtype != torch.float32
            or x.shape[1] * w.shape[1] * w.shape[2] < MIN_MACS or torch.compiler.is_compiling()
            or torch.jit.is_tracing()):
        return torch.baddbmm(b, x.expand(w.shape[0], -1, -1) if x.shape[0] == 1 else x, w)
    return _Batched.apply(x, w, b)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``; through oneDNN when on (``use``) for a large float32 CPU
    product outside compilation and tracing, else the BLAS (the same call as ``nn.Linear``'s)."""
    if (not _STATE["on"] or x.device.type != "cpu" or x.dtype != torch.float32
            or weight.dtype != torch.float32 or x.dim() < 1
            or x.numel() // max(x.shape[-1], 1) * weight.shape[0] * weight.shape[1] < MIN_MACS
            or torch.compiler.is_compiling() or torch.jit.is_tracing()):
        return F.linear(x, weight, bias)
    lead = x.shape[:-1]
    out = _Linear.apply(x.reshape(-1, x.shape[-1]), weight, bias)
    return out.reshape(*lead, weight.shape[0])
