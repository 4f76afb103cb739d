"""The optimiser step without ``torch._dynamo`` (issue #27): bit-identical to torch's ``step``, and a
training run imports no ``torch._dynamo``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from rlrun.trainer.optim import OPTIMIZERS, step_without_dynamo

KWARGS = {"adam": {"weight_decay": 0.01, "eps": 1e-6}, "adamw": {"weight_decay": 0.1},
          "lamb": {"weight_decay": 0.01}, "rmsprop": {"alpha": 0.9, "momentum": 0.5},
          "sgd": {"momentum": 0.9, "nesterov": True}}


def _train(name: str, stepper, steps: int = 25) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    opt = OPTIMIZERS[name](net.parameters(), lr=1e-2, **KWARGS[name])
    x = torch.randn(64, 5)
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        (net(x) ** 2).mean().mul(1 + i % 3).backward()
        stepper(opt)
    return [p.detach().clone() for p in net.parameters()], opt.state_dict()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_same_weights_as_torch_step(name):
    ours, our_state = _train(name, step_without_dynamo)
    theirs, their_state = _train(name, lambda opt: opt.step())
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    for key, state in their_state["state"].items():
        for k, v in state.items():
            assert torch.equal(torch.as_tensor(our_state["state"][key][k]), torch.as_tensor(v)), (key, k)
    assert torch.is_grad_enabled()  # the grad mode is restored


def test_step_hooks_still_run():
    seen = []
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(net.parameters())
    opt.register_step_post_hook(lambda *_: seen.append(1))
    net(torch.ones(1, 2)).sum().backward()
    step_without_dynamo(opt)
    assert seen == [1]


def test_training_run_imports_no_dynamo(tmp_path):
    """A 1,024-frame PPO run makes, steps and saves its optimiser without importing torch._dynamo
    (1.7 s of start-up), and compiling afterwards still works."""
    check = textwrap.dedent(f'''
        import sys
        from rlrun.cli.main import main
        code = main(["total_frames=1024", "progress=false", "logger=none",
                     "hydra.run.dir={tmp_path / 'run'}"])
        dynamo = "torch._dynamo" in sys.modules
        import torch
        lin = torch.nn.Linear(3, 2)
        same = torch.equal(torch.compile(lin, backend="eager")(torch.ones(1, 3)), lin(torch.ones(1, 3)))
        opt = torch.optim.Adam(lin.parameters())
        from torch.optim.optimizer import Optimizer
        cache = getattr(Optimizer.zero_grad.__wrapped__, "__dynamo_disable", None)
        print(code, dynamo, same, cache is not Optimizer.zero_grad.__wrapped__)
    ''')
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600)
    assert done.stdout.strip().splitlines()[-1:] == ["0 False True True"], done.stdout + done.stderr[-3000:]
