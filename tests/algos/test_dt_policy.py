"""DTPolicy, the DT loss wrappers and DatasetSlices (rlrun/algos/dt.py) without a run: context
bookkeeping per row, train/eval mode, online DT's sampled action, optimiser groups, error texts."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from rlrun.algos.dt import DatasetSlices, DTActionLoss, DTPolicy, ODTActionLoss, decision_transformer
from rlrun.core.errors import ConfigError
from rlrun.core.specs import EnvSpec
from rlrun.modules.transformer import RollingContext

SPEC = EnvSpec((3,), np.float32, False, 2)


def tiny(head: str = "deterministic", **kw) -> DTPolicy:
    torch.manual_seed(0)
    return decision_transformer(SPEC, hidden=8, n_layers=1, max_timestep=50, head=head,
                                normalize_observations=False, **kw)


def test_resetting_some_rows_keeps_the_context_of_the_others():
    policy = tiny(eval_context=3, target_return=10.0)
    obs = torch.ones(2, 3)
    policy.act(obs)
    policy.record(torch.zeros(2, 2), torch.tensor([1.0, 2.0]), torch.tensor([False, False]))
    policy.act(obs)
    ctx = policy._context
    policy.reset_context(torch.tensor([True, False]))  # sub-env 0 starts a new episode
    assert policy._context is ctx
    assert ctx.mask.tolist() == [[False, False, False], [False, True, True]]
    assert ctx.timestep[1].tolist() == [0, 0, 1]
    policy.act(obs)
    assert ctx.return_to_go[:, -1, 0].tolist() == [10.0, 8.0]  # row 0 at the target again, row 1 10 - 2
    policy.reset_context()  # before an evaluation: every row, sized afresh on the next act
    assert policy._context is None


def test_acting_during_training_leaves_the_model_in_training_mode():
    policy = tiny(eval_context=2, dropout=0.5)
    policy.model.train()
    policy.act(torch.zeros(2, 3))
    assert policy.model.training  # the evaluator acts between updates; dropout must stay on for them
    policy.model.eval()
    policy.act(torch.zeros(2, 3))
    assert not policy.model.training
    policy.model.train()
    actions = []
    for _ in range(2):  # the same fresh context twice
        policy.reset_context()
        actions.append(policy.act(torch.ones(2, 3)))
    assert torch.equal(actions[0], actions[1])  # no dropout when acting, even between updates


class FixedGaussianModel(nn.Module):
    """Three action dims; at the newest step mu = 0.3 and log_std = log 0.5, at earlier steps
    mu = 5 and log_std = 0 (so an action read from another step is told apart)."""

    obs_dim, action_dim, head = 3, 3, "tanh_normal"

    def forward(self, return_to_go, observation, action, timestep, mask):
        n, k = observation.shape[:2]
        out = torch.cat([torch.full((n, k, 3), 5.0), torch.zeros(n, k, 3)], -1)
        out[:, -1] = torch.tensor([0.3] * 3 + [math.log(0.5)] * 3)
        return out


def test_online_dt_samples_a_squashed_gaussian_action_for_the_newest_step():
    policy = DTPolicy(FixedGaussianModel(), None, target_return=1.0, rtg_scale=1.0, eval_context=2)
    ctx = RollingContext(4, 3, 3, 3, 1.0)
    obs = torch.arange(12.0).reshape(4, 3)
    torch.manual_seed(5)
    action = policy.sample_action(obs, ctx)
    torch.manual_seed(5)
    noise = torch.randn(4, 3)
    torch.testing.assert_close(action, torch.tanh(0.3 + 0.5 * noise))
    assert torch.equal(ctx.observation[:, -1], obs) and ctx.mask[:, -1].all()  # the step is in the context


def test_dt_losses_name_their_optimiser_groups_and_refuse_the_wrong_head():
    policy = tiny()
    loss = DTActionLoss(policy, SPEC, gamma=1.0)
    groups = loss.param_groups()
    assert list(groups) == ["model"]  # the optim config's group key
    assert groups["model"] == list(policy.model.parameters())
    with pytest.raises(TypeError, match="DTActionLoss has no target networks"):
        loss.update_targets()
    with pytest.raises(ConfigError) as info:
        DTActionLoss(tiny("tanh_normal"), SPEC, gamma=1.0)
    assert str(info.value) == ("model.head: loss=dt needs a deterministic head, not tanh_normal\n"
                               "  fix: set model.head=deterministic")
    with pytest.raises(ConfigError) as info:
        ODTActionLoss(policy, SPEC, gamma=1.0)
    assert str(info.value) == ("model.head: loss=odt needs a tanh_normal head, not deterministic\n"
                               "  fix: set model.head=tanh_normal")


class RecordingSampler:
    def __init__(self):
        self.reward = torch.zeros(7)
        self.asked, self.loaded = [], None

    def sample(self, batch_size):
        self.asked.append(batch_size)
        return batch_size

    def state_dict(self):
        return {"generator": "state"}

    def load_state_dict(self, state):
        self.loaded = state


def test_dataset_slices_sample_the_configured_batch_and_save_only_the_sampler():
    sampler = RecordingSampler()
    slices = DatasetSlices(sampler, batch_size=4.0)
    slices.sample()
    slices.sample(9)
    assert sampler.asked == [4, 9] and isinstance(sampler.asked[0], int)
    assert len(slices) == 7  # dataset steps
    assert slices.saved_nbytes() == 0  # the data is the dataset on disk, not in the checkpoint
    assert slices.state_dict() == {"generator": "state"}
    slices.load_state_dict({"generator": "other"})
    assert sampler.loaded == {"generator": "other"}



def test_odt_loss_settings_groups_and_errors():
    policy = tiny("tanh_normal")
    default = ODTActionLoss(policy, SPEC, gamma=1.0)
    assert math.exp(default.log_temperature.item()) == pytest.approx(0.1)  # conf/loss/odt.yaml's
    loss = ODTActionLoss(policy, SPEC, gamma=1.0, init_temperature=0.2, target_entropy=-0.5)
    assert loss.target_entropy == -0.5
    assert math.exp(loss.log_temperature.item()) == pytest.approx(0.2)
    assert ODTActionLoss(policy, SPEC, gamma=1.0).target_entropy == -2.0  # null: -action_dim (Zheng et al.)
    groups = loss.param_groups()
    assert list(groups) == ["model", "temperature"]  # the optim config's group keys
    assert groups["model"] == list(policy.model.parameters())
    assert groups["temperature"] == [loss.log_temperature]
    with pytest.raises(ConfigError) as info:
        ODTActionLoss(policy, SPEC, gamma=1.0, init_temperature=0.0)  # log 0: the temperature could not learn
    assert str(info.value) == "loss.init_temperature: must be > 0, got 0.0\n  fix: e.g. 0.1"


def test_dt_losses_refuse_a_policy_that_is_not_a_decision_transformer():
    from rlrun.modules.models import actor_critic

    for make, name in ((DTActionLoss, "dt"), (ODTActionLoss, "odt")):
        with pytest.raises(ConfigError) as info:
            make(actor_critic(SPEC, hidden=[4]), SPEC, gamma=1.0)
        assert str(info.value) == (f"model: loss={name} trains a Decision Transformer, not Policy\n"
                                   "  fix: use model=dt")


def test_dataset_actions_map_into_the_unit_box_clamped_and_in_float32():
    from rlrun.algos.dt import unit_actions

    box = SimpleNamespace(low=np.array([-2.0, 0.0]), high=np.array([2.0, 10.0]))  # float64 bounds
    data = SimpleNamespace(action_space=box, action=torch.tensor([[1.0, 5.0], [-2.5, 10.5], [2.0, 0.0]]))
    mapped = unit_actions(data)
    # 2 (a - low) / (high - low) - 1, then clamped: stored actions a hair outside the box stay in it
    assert mapped.tolist() == [[0.5, 0.0], [-1.0, 1.0], [1.0, -1.0]]
    assert mapped.dtype == torch.float32
    half_open = SimpleNamespace(low=np.array([-2.0, 0.0]), high=np.array([2.0, np.inf]))
    raw = unit_actions(SimpleNamespace(action_space=half_open, action=data.action))
    assert torch.equal(raw, data.action)  # an unbounded dimension: left in the env's units
