"""gemm=onednn: large MLP products through oneDNN give autograd's values (to rounding); small ones
stay on the BLAS."""

from __future__ import annotations

import pytest
import torch

from rlrun.modules import onednn
from rlrun.modules.networks import TwinQCritic, mlp, plain_layers, run_layers

pytestmark = pytest.mark.skipif(not onednn.use("onednn"), reason="this torch has no oneDNN linear")


@pytest.fixture(autouse=True)
def blas_after():
    yield
    onednn.use("blas")


def _grads(gemm: str, nets: tuple, batch: int, counter: list | None = None) -> list[torch.Tensor]:
    """Outputs of a twin critic and an MLP on fixed inputs, and every gradient, under ``gemm``."""
    critic, net = nets
    onednn.use(gemm)
    if counter is not None:
        counter.clear()  # use()'s own probe call
    g = torch.Generator().manual_seed(1)
    obs, act = torch.randn(batch, 3, generator=g), torch.randn(batch, 1, generator=g).requires_grad_()
    params = [*critic.parameters(), *net.parameters()]
    for p in params:
        p.grad = None
    q, y = critic(obs, act), run_layers(net, plain_layers(net), obs)
    (q.square().sum() + y.square().sum()).backward()
    return [q.detach(), y.detach(), act.grad, *(p.grad for p in params)]


def _counting(monkeypatch) -> list:
    calls = []
    kernel = onednn._kernel()

    def counted():
        def call(*args):
            calls.append(tuple(args[0].shape))
            return kernel(*args)
        return call
    monkeypatch.setattr(onednn, "_kernel", counted)
    return calls


def test_large_products_match_autograd_through_onednn(monkeypatch):
    """SAC's shapes (256-wide, batch 256): forward and every gradient as the BLAS path's, to rounding,
    and the 256x256 layers' products (forward and backward) did run in oneDNN."""
    torch.manual_seed(0)
    nets = (TwinQCritic(3, 1, [256, 256]), mlp(3, [256, 256], 2, "relu"))
    ref = _grads("blas", nets, 256)
    calls = _counting(monkeypatch)
    got = _grads("onednn", nets, 256, calls)
    # the actor's middle layer (1 forward, 2 backward) and the critics' (2 + 2 x 2)
    assert len(calls) == 9
    for a, b in zip(ref, got):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5 * float(a.abs().max()))


def test_small_products_stay_on_the_blas_bit_for_bit(monkeypatch):
    """PPO's 64-wide networks and a collector's 8 rows: below MIN_MACS nothing changes, to the bit."""
    torch.manual_seed(0)
    nets = (TwinQCritic(3, 1, [64, 64]), mlp(3, [64, 64], 2, "tanh"))
    ref = _grads("blas", nets, 256)
    calls = _counting(monkeypatch)
    got = _grads("onednn", nets, 256, calls)
    assert calls == []
    assert all(torch.equal(a, b) for a, b in zip(ref, got))
    big = (TwinQCritic(3, 1, [256, 256]), mlp(3, [256, 256], 2, "relu"))
    assert all(torch.equal(a, b) for a, b in zip(_grads("blas", big, 8), _grads("onednn", big, 8)))


def test_use_switches_and_falls_back(monkeypatch):
    assert onednn.use("onednn") and onednn.enabled()
    assert not onednn.use("blas") and not onednn.enabled()
    assert onednn.use("auto") == (not onednn.intel_cpu())
    monkeypatch.setattr(onednn, "_kernel", lambda: None)  # a build without the kernel: the BLAS
    assert not onednn.use("onednn")
