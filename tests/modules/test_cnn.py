"""CNN models: Nature trunk shapes, uint8 input and /255 scaling, shared trunk, cache, Q-network."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlrun.algos.ppo import PPOLoss
from rlrun.core.errors import ConfigError
from rlrun.core.registry import build
from rlrun.core.specs import EnvSpec
from rlrun.modules.cnn import NatureCNN, actor_critic_cnn, qnet_cnn
from rlrun.modules.networks import target_copy

SPEC = EnvSpec((4, 84, 84), np.dtype(np.uint8), True, 6)


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    # One thread, as rlrun runs (config threads: 1): on a shared 2-core box more threads thrash.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


def pixels(*batch: int, shape: tuple[int, ...] = (4, 84, 84)) -> torch.Tensor:
    return torch.randint(0, 256, (*batch, *shape), dtype=torch.uint8)


def count_trunk_calls(trunk: NatureCNN) -> list[int]:
    calls = [0]
    trunk.conv.register_forward_pre_hook(lambda m, a: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_nature_architecture():
    trunk = NatureCNN((4, 84, 84))
    convs = [m for m in trunk.conv if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    assert (trunk.fc[0].in_features, trunk.fc[0].out_features) == (3136, 512)
    assert trunk(pixels(3)).shape == (3, 512)


def test_actor_and_critic_keep_the_mlp_interface_with_any_batch_dims():
    models = actor_critic_cnn(SPEC)
    actor, critic = models.actor, models.critic
    obs = pixels(5)
    out = actor.explore(obs)
    assert set(out) == {"action", "sample_log_prob"}
    assert out["action"].shape == (5,) and out["action"].dtype == torch.long
    assert out["sample_log_prob"].shape == (5,)
    assert actor.act(obs).shape == (5,) and actor.dist(obs).logits.shape == (5, 6)
    assert critic(obs).shape == (5,)
    # The GAE hook calls the critic on whole [num_envs, T] batches.
    assert critic(pixels(2, 3)).shape == (2, 3) and actor.dist(pixels(2, 3)).logits.shape == (2, 3, 6)


def test_uint8_pixels_are_scaled_by_1_over_255_inside_the_model():
    trunk = NatureCNN((4, 84, 84))
    seen = []
    trunk.conv[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    obs = pixels(2)
    out = trunk(obs)
    assert seen[0].dtype == torch.float32
    torch.testing.assert_close(seen[0], obs.float() / 255)
    torch.testing.assert_close(out, trunk(obs.float()))  # raw float pixels give the same features


def test_rgb_stacks_fold_into_channels():
    trunk = NatureCNN((4, 84, 84, 3))
    assert trunk.conv[0].in_channels == 12
    assert trunk(pixels(2, shape=(4, 84, 84, 3))).shape == (2, 512)


def test_actor_and_critic_share_one_trunk():
    models = actor_critic_cnn(SPEC)
    assert models.actor.trunk is models.critic.trunk
    actor_params = {id(p) for p in models.actor.trunk.parameters()}
    assert actor_params == {id(p) for p in models.critic.trunk.parameters()}
    # Counted once, so the optimiser updates the shared trunk once per step.
    n_trunk = sum(p.numel() for p in models.actor.trunk.parameters())
    n_heads = sum(p.numel() for p in (*models.actor.net.parameters(), *models.critic.net.parameters()))
    assert sum(p.numel() for p in models.parameters()) == n_trunk + n_heads
    separate = actor_critic_cnn(SPEC, shared=False)
    assert separate.actor.trunk is not separate.critic.trunk


def test_gradients_flow_from_each_head_into_the_trunk():
    models = actor_critic_cnn(SPEC)
    actor, critic, trunk = models.actor, models.critic, models.actor.trunk
    obs = pixels(4)
    actor.dist(obs).log_prob(torch.arange(4)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in trunk.parameters())
    assert all(p.grad is None for p in critic.net.parameters())
    models.zero_grad(set_to_none=True)
    critic(pixels(4)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in trunk.parameters())
    assert all(p.grad is None for p in actor.net.parameters())


def test_orthogonal_init_gains():
    models = actor_critic_cnn(SPEC)
    w_pi, w_v = models.actor.net.weight, models.critic.net.weight
    torch.testing.assert_close(w_pi @ w_pi.T, 0.01**2 * torch.eye(6), atol=1e-6, rtol=0)
    torch.testing.assert_close(w_v @ w_v.T, torch.ones(1, 1))
    fc = models.actor.trunk.fc[0].weight  # [512, 3136]: orthogonal rows with gain sqrt(2)
    torch.testing.assert_close(fc @ fc.T, 2 * torch.eye(512), atol=1e-4, rtol=0)
    assert all((m.bias == 0).all() for m in models.modules() if hasattr(m, "bias") and m.bias is not None)


def test_ppo_loss_runs_the_shared_trunk_once_per_minibatch_with_the_same_gradients():
    models = actor_critic_cnn(SPEC)
    calls = count_trunk_calls(models.actor.trunk)
    td = TensorDict({"observation": pixels(8), "action": torch.randint(6, (8,)),
                     "sample_log_prob": torch.full((8,), -1.8), "advantage": torch.randn(8),
                     "value_target": torch.randn(8)}, batch_size=[8])
    loss = PPOLoss(models, entropy_coef=0.01)
    out = loss(td)
    sum(v for k, v in out.items() if k.startswith("loss_")).backward()
    assert calls[0] == 1
    cached = [p.grad.clone() for p in models.parameters()]
    models.zero_grad(set_to_none=True)
    models.actor.trunk._cache = None
    actor, critic = models.actor, models.critic  # the same loss, the trunk run twice
    dist = actor.dist(td["observation"].clone())
    value = critic(td["observation"].clone())
    ratio = (dist.log_prob(td["action"]) - td["sample_log_prob"]).exp()
    adv = (td["advantage"] - td["advantage"].mean()) / (td["advantage"].std() + 1e-8)
    obj = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    (obj + 0.25 * (value - td["value_target"]).pow(2).mean() - 0.01 * dist.entropy().mean()).backward()
    assert calls[0] == 3
    for a, b in zip(cached, (p.grad for p in models.parameters())):
        torch.testing.assert_close(a, b)


def test_cache_is_not_reused_when_it_could_be_stale():
    models = actor_critic_cnn(SPEC)
    actor, critic, trunk = models.actor, models.critic, models.actor.trunk
    calls = count_trunk_calls(trunk)
    obs = pixels(2)

    def trunk_runs(*steps) -> int:
        trunk._cache, before = None, calls[0]
        for step in steps:
            step()
        return calls[0] - before

    def step_weights():
        with torch.no_grad():
            trunk.fc[0].weight.add_(1e-3)  # an optimiser step

    def no_grad_dist():
        with torch.no_grad():
            actor.dist(obs)

    def act_in_inference_mode():
        with torch.inference_mode():  # the collector acting
            x = pixels(2)
            actor.explore(x), critic(x)

    assert trunk_runs(lambda: actor.dist(obs), lambda: critic(obs)) == 1
    assert trunk_runs(lambda: critic(obs), lambda: actor.dist(obs)) == 1
    # The same head twice: its first graph may already be consumed by a backward pass.
    assert trunk_runs(lambda: actor.dist(obs), lambda: actor.dist(obs)) == 2
    assert trunk_runs(lambda: actor.dist(obs), lambda: critic(obs), lambda: critic(obs)) == 2  # once
    assert trunk_runs(lambda: actor.dist(obs), step_weights, lambda: critic(obs)) == 2
    assert trunk_runs(lambda: actor.dist(obs), lambda: obs.add_(1), lambda: critic(obs)) == 2
    assert trunk_runs(lambda: actor.dist(obs), lambda: critic(obs.clone())) == 2
    assert trunk_runs(no_grad_dist, lambda: critic(obs).sum().backward()) == 2
    assert trunk_runs(act_in_inference_mode) == 2


def test_models_deepcopy_and_pickle_after_a_forward_pass():
    models = actor_critic_cnn(SPEC)
    models.actor.dist(pixels(2))  # leaves a cache entry holding a graph
    clone = copy.deepcopy(models)
    assert clone.actor.trunk is clone.critic.trunk and clone.actor.trunk._cache is None
    restored = pickle.loads(pickle.dumps(models))
    obs = pixels(2)
    torch.testing.assert_close(restored.critic(obs), models.critic(obs))


def test_no_grad_batches_run_in_chunks_with_the_same_result():
    trunk = NatureCNN((4, 84, 84), chunk=4)
    obs = pixels(3, 5)
    with torch.no_grad():
        chunked = trunk(obs)
    torch.testing.assert_close(chunked, trunk(obs).detach())
    assert chunked.shape == (3, 5, 512)


def test_qnet_cnn_gives_q_values_per_action_and_acts_greedily():
    models = qnet_cnn(SPEC)
    obs = pixels(5)
    q = models.critic(obs)
    assert q.shape == (5, 6)
    assert torch.equal(models.actor.act(obs), q.argmax(-1))
    assert models.critic(pixels(2, 3)).shape == (2, 3, 6)
    n = sum(p.numel() for p in models.critic.parameters())
    assert sum(p.numel() for p in models.parameters()) == n  # registered once, as critic
    target = target_copy(models.critic)
    torch.testing.assert_close(target(obs), q.detach())


def test_registered_and_checked():
    models = build("model", {"name": "actor_critic_cnn", "features": 256}, spec=SPEC)
    assert models.actor.trunk.fc[0].out_features == 256
    assert build("model", {"name": "qnet_cnn"}, spec=SPEC).critic(pixels(1)).shape == (1, 6)
    with pytest.raises(ConfigError, match="image observations"):
        actor_critic_cnn(EnvSpec((8,), np.dtype(np.float32), True, 2))
    with pytest.raises(ConfigError, match="discrete"):
        qnet_cnn(EnvSpec((4, 84, 84), np.dtype(np.uint8), False, 2))


def test_the_shared_trunk_compiles_after_an_eager_call_left_its_cache_behind():
    """compile=true on PPO Atari (found by ``python -m rlrun.benchmarks compiled``): the GAE hook's
    eager value pass left the trunk's one-entry cache holding a weak reference to its batch; once
    that batch was gone dynamo guarded the compiled loss on it (``TENSOR_MATCH`` of None) and the
    compile failed, so the loss ran eager for the rest of the run."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    spec = EnvSpec((4, 84, 84), np.dtype(np.uint8), True, 6)
    loss = PPOLoss(actor_critic_cnn(spec))
    trunk = loss.policy.actor.trunk if hasattr(loss.policy.actor, "trunk") else None
    assert isinstance(trunk, NatureCNN)

    def batch(n: int) -> TensorDict:
        return TensorDict({"observation": pixels(n), "action": torch.randint(6, (n,)),
                           "sample_log_prob": torch.full((n,), -1.8), "advantage": torch.randn(n),
                           "value_target": torch.randn(n)}, batch_size=[n])

    counter = CompileCounter()
    compiled = torch.compile(loss, backend=counter)
    try:
        for n in (8, 8, 8):
            with torch.no_grad():  # the GAE hook's value pass: the critic alone, eagerly
                stale = pixels(n + 1)
                trunk.shared(stale, "critic")
            del stale  # the cache's weak reference is now dead
            losses = compiled(batch(n))
            assert all(torch.isfinite(v).all() for v in losses.values())
        assert counter.frame_count == 1  # compiled once, not once per call nor failed
    finally:
        torch._dynamo.reset()
