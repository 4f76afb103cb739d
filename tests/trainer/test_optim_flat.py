"""A single Adam group stepped on flat buffers (``FlatAdam``, issue #27): the same bits as torch's
own foreach step with ``clip_grad_norm_``, through a resume and a fallback to torch's step."""

from __future__ import annotations

import torch

from rlrun.trainer.optim import OptimizerStep


def _params() -> dict[str, list[torch.nn.Parameter]]:
    torch.manual_seed(0)
    # PPO's shapes on CartPole: 2- and 1-element output biases fall in the kernels' scalar tails
    # per tensor, but inside vector lanes on a flat buffer
    actor = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    critic = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    return {"all": [*actor.parameters(), *critic.parameters()]}


def _train(flat: bool, steps: int = 40, resume_at: int | None = None, drop_grad_at: int | None = None,
           **opts) -> tuple[list[torch.Tensor], dict, list[torch.Tensor]]:
    params = _params()
    step = OptimizerStep(params, "adam", lr=1e-3, max_grad_norm=0.5, lr_schedule="linear", **opts)
    assert (step._flat is not None) == flat or not flat
    if not flat:
        step._flat = None  # torch's own foreach step and clip_grad_norm_
    gen = torch.Generator().manual_seed(1)
    norms = []
    for i in range(steps):
        if i == resume_at:  # a new OptimizerStep from the saved state, as a resumed run builds
            saved = step.state_dict()
            step = OptimizerStep(params, "adam", lr=1e-3, max_grad_norm=0.5, lr_schedule="linear", **opts)
            if not flat:
                step._flat = None
            step.load_state_dict(saved)
        step.anneal(i / steps)
        scale = 10.0 ** torch.randint(-4, 2, (), generator=gen).item()  # clipped on some steps only
        x = torch.randn(16, 4, generator=gen) * scale
        ps = params["all"]
        loss = (torch.tanh(x @ ps[0].T + ps[1]) @ ps[2].T + ps[3]).pow(2).sum() \
            + (torch.tanh(x @ ps[4].T + ps[5]) @ ps[6].T + ps[7]).pow(2).sum() * (i != drop_grad_at)
        if i == drop_grad_at:  # the critic gets no gradient: torch must step the others itself
            loss = (torch.tanh(x @ ps[0].T + ps[1]) @ ps[2].T + ps[3]).pow(2).sum()
        step.step({"loss_test": loss})
        norms.append(step.last_grad_norms["all"].clone())
    return [p.detach().clone() for p in params["all"]], step.state_dict(), norms


def _assert_same(a, b) -> None:
    (pa, sa, na), (pb, sb, nb) = a, b
    assert all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(na, nb, strict=True))
    for key, state in sb["all"]["state"].items():
        assert state.keys() == sa["all"]["state"][key].keys()
        for k, v in state.items():
            assert torch.equal(sa["all"]["state"][key][k], v), (key, k)
            assert sa["all"]["state"][key][k].dtype == v.dtype


def test_a_single_adam_group_takes_the_flat_step():
    step = OptimizerStep(_params(), "adam", lr=1e-3, max_grad_norm=0.5)
    assert step._flat is not None
    for p in step.params["all"]:
        p.grad = torch.ones_like(p)
    assert step._flat.step()
    # the optimiser's state is views of the flat buffers: one state, two ways to read it
    state = step.optimizers["all"].state[step.params["all"][0]]
    assert state["exp_avg"].data_ptr() == step._flat.exp_avg.data_ptr()


def test_flat_steps_equal_torchs_foreach_step_and_clip_bit_for_bit():
    _assert_same(_train(flat=True), _train(flat=False))


def test_a_resumed_flat_optimizer_continues_identically():
    _assert_same(_train(flat=True, resume_at=17), _train(flat=False))


def test_a_missing_gradient_falls_back_to_torch_on_the_same_state():
    _assert_same(_train(flat=True, drop_grad_at=9), _train(flat=False, drop_grad_at=9))


def test_what_changes_the_arithmetic_keeps_torchs_own_step():
    assert OptimizerStep(_params(), "adam", weight_decay=0.01)._flat is None
    assert OptimizerStep(_params(), "adam", impl="fused")._flat is None
    assert OptimizerStep(_params(), "adam", impl="for_loop")._flat is None
    assert OptimizerStep(_params(), "rmsprop")._flat is None
    two = {"actor": _params()["all"][:4], "critic": _params()["all"][4:]}
    assert OptimizerStep(two, "adam")._flat is None  # several groups: adam_together's joint step
