"""The SAC GEMM floor times exactly the matmuls one rlrun SAC update runs."""

from __future__ import annotations

from collections import Counter

import numpy as np
from torch.utils._python_dispatch import TorchDispatchMode

from rlrun.algos.sac import SACLoss
from rlrun.benchmarks.update import ACT, OBS, eager_ceiling, gemm_floor, sac_batches, sac_gemms
from rlrun.envs.gym import EnvSpec
from rlrun.modules.models import actor_twin_q
from rlrun.trainer.optim import OptimizerStep


class Matmuls(TorchDispatchMode):
    """Records ``(m, k, n)`` of every matmul, a batched one as one per batch entry, and the
    name of every op."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[int, int, int]] = []
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops.append(name)
        if name in ("mm", "addmm", "bmm", "baddbmm"):
            a, b = args[-2:] if name in ("addmm", "baddbmm") else args[:2]
            if a.dim() == 3:
                self.seen += [tuple(a.shape[1:]) + (b.shape[-1],)] * a.shape[0]
            else:
                self.seen.append((a.shape[0], a.shape[1], b.shape[1]))
        return func(*args, **(kwargs or {}))


def _orientation_free(shapes):
    # dW = X^T dY or dY^T X: the same GEMM up to transposition, so compare sorted dimensions
    return Counter(tuple(sorted(s)) for s in shapes)


def test_the_floor_has_the_matmuls_of_one_sac_update():
    spec = EnvSpec((OBS,), np.dtype(np.float32), False, ACT)
    loss = SACLoss(actor_twin_q(spec), spec, gamma=0.99)
    optim = OptimizerStep(loss.param_groups(), "adam")
    batch = sac_batches()[0]
    with Matmuls() as mode:
        optim.step(loss(batch))
        loss.update_targets()
    assert _orientation_free(mode.seen) == _orientation_free(sac_gemms())
    assert len(sac_gemms()) == 45


def test_the_floor_runs_its_matmuls():
    with Matmuls() as mode:
        gemm_floor([(4, 3, 2), (2, 5, 1)])(2)
    assert mode.seen == [(4, 3, 2), (2, 5, 1)] * 2


def test_the_eager_ceiling_runs_the_floors_matmuls_and_only_the_unavoidable_element_wise_ops():
    steps, shapes = eager_ceiling()
    with Matmuls() as mode:
        steps(1)
    assert Counter(mode.seen) == Counter(shapes) == Counter(sac_gemms())
    assert set(mode.ops) == {"addmm", "mm", "t", "relu_", "threshold_backward", "sum", "_fused_adam_",
                             "_foreach_lerp_"}
    assert mode.ops.count("relu_") == 2 * 8  # two hidden layers in each of the 8 forward passes
    assert mode.ops.count("_fused_adam_") == mode.ops.count("_foreach_lerp_") == 1
