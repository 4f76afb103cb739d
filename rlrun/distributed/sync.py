"""The collectives of a data-parallel learner: gradient averaging and global batch statistics.

Why one flat all-reduce and not ``DistributedDataParallel``: rlrun's losses have several
parameter groups stepped by one ``OptimizerStep`` (SAC's actor, critic and temperature; TD3's
critic every step and its actor every other step; PPO's one group on ``FlatAdam``'s flat
buffers). DDP wraps one module and all-reduces buckets while backward runs; it would need
one wrapper per group, ``find_unused_parameters`` for TD3's skipped actor steps (an extra
traversal and a collective per step) and it cannot see the one sum of ``loss_*`` terms that
``OptimizerStep`` back-propagates. At rlrun's sizes (10^4-10^6 parameters, a few MB) a step's
gradients fit one message, so DDP's overlap of communication with backward saves little,
while one all-reduce per step has one latency instead of one per bucket. Parameters without a
gradient (TD3's actor on a critic-only step) are left out on every rank alike, as every rank
runs the same schedule, so the message has the same layout on all of them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def active() -> bool:
    """Whether a process group with more than one rank is up."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def average_gradients(params: list[Tensor]) -> None:
    """Averages ``params``' gradients over ranks in place, with one all-reduce.

    Gradients are gathered into one flat buffer, summed over ranks and divided by the world
    size; each rank then holds the gradient the mean loss over all ranks' samples would give
    (each rank's loss is the mean over an equal share of the batch).
    """
    if not active():  # alone: a plain call per optimiser step, no grad-mode context entered
        return
    with torch.no_grad():
        _all_reduce_mean([p.grad for p in params if p.grad is not None])


def _all_reduce_mean(grads: list[Tensor]) -> None:
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat.div_(dist.get_world_size())
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))


def any_rank(flag: int) -> int:
    """The largest of every rank's ``flag`` (``flag`` itself where alone): one all-reduce."""
    if not active():
        return flag
    # NCCL reduces CUDA tensors only; once a batch, so the sync of reading it back costs nothing
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    out = torch.tensor([flag], dtype=torch.int64, device=device)
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return int(out.item())


def reduce_sum(values: Tensor) -> Tensor:
    """The element-wise sum of ``values`` over ranks (a copy; ``values`` itself where alone)."""
    if not active():
        return values
    out = values.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def gather_rows(x: Tensor) -> Tensor:
    """Every rank's ``x`` (all of one shape) concatenated along dim 0 in rank order; ``x`` alone.

    The observation normaliser updates from it: every rank then folds the same global batch into
    its running mean and variance and all ranks keep one normaliser, the one a process on the
    whole batch would keep (to float summation order), instead of each drifting on its own data.
    """
    if not active():
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def global_mean_std(x: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and unbiased standard deviation of ``x`` over every rank's elements.

    Used to normalise PPO's advantages over the global minibatch: N ranks then compute exactly
    what one process computes on the whole minibatch (to float summation order). The statistics
    are constants for autograd, as ``Tensor.mean``/``std`` of advantages (which carry no
    gradient) are.
    """
    with torch.no_grad():
        x64 = x.detach().reshape(-1).double()
        stats = reduce_sum(torch.stack([x64.sum(), (x64 * x64).sum(), torch.tensor(float(x64.numel()),
                                                                                  dtype=torch.float64)]))
        total, squares, n = stats[0], stats[1], stats[2]
        mean = total / n
        var = (squares - n * mean * mean) / (n - 1)
    return mean.to(x.dtype), var.clamp_min(0).sqrt().to(x.dtype)


@torch.no_grad()
def broadcast_state(module: torch.nn.Module) -> None:
    """Every rank takes rank 0's parameters and buffers (ranks build with their own seeds, so
    their initial weights differ until this)."""
    if not active():
        return
    for t in [*module.parameters(), *module.buffers()]:
        dist.broadcast(t.data, src=0)
