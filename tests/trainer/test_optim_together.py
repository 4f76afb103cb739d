"""Several groups' Adams stepped as one multi-tensor step (issue #27): the same bits as each
optimiser's own foreach step, and a fallback wherever it would not be."""

from __future__ import annotations

import pytest
import torch

from rlrun.trainer.optim import OptimizerStep, adam_together, build_torch_optimizer, step_without_dynamo


def _groups() -> dict[str, list[torch.nn.Parameter]]:
    torch.manual_seed(0)
    return {"critic": list(torch.nn.Linear(5, 7).parameters()) + [torch.nn.Parameter(torch.randn(2, 1, 3))],
            "actor": list(torch.nn.Linear(3, 12).parameters()),
            "alpha": [torch.nn.Parameter(torch.tensor(0.3))]}


def _run(together: bool, steps: int = 12, impl: str = "auto") -> tuple[dict, dict]:
    groups = _groups()
    # foreach: per-group rates may differ; fused takes one
    lrs = {"critic": 1e-2, "actor": 3e-3, "alpha": 5e-2} if impl == "auto" else dict.fromkeys(groups, 1e-2)
    opts = {"impl": impl}
    optims = {g: build_torch_optimizer("adam", ps, lr=lrs[g], **opts) for g, ps in groups.items()}
    for i in range(steps):
        # the actor learns every other step (TD3's delay): its step count falls behind
        live = [g for g in groups if g != "actor" or i % 2 == 0]
        for g in groups:
            for p in groups[g]:
                p.grad = torch.randn_like(p) * (1 + i) if g in live else None
        opts_now = [optims[g] for g in live]
        if together:
            assert adam_together(opts_now)
        else:
            for o in opts_now:
                step_without_dynamo(o)
    return {g: [p.detach().clone() for p in ps] for g, ps in groups.items()}, \
        {g: o.state_dict() for g, o in optims.items()}


@pytest.mark.parametrize("impl", ["auto", "fused"])
def test_one_step_over_all_groups_equals_each_optimizers_own_bit_for_bit(impl):
    ours, our_state = _run(together=True, impl=impl)
    theirs, their_state = _run(together=False, impl=impl)
    for g in theirs:
        for a, b in zip(ours[g], theirs[g], strict=True):
            assert torch.equal(a, b), g
        for key, state in their_state[g]["state"].items():
            assert state.keys() == our_state[g]["state"][key].keys()
            for k, v in state.items():
                assert torch.equal(our_state[g]["state"][key][k], v), (g, key, k)
                assert our_state[g]["state"][key][k].dtype == v.dtype


def test_sac_groups_take_the_joint_step():
    """A loss with three groups (as SAC's) steps them in one go by default."""
    step = OptimizerStep(_groups(), "adam")
    assert step._adam_together
    for p in (p for ps in step.params.values() for p in ps):
        p.grad = torch.ones_like(p)
    assert adam_together(list(step.optimizers.values()))


def test_what_changes_the_arithmetic_keeps_torchs_own_step():
    groups = _groups()
    assert not OptimizerStep(groups, "adam", weight_decay=0.01)._adam_together
    assert OptimizerStep(groups, "adam", impl="fused")._adam_together
    fused_rates = OptimizerStep(groups, "adam", impl="fused", groups={"actor": {"lr": 1e-5}})
    for p in (p for ps in groups.values() for p in ps):
        p.grad = torch.ones_like(p)
    assert not adam_together(list(fused_rates.optimizers.values()))  # one rate per fused call
    assert not OptimizerStep(groups, "adam", impl="for_loop")._adam_together
    assert not OptimizerStep(groups, "rmsprop")._adam_together
    assert not OptimizerStep(groups, "adam", groups={"actor": {"eps": 1e-5}})._adam_together
    assert OptimizerStep(groups, "adam", groups={"actor": {"lr": 1e-5}})._adam_together


def test_a_group_with_some_gradients_missing_is_left_to_torch():
    groups = _groups()
    optims = [build_torch_optimizer("adam", ps) for ps in groups.values()]
    for p in (p for ps in groups.values() for p in ps):
        p.grad = torch.ones_like(p)
    groups["critic"][0].grad = None  # torch steps the others of its group only
    before = [p.detach().clone() for ps in groups.values() for p in ps]
    assert not adam_together(optims)
    after = [p.detach() for ps in groups.values() for p in ps]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert all(len(o.state) == 0 for o in optims)
