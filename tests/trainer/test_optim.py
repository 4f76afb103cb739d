"""OptimizerStep: absent loss terms, per-group clipping and lr, schedules, errors, state."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from rlrun.core.errors import ConfigError
from rlrun.core.registry import build
from rlrun.trainer.optim import OptimizerStep


def two_groups():
    torch.manual_seed(0)
    a = nn.Parameter(torch.randn(3))
    b = nn.Parameter(torch.randn(2))
    return a, b


def test_group_without_a_loss_term_is_not_stepped():
    a, b = two_groups()
    opt = OptimizerStep({"actor": [a], "critic": [b]}, "adam", lr=0.1)
    b0 = b.detach().clone()
    a0 = a.detach().clone()
    # a diagnostic (not loss_*) entry depending on b must not be back-propagated
    opt.step({"loss_critic": (a**2).sum(), "q_value": (b**2).sum()})
    assert not torch.equal(a, a0)
    assert torch.equal(b, b0)
    assert opt.optimizers["critic"].state == {}
    opt.step({"loss_critic": (a**2).sum(), "loss_actor": (b**2).sum()})
    b1, state1 = b.detach().clone(), opt.optimizers["critic"].state_dict()["state"][0]
    assert not torch.equal(b1, b0) and state1["step"].item() == 1
    opt.step({"loss_critic": (a**2).sum()})  # a delayed actor step (TD3)
    assert torch.equal(b, b1)
    state = opt.optimizers["critic"].state_dict()["state"][0]
    assert state["step"].item() == 1
    assert torch.equal(state["exp_avg"], state1["exp_avg"])
    assert opt.optimizers["actor"].state_dict()["state"][0]["step"].item() == 3


def test_frozen_parameters_are_left_out():
    a, b = two_groups()
    b.requires_grad_(False)
    opt = OptimizerStep({"g": [a, b]}, "sgd", lr=0.1)
    assert opt.params["g"] == [a]


def test_grad_clipping_applies_to_each_group_separately():
    a, b = two_groups()
    opt = OptimizerStep({"a": [a], "b": [b]}, "sgd", lr=1.0, max_grad_norm=1.0)
    a0, b0 = a.detach().clone(), b.detach().clone()
    ga = torch.tensor([6.0, 8.0, 0.0])  # norm 10 -> clipped to 1
    gb = torch.tensor([0.3, 0.4])  # norm 0.5 -> kept
    opt.step({"loss_a": (a * ga).sum(), "loss_b": (b * gb).sum()})
    torch.testing.assert_close(a0 - a.detach(), ga / 10, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b0 - b.detach(), gb)
    torch.testing.assert_close(opt.last_grad_norms["a"], torch.tensor(10.0))
    torch.testing.assert_close(opt.last_grad_norms["b"], torch.tensor(0.5))


def test_per_group_max_grad_norm_override():
    a, b = two_groups()
    opt = OptimizerStep({"a": [a], "b": [b]}, "sgd", lr=1.0, max_grad_norm=None,
                        groups={"b": {"max_grad_norm": 0.1}})
    a0, b0 = a.detach().clone(), b.detach().clone()
    opt.step({"loss_a": (a * 3.0).sum(), "loss_b": (b * torch.tensor([3.0, 4.0])).sum()})
    torch.testing.assert_close(a0 - a.detach(), torch.full((3,), 3.0))
    torch.testing.assert_close((b0 - b.detach()).norm(), torch.tensor(0.1), atol=1e-6, rtol=1e-5)
    assert "a" not in opt.last_grad_norms


def test_per_group_lr_override():
    a, b = two_groups()
    opt = OptimizerStep({"a": [a], "b": [b]}, "sgd", lr=0.1, groups={"b": {"lr": 0.5}})
    assert opt.optimizers["a"].param_groups[0]["lr"] == 0.1
    assert opt.optimizers["b"].param_groups[0]["lr"] == 0.5
    a0, b0 = a.detach().clone(), b.detach().clone()
    opt.step({"loss_all": a.sum() + b.sum()})
    torch.testing.assert_close(a0 - a.detach(), torch.full((3,), 0.1))
    torch.testing.assert_close(b0 - b.detach(), torch.full((2,), 0.5))


def test_linear_lr_anneal_scales_every_group_to_zero():
    a, b = two_groups()
    opt = OptimizerStep({"a": [a], "b": [b]}, "adam", lr=0.2, groups={"b": {"lr": 0.4}},
                        lr_schedule="linear")
    opt.anneal(0.25)
    assert opt.optimizers["a"].param_groups[0]["lr"] == pytest.approx(0.15)
    assert opt.optimizers["b"].param_groups[0]["lr"] == pytest.approx(0.3)
    opt.anneal(0.5)  # from the base rate, not compounding
    assert opt.optimizers["a"].param_groups[0]["lr"] == pytest.approx(0.1)
    opt.anneal(1.2)
    assert opt.optimizers["b"].param_groups[0]["lr"] == 0.0


def test_constant_schedule_does_not_anneal():
    a, _ = two_groups()
    opt = OptimizerStep({"a": [a]}, "adam", lr=0.2)
    opt.anneal(0.9)
    assert opt.optimizers["a"].param_groups[0]["lr"] == 0.2


def test_unknown_optimizer_raises_config_error_with_did_you_mean():
    a, _ = two_groups()
    with pytest.raises(ConfigError) as info:
        OptimizerStep({"a": [a]}, "adamm")
    assert info.value.key == "optim.optimizer"
    assert "Did you mean 'adam'" in info.value.message and "sgd" in info.value.fix


def test_unknown_group_raises_config_error_naming_the_group():
    a, _ = two_groups()
    with pytest.raises(ConfigError) as info:
        OptimizerStep({"actor": [a]}, "adam", groups={"critc": {"lr": 1e-3}})
    assert info.value.key == "optim.groups.critc"
    assert "actor" in info.value.fix


def test_unknown_lr_schedule_raises_config_error():
    a, _ = two_groups()
    with pytest.raises(ConfigError) as info:
        OptimizerStep({"a": [a]}, lr_schedule="cosine")
    assert info.value.key == "optim.lr_schedule"


def loss_of(a, b, t):
    return {"loss_a": ((a - t) ** 2).sum(), "loss_b": (b**2).sum() * t}


def test_state_dict_round_trip_continues_identically():
    a, b = two_groups()
    opt = OptimizerStep({"a": [a], "b": [b]}, "adam", lr=0.05)
    for t in range(3):
        opt.step(loss_of(a, b, float(t)))
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)

    a2, b2 = nn.Parameter(a.detach().clone()), nn.Parameter(b.detach().clone())
    opt2 = OptimizerStep({"a": [a2], "b": [b2]}, "adam", lr=0.05)
    opt2.load_state_dict(state)
    for t in (3.0, 4.0):
        opt.step(loss_of(a, b, t))
        opt2.step(loss_of(a2, b2, t))
    assert torch.equal(a, a2) and torch.equal(b, b2)
    # a fresh optimiser (no moments) would have diverged
    a3, b3 = nn.Parameter(a2.detach().clone()), nn.Parameter(b2.detach().clone())
    fresh, loaded = OptimizerStep({"a": [a3], "b": [b3]}, "adam", lr=0.05), opt2
    fresh.step(loss_of(a3, b3, 5.0))
    loaded.step(loss_of(a2, b2, 5.0))
    assert not torch.equal(a2, a3)


@pytest.mark.parametrize("name", ["adam", "adamw", "lamb", "rmsprop", "sgd"])
def test_factory_builds_each_optimizer(name):
    a, _ = two_groups()
    opt = build("optim", {"name": name, "lr": 0.01, "weight_decay": 0.0,
                          "alpha": 0.9 if name == "rmsprop" else None}, param_groups={"a": [a]})
    assert type(opt.optimizers["a"]).__name__.lower() == name
    a0 = a.detach().clone()
    opt.step({"loss_a": (a**2).sum()})
    assert not torch.equal(a, a0)
