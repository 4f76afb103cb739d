"""PPOLoss: values at the collecting policy, clipping, value loss, gradient direction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlrun.algos.ppo import PPOLoss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.specs import EnvSpec
from rlrun.modules.models import actor_critic

DISCRETE = EnvSpec((4,), np.dtype(np.float32), True, 3)
CONTINUOUS = EnvSpec((4,), np.dtype(np.float32), False, 2)


def collected_batch(models: Policy, n: int = 32, seed: int = 0) -> TensorDict:
    """A batch as the collector and the GAE hook leave it, from the current policy."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=g)
    with torch.no_grad():
        out = models.actor.explore(obs)
    return TensorDict({"observation": obs, **out,
                       "advantage": torch.randn(n, generator=g) + 3.0,
                       "value_target": torch.randn(n, generator=g)}, batch_size=[n])


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS], ids=["categorical", "normal"])
def test_ratio_is_one_at_the_collecting_policy(spec):
    torch.manual_seed(0)
    models = actor_critic(spec, hidden=[16])
    td = collected_batch(models)
    out = PPOLoss(models, normalize_advantage=False)(td)
    assert out["clip_fraction"].item() == 0.0
    assert abs(out["approx_kl"].item()) < 1e-6
    # ratio 1: the surrogate is -mean(advantage), not clipped
    torch.testing.assert_close(out["loss_objective"], -td["advantage"].mean())


def test_loss_objective_at_ratio_one_uses_normalised_advantage():
    torch.manual_seed(0)
    models = actor_critic(DISCRETE, hidden=[16])
    td = collected_batch(models)
    adv = td["advantage"]
    normalised = (adv - adv.mean()) / (adv.std() + 1e-8)
    out = PPOLoss(models, normalize_advantage=True)(td)
    torch.testing.assert_close(out["loss_objective"], -normalised.mean(), atol=1e-6, rtol=0)
    assert abs(adv.mean().item()) > 1  # without normalisation the loss would be about -3
    # gradient at ratio 1: d/dθ -mean(A_n * exp(logπ - logπ_old)) = -mean(A_n * dlogπ/dθ)
    out["loss_objective"].backward()
    grad = [p.grad.clone() for p in models.actor.parameters()]
    models.zero_grad()
    (-(normalised * models.actor.dist(td["observation"]).log_prob(td["action"])).mean()).backward()
    for g, p in zip(grad, models.actor.parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-6, rtol=1e-5)


def test_value_loss_is_half_mse_times_critic_coef_and_entropy_term():
    torch.manual_seed(0)
    models = actor_critic(CONTINUOUS, hidden=[16])
    td = collected_batch(models)
    out = PPOLoss(models, critic_coef=0.7, entropy_coef=0.01)(td)
    value = models.critic(td["observation"])
    torch.testing.assert_close(out["loss_critic"], 0.7 * 0.5 * ((value - td["value_target"]) ** 2).mean())
    entropy = models.actor.dist(td["observation"]).entropy().mean()
    torch.testing.assert_close(out["entropy"], entropy)
    torch.testing.assert_close(out["loss_entropy"], -0.01 * entropy)


def test_smooth_l1_value_loss():
    torch.manual_seed(0)
    models = actor_critic(CONTINUOUS, hidden=[16])
    td = collected_batch(models)
    td["value_target"] = td["value_target"] * 10
    out = PPOLoss(models, critic_coef=1.0, critic_loss="smooth_l1")(td)
    err = (models.critic(td["observation"]) - td["value_target"]).abs()
    expected = torch.where(err < 1, 0.5 * err**2, err - 0.5).mean()
    torch.testing.assert_close(out["loss_critic"], expected)


def test_ratio_outside_clip_range_is_clipped_with_no_actor_gradient():
    torch.manual_seed(0)
    models = actor_critic(DISCRETE, hidden=[16])
    td = collected_batch(models)
    td["sample_log_prob"] = td["sample_log_prob"] - 1.0  # ratio e > 1 + eps everywhere
    td["advantage"] = td["advantage"].abs() + 0.1  # positive: the clipped branch is the min
    out = PPOLoss(models, clip_epsilon=0.2, normalize_advantage=False)(td)
    assert out["clip_fraction"].item() == 1.0
    torch.testing.assert_close(out["approx_kl"], torch.tensor((np.e - 1) - 1.0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["loss_objective"], -(1.2 * td["advantage"]).mean())
    out["loss_objective"].backward()
    assert all(p.grad is None or (p.grad == 0).all() for p in models.actor.parameters())


@pytest.mark.parametrize(("sign", "spec"), [(1.0, DISCRETE), (-1.0, DISCRETE), (1.0, CONTINUOUS)])
def test_gradient_step_moves_log_prob_with_the_advantage_sign(sign, spec):
    torch.manual_seed(0)
    models = actor_critic(spec, hidden=[16])
    obs = torch.randn(1, 4).expand(8, 4)
    with torch.no_grad():
        first = models.actor.explore(obs[:1])["action"]
        action = first.expand(8, *first.shape[1:])
        old = models.actor.dist(obs).log_prob(action)
    td = TensorDict({"observation": obs, "action": action, "sample_log_prob": old,
                     "advantage": torch.full((8,), sign), "value_target": torch.zeros(8)}, batch_size=[8])
    loss = PPOLoss(models, normalize_advantage=False)
    opt = torch.optim.SGD(models.actor.parameters(), lr=0.05)
    loss(td)["loss_objective"].backward()
    opt.step()
    with torch.no_grad():
        new = models.actor.dist(obs).log_prob(action)
    assert ((new - old) * sign > 0).all()


def test_factory_validates_critic_loss_and_critic():
    torch.manual_seed(0)
    models = actor_critic(DISCRETE, hidden=[8])
    with pytest.raises(ConfigError) as info:
        PPOLoss(models, critic_loss="l1")
    assert info.value.key == "loss.critic_loss"
    with pytest.raises(ConfigError) as info:
        PPOLoss(Policy(models.actor))
    assert info.value.key == "model.name"
    groups = PPOLoss(models).param_groups()
    assert list(groups) == ["all"] and groups["all"] == list(models.parameters())
