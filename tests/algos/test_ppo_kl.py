"""PPO-KL: the penalised surrogate and the paper's coefficient rule, by hand."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlrun.algos.ppo_kl import AdaptKLCoef, PPOKLLoss
from rlrun.core.policy import Policy


class TwoActionActor(nn.Module):
    """Categorical over 2 actions with logits (0, w): pi(1) = sigmoid(w), for every state."""

    head = "categorical"

    def __init__(self, w: float):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))

    def dist(self, obs):
        logits = torch.stack([torch.zeros(obs.shape[0]), self.w.expand(obs.shape[0])], -1)
        return torch.distributions.Categorical(logits=logits)


class ConstCritic(nn.Module):
    def __init__(self, v: float):
        super().__init__()
        self.v = nn.Parameter(torch.tensor(v))

    def forward(self, obs):
        return self.v.expand(obs.shape[0])


def test_loss_terms_by_hand():
    w, v = 0.3, 0.5
    loss = PPOKLLoss(Policy(TwoActionActor(w), ConstCritic(v)), init_kl_coef=2.0, entropy_coef=0.1,
                     critic_coef=0.5, normalize_advantage=False)
    old = [math.log(0.6), math.log(0.5)]  # behaviour log-probs of the actions taken
    td = TensorDict({"observation": torch.zeros(2, 1), "action": torch.tensor([1, 0]),
                     "sample_log_prob": torch.tensor(old), "advantage": torch.tensor([1.0, -2.0]),
                     "value_target": torch.tensor([1.0, 0.0])}, batch_size=[2])
    out = loss(td)
    p1 = 1 / (1 + math.exp(-w))
    new = [math.log(p1), math.log(1 - p1)]
    r = [math.exp(n - o) for n, o in zip(new, old)]
    kl = sum((ri - 1) - math.log(ri) for ri in r) / 2
    entropy = -(p1 * math.log(p1) + (1 - p1) * math.log(1 - p1))
    assert math.isclose(out["loss_objective"].item(), -(r[0] * 1.0 + r[1] * -2.0) / 2, rel_tol=1e-6)
    assert math.isclose(out["loss_kl"].item(), 2.0 * kl, rel_tol=1e-5)
    assert math.isclose(out["loss_critic"].item(), 0.5 * 0.5 * ((v - 1) ** 2 + v ** 2) / 2, rel_tol=1e-6)
    assert math.isclose(out["loss_entropy"].item(), -0.1 * entropy, rel_tol=1e-6)


def test_kl_penalty_is_zero_and_flat_at_the_behaviour_policy():
    w = 0.7
    loss = PPOKLLoss(Policy(TwoActionActor(w), ConstCritic(0.0)), normalize_advantage=False)
    p1 = 1 / (1 + math.exp(-w))
    td = TensorDict({"observation": torch.zeros(2, 1), "action": torch.tensor([1, 0]),
                     "sample_log_prob": torch.tensor([math.log(p1), math.log(1 - p1)]),
                     "advantage": torch.zeros(2), "value_target": torch.zeros(2)}, batch_size=[2])
    out = loss(td)
    out["loss_kl"].backward()
    assert abs(out["kl"].item()) < 1e-7 and abs(loss.policy.actor.w.grad.item()) < 1e-6


def test_coefficient_rule_and_hook_use_the_last_epochs_mean_kl():
    loss = PPOKLLoss(Policy(TwoActionActor(0.0), ConstCritic(0.0)), kl_target=0.01, init_kl_coef=1.0)
    hook = AdaptKLCoef()
    trainer = type("T", (), {"loss": loss})()
    # means 0.5 and 0.03 > 1.5 x 0.01: doubles; 0.003 < 0.01 / 1.5: halves; 0.01: stays
    for epoch_kls, expected in [([0.5, 0.5], 2.0), ([0.05, 0.01], 4.0), ([0.001, 0.005], 2.0),
                                ([0.012, 0.008], 2.0)]:
        hook.pre_epoch(trainer, None)
        hook.post_loss(trainer, None, {"kl": torch.tensor(9.0)})  # an earlier epoch: not counted
        hook.pre_epoch(trainer, None)
        for kl in epoch_kls:
            hook.post_loss(trainer, None, {"kl": torch.tensor(kl)})
        hook.post_steps(trainer)
        assert loss.kl_coef == expected
    # the coefficient is saved and restored with the loss
    state = loss.state_dict()
    other = PPOKLLoss(Policy(TwoActionActor(0.0), ConstCritic(0.0)), init_kl_coef=5.0)
    other.load_state_dict(state)
    assert other.kl_coef == 2.0


def kl_batch(advantage):
    n = len(advantage)
    return TensorDict({"observation": torch.zeros(n, 1), "action": torch.tensor([1, 0, 1][:n]),
                       "sample_log_prob": torch.tensor([math.log(0.6), math.log(0.5), math.log(0.4)][:n]),
                       "advantage": torch.tensor(advantage),
                       "value_target": torch.tensor([1.0, 0.0, 2.0][:n])},
                      batch_size=[n])


def test_the_config_leaves_the_defaults_to_the_loss_paper_values_by_hand():
    # conf/algo/ppo_kl.yaml sets neither entropy_coef, critic_coef nor normalize_advantage
    w, v = 0.3, 0.5
    loss = PPOKLLoss(Policy(TwoActionActor(w), ConstCritic(v)))
    out = loss(kl_batch([1.0, -2.0, 4.0]))
    p1 = 1 / (1 + math.exp(-w))
    r = [p1 / 0.6, (1 - p1) / 0.5, p1 / 0.4]
    adv = [1.0, -2.0, 4.0]
    mean = sum(adv) / 3
    std = math.sqrt(sum((a - mean) ** 2 for a in adv) / 2)  # the sample std
    normed = [(a - mean) / std for a in adv]
    kl = sum((ri - 1) - math.log(ri) for ri in r) / 3
    entropy = -(p1 * math.log(p1) + (1 - p1) * math.log(1 - p1))
    objective = -sum(ri * a for ri, a in zip(r, normed)) / 3
    assert math.isclose(out["loss_objective"].item(), objective, rel_tol=1e-5)
    assert math.isclose(out["loss_kl"].item(), 1.0 * kl, rel_tol=1e-5)  # beta starts at 1
    critic = 0.5 * 0.5 * ((v - 1) ** 2 + v ** 2 + (v - 2) ** 2) / 3
    assert math.isclose(out["loss_critic"].item(), critic, rel_tol=1e-6)
    assert out["loss_entropy"].item() == 0.0  # no entropy bonus unless asked
    # the logged diagnostics, under the names the metrics use
    assert set(out) == {"loss_objective", "loss_kl", "loss_critic", "loss_entropy", "kl", "kl_coef",
                        "entropy"}
    assert out["kl_coef"].item() == 1.0 and math.isclose(out["entropy"].item(), entropy, rel_tol=1e-6)
    assert math.isclose(out["kl"].item(), kl, rel_tol=1e-5)
    # the target KL defaults to the paper's 0.01: 0.012 keeps beta, 0.016 doubles it
    loss.adapt(0.012)
    assert loss.kl_coef == 1.0
    loss.adapt(0.016)
    assert loss.kl_coef == 2.0


@pytest.mark.parametrize(("advantage", "normalised"), [([1.0, -2.0], [1 / math.sqrt(2), -1 / math.sqrt(2)]),
                                                       ([3.0], [3.0])])
def test_advantages_are_standardised_from_two_samples_on(advantage, normalised):
    # two samples: mean -0.5, sample std 1.5 * sqrt(2); one sample has no std: left as it is
    w = 0.3
    loss = PPOKLLoss(Policy(TwoActionActor(w), ConstCritic(0.0)), normalize_advantage=True)
    out = loss(kl_batch(advantage))
    p1 = 1 / (1 + math.exp(-w))
    r = [p1 / 0.6, (1 - p1) / 0.5]
    expected = -sum(ri * a for ri, a in zip(r, normalised)) / len(advantage)
    assert math.isclose(out["loss_objective"].item(), expected, rel_tol=1e-5)


def test_coefficient_rule_at_its_thresholds():
    loss = PPOKLLoss(Policy(TwoActionActor(0.0), ConstCritic(0.0)), kl_target=0.25, init_kl_coef=1.0)
    loss.adapt(1.5 * 0.25)  # exactly 1.5 x target: inside the band, beta stays
    assert loss.kl_coef == 1.0
    loss.adapt(0.5)  # above 1.5 x target (but below 2.5 x): doubles
    assert loss.kl_coef == 2.0
    loss.adapt(0.25 / 1.5)  # exactly target / 1.5: stays
    assert loss.kl_coef == 2.0
    loss.adapt(0.15)  # below target / 1.5 (but above target / 2.5): halves
    assert loss.kl_coef == 1.0
    loss.adapt(0.15)
    assert loss.kl_coef == 0.5


def test_hook_collects_without_a_pre_epoch_and_adapts_once_per_batch():
    # a loop with no epochs (one pass over each batch) never calls pre_epoch
    loss = PPOKLLoss(Policy(TwoActionActor(0.0), ConstCritic(0.0)), kl_target=0.01, init_kl_coef=1.0)
    hook = AdaptKLCoef()
    trainer = type("T", (), {"loss": loss})()
    for _ in range(2):
        hook.post_loss(trainer, None, {"kl": torch.tensor(1.0)})
        hook.post_steps(trainer)
    assert loss.kl_coef == 4.0
    hook.post_steps(trainer)  # a batch without updates: no KL measured, beta stays
    assert loss.kl_coef == 4.0


def test_the_kl_coefficient_is_a_buffer_that_old_checkpoints_still_load():
    # beta lives once, in the loss, as a tensor: saved with its weights, moved with them, read by a
    # compiled loss without recompiling; a checkpoint from before (extra state) still restores it
    loss = PPOKLLoss(Policy(TwoActionActor(0.0), ConstCritic(0.0)), kl_target=0.01, init_kl_coef=1.0)
    assert "kl_coef" in dict(loss.named_buffers()) and loss.state_dict()["kl_coef"].item() == 1.0
    loss.adapt(1.0)
    assert PPOKLLoss(Policy(TwoActionActor(0.0), ConstCritic(0.0))).state_dict()["kl_coef"].item() == 1.0
    fresh = PPOKLLoss(Policy(TwoActionActor(0.0), ConstCritic(0.0)))
    fresh.load_state_dict(loss.state_dict())
    assert fresh.kl_coef.item() == 2.0
    old = {k: v for k, v in loss.state_dict().items() if k != "kl_coef"}
    old["_extra_state"] = {"kl_coef": 4.0}
    fresh.load_state_dict(old)
    assert fresh.kl_coef.item() == 4.0
