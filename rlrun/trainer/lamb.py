"""LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning", Algorithm 2).

Adam's bias-corrected moments give the direction ``r = m_hat / (sqrt(v_hat) + eps)``;
decoupled weight decay is added to it, ``u = r + weight_decay * w``; each parameter
tensor (a "layer") then steps ``lr * ||w|| / ||u||`` along ``u``. The trust ratio
``||w|| / ||u||`` is 1 where either norm is 0 (a zero-initialised bias, or no update),
as the paper's ``phi`` would otherwise give a step of 0 or a division by 0. ``phi`` is
the identity here (the paper allows a clipped norm; the DT and oDT references do not
clip through it).

torch has no LAMB: the Table 2 DT/oDT configs (Table 9: ``optim.name: lamb``) need it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor


class Lamb(torch.optim.Optimizer):
    """Layer-wise adaptive moments (LAMB), one trust ratio per parameter tensor.

    Args:
        params: Parameters or parameter groups, as for any ``torch.optim.Optimizer``.
        lr: Learning rate ``eta``.
        betas: Decay rates of the first and second moments.
        eps: Added to ``sqrt(v_hat)``.
        weight_decay: ``lambda`` of the decoupled decay added to the update before the trust ratio.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        if lr <= 0.0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if eps <= 0.0 or weight_decay < 0.0:
            raise ValueError(f"need eps > 0 and weight_decay >= 0, got {eps}, {weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """One LAMB step of every parameter with a gradient.

        Args:
            closure: Re-evaluates the model and returns the loss (optional).

        Returns:
            The closure's loss, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                state = self.state[p]
                if not state:
                    # a float tensor, as torch's Adam keeps it: state_dicts stay interchangeable in form
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                t = int(state["step"].item())  # on the CPU: no device sync
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(p.grad, 1.0 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
                m_hat = m / (1.0 - beta1**t)
                v_hat = v / (1.0 - beta2**t)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"] != 0.0:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm = torch.linalg.vector_norm(p)
                u_norm = torch.linalg.vector_norm(update)
                # torch.where keeps the ratio on the device (no host sync per parameter)
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.sub_(update * (group["lr"] * ratio))
        return loss
