"""build_torch_optimizer: torch's kernel implementation per device, and auto's bit-identity on CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rlrun.trainer.optim import OptimizerStep, build_torch_optimizer


def _params():
    torch.manual_seed(0)
    return [nn.Parameter(torch.randn(7, 5)), nn.Parameter(torch.randn(5)), nn.Parameter(torch.randn(()))]


def test_auto_on_cpu_is_foreach_and_fused_is_opt_in():
    assert build_torch_optimizer("adam", _params()).defaults["foreach"] is True
    fused = build_torch_optimizer("adamw", _params(), "fused", lr=1e-3)
    assert fused.defaults["fused"] is True
    assert build_torch_optimizer("adam", _params(), "for_loop").defaults["foreach"] is False
    # no fused RMSprop kernel: the next fastest; Lamb has neither flag
    assert build_torch_optimizer("rmsprop", _params(), "fused").defaults["foreach"] is True
    assert "foreach" not in build_torch_optimizer("lamb", _params()).defaults


@pytest.mark.parametrize("name", ["adam", "adamw", "rmsprop", "sgd"])
def test_auto_keeps_the_per_tensor_loops_arithmetic_bit_for_bit(name):
    """The fingerprints of fixed-seed runs depend on it: auto may only pick identical kernels."""
    runs = {}
    for impl in ("auto", "for_loop"):
        params = _params()
        opt = OptimizerStep({"all": params}, name, lr=1e-2, max_grad_norm=1.0, weight_decay=0.01, impl=impl)
        g = torch.Generator().manual_seed(1)
        for _ in range(20):
            x = torch.randn(3, 7, generator=g)
            opt.step({"loss_all": ((x @ params[0] + params[1]) * params[2]).pow(2).mean()})
        runs[impl] = params
    for a, b in zip(runs["auto"], runs["for_loop"]):
        assert torch.equal(a, b)


def test_an_unknown_impl_is_refused_at_config_check():
    from rlrun.core.errors import ConfigError
    from rlrun.core.registry import build

    with pytest.raises(ConfigError, match="impl"):
        build("optim", {"name": "adam", "impl": "fast"}, param_groups={"all": _params()})
