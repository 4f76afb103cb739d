"""Decision Transformer: causality, padding, shapes, DT/oDT losses by hand, a tiny overfit."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from rlrun.modules.transformer import DecisionTransformer, DTLoss, ODTLoss, tanh_normal_log_prob

OBS, ACT, K, B = 3, 2, 4, 2


@pytest.fixture(autouse=True)
def _one_thread():
    # One thread, as rlrun runs (config threads: 1): on a shared 2-core box more threads thrash.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def model(head="deterministic", **kw) -> DecisionTransformer:
    torch.manual_seed(0)
    m = DecisionTransformer(OBS, ACT, hidden=16, n_layers=2, n_heads=2, max_timestep=50, dropout=0.0,
                            head=head, **kw)
    return m.eval()


def inputs(seed=1, pad=(0, 2)):
    """A batch whose row b has ``pad[b]`` padded steps on the left."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, K, dtype=torch.bool)
    for b, p in enumerate(pad):
        mask[b, :p] = False
    return TensorDict({
        "return_to_go": torch.randn(B, K, 1, generator=g),
        "observation": torch.randn(B, K, OBS, generator=g),
        "action": torch.rand(B, K, ACT, generator=g) * 1.8 - 0.9,
        "timestep": torch.arange(K).repeat(B, 1) + 3,
        "mask": mask,
    }, batch_size=[B, K])


def run(m, td):
    return m(td["return_to_go"], td["observation"], td["action"], td["timestep"], td["mask"])


@pytest.mark.parametrize("head,width,extra", [
    ("deterministic", ACT, {}), ("tanh_normal", 2 * ACT, {}),
    ("deterministic", ACT, {"head_hidden": (8,), "activation": "gelu"})])
def test_shapes_and_act(head, width, extra):
    m, td = model(head, **extra), inputs()
    out = run(m, td)
    assert out.shape == (B, K, width)
    a = m.act(td["return_to_go"], td["observation"], td["action"], td["timestep"], td["mask"])
    assert a.shape == (B, ACT) and bool((a.abs() < 1).all())
    assert len(m.action_head) == 1 + 2 * len(extra.get("head_hidden", ()))
    if head == "tanh_normal":
        log_std = out[..., ACT:]
        assert bool((log_std >= -5.0).all()) and bool((log_std <= 2.0).all())


@pytest.mark.parametrize("head", ["deterministic", "tanh_normal"])
def test_act_is_the_newest_steps_output_and_ignores_left_padding(head):
    m, td = model(head), inputs(pad=(1, 2))
    noisy = td.clone()
    pad = ~td["mask"]
    for key in ("return_to_go", "observation", "action"):
        noisy[key][pad] = 100.0 * torch.randn_like(noisy[key][pad])
    args = [noisy[k] for k in ("return_to_go", "observation", "action", "timestep", "mask")]
    act = m.act(*args)
    # the newest step's prediction of the clean context: raw for DT, the tanh-squashed mean for oDT
    newest = run(m, td)[:, -1]
    expected = newest if head == "deterministic" else torch.tanh(newest[:, :ACT])
    torch.testing.assert_close(act, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(act, (run(m, td)[:, -2] if head == "deterministic"
                                    else torch.tanh(run(m, td)[:, -2, :ACT])))


def test_loss_modules_name_their_optimiser_groups():
    m = model("tanh_normal")
    loss = ODTLoss(m, target_entropy=-0.7)
    assert loss.target_entropy == -0.7
    assert loss.param_groups() == {"model": list(m.parameters()), "temperature": [loss.log_temperature]}
    dm = model()
    assert DTLoss(dm).param_groups() == {"model": list(dm.parameters())}
    with pytest.raises(ValueError, match="ODTLoss needs a tanh_normal head"):
        ODTLoss(dm)


def _reference_forward(m: DecisionTransformer, rtg, obs, act, timestep, mask):
    """The architecture written out in float64 from its description: tokens (R_t, s_t, a_t) each plus
    the timestep embedding, layer norm, pre-LN GPT-2 blocks (attention to earlier valid tokens and
    to itself, then a 4x MLP), final layer norm, the action head on the state tokens."""
    d = {k: v.detach().double() for k, v in m.state_dict().items()}

    def lin(x, name):
        return x @ d[name + ".weight"].T + d[name + ".bias"]

    def ln(x, name):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * d[name + ".weight"] + d[name + ".bias"]

    act_fn = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "tanh": torch.tanh}[ACTIVATION]
    b, k = timestep.shape
    t = d["embed_timestep.weight"][timestep.clamp(0, m.max_timestep - 1)]
    x = torch.stack([lin(rtg.double(), "embed_return") + t, lin(obs.double(), "embed_state") + t,
                     lin(act.double(), "embed_action") + t], 2).reshape(b, 3 * k, -1)
    x = ln(x, "embed_ln")
    n, h = 3 * k, x.shape[-1]
    heads = m.blocks[0].attn.n_heads
    valid = mask.repeat_interleave(3, 1)
    allowed = (torch.ones(n, n).tril().bool()[None] & valid[:, None, :]) | torch.eye(n).bool()[None]
    for i in range(len(m.blocks)):
        p = f"blocks.{i}."
        q, kk, v = lin(ln(x, p + "ln1"), p + "attn.qkv").split(h, -1)
        q, kk, v = (z.reshape(b, n, heads, h // heads).transpose(1, 2) for z in (q, kk, v))
        scores = (q @ kk.transpose(-1, -2)) / math.sqrt(h // heads)
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, h)
        x = x + lin(y, p + "attn.proj")
        x = x + lin(act_fn(lin(ln(x, p + "ln2"), p + "mlp.0")), p + "mlp.2")
    x = ln(x, "ln_f").reshape(b, k, 3, h)[:, :, 1]
    n_linear = len(m.action_head) // 2 + 1  # Linear, ReLU, ..., Linear
    for i in range(n_linear - 1):
        x = torch.relu(lin(x, f"action_head.{2 * i}"))
    out = lin(x, f"action_head.{2 * (n_linear - 1)}")
    if m.head == "deterministic":
        return torch.tanh(out)
    mu, raw = out.chunk(2, -1)
    return torch.cat([mu, -5.0 + 0.5 * (2.0 - (-5.0)) * (torch.tanh(raw) + 1)], -1)


ACTIVATION = "gelu"


@pytest.mark.parametrize(("head", "head_hidden"), [("deterministic", (8,)), ("tanh_normal", (8,)),
                                                   ("deterministic", (8, 6))])
def test_forward_matches_a_float64_reference_of_the_architecture(head, head_hidden):
    torch.manual_seed(3)
    m = DecisionTransformer(OBS, ACT, hidden=16, n_layers=2, n_heads=2, max_timestep=6, dropout=0.0,
                            head=head, activation=ACTIVATION, head_hidden=head_hidden).eval()
    assert len(m.action_head) == 2 * len(head_hidden) + 1
    with torch.no_grad():  # larger weights than the init's, so every piece moves the output
        for p in m.parameters():
            p.normal_(0.0, 0.5)
    td = inputs(seed=2, pad=(0, 1))
    td["timestep"] = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 9]])  # 6 and 9 lie past max_timestep: clamped
    args = [td[key] for key in ("return_to_go", "observation", "action", "timestep", "mask")]
    out = m(*args).double()
    expected = _reference_forward(m, *args)
    valid = td["mask"]
    torch.testing.assert_close(out[valid], expected[valid], atol=1e-4, rtol=1e-4)
    # no mask: every step valid, still causal
    args[-1] = None
    everything = torch.ones_like(td["mask"])
    torch.testing.assert_close(m(*args).double(), _reference_forward(m, *args[:-1], everything),
                               atol=1e-4, rtol=1e-4)


def test_dt_loss_of_a_single_valid_step_is_its_squared_error():
    m, td = model(), inputs(pad=(3, 3))[:1]  # one row, one valid step (the last)
    pred = run(m, td)[0, -1]
    expected = (pred - td["action"][0, -1]).pow(2).mean()
    assert DTLoss(m)(td)["loss_action"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_three_action_dims_as_hoppers_split_into_mean_and_log_std():
    torch.manual_seed(0)
    m = DecisionTransformer(OBS, 3, hidden=8, n_layers=1, max_timestep=10, dropout=0.0, head="tanh_normal")
    g = torch.Generator().manual_seed(0)
    td = TensorDict({"return_to_go": torch.randn(B, K, 1, generator=g), "observation": torch.randn(B, K, OBS),
                     "action": torch.rand(B, K, 3, generator=g) * 1.8 - 0.9,
                     "timestep": torch.arange(K).repeat(B, 1), "mask": torch.ones(B, K, dtype=torch.bool)},
                    batch_size=[B, K])
    out = run(m, td)
    assert out.shape == (B, K, 6)
    assert bool((out[..., 3:] >= -5.0).all()) and bool((out[..., 3:] <= 2.0).all())  # the log stds
    losses = ODTLoss(m)(td)
    assert torch.isfinite(losses["loss_model"]) and losses["entropy"].shape == ()


def test_initialisation_is_gpt2s():
    torch.manual_seed(0)
    m = DecisionTransformer(OBS, ACT, hidden=64, n_layers=4, n_heads=2, dropout=0.0)
    for name, p in m.named_parameters():
        if name.endswith("bias"):
            if "ln" not in name:
                assert not p.any(), name  # Linear biases start at zero
            continue
        if p.dim() < 2:
            continue  # layer-norm gains
        std = 0.02 / math.sqrt(2 * 4) if name.endswith(("attn.proj.weight", "mlp.2.weight")) else 0.02
        assert abs(p.mean().item()) < 0.2 * std, name
        assert p.std().item() == pytest.approx(std, rel=0.2), name


def test_future_tokens_do_not_change_earlier_predictions():
    m, td = model(), inputs(pad=(0, 0))
    base = run(m, td)
    t = 1
    for key, pos in [("action", t), ("observation", t + 1), ("return_to_go", t + 1)]:
        changed = td.clone()
        changed[key][:, pos] += 5.0
        out = run(m, changed)
        # a_t is predicted from s_t: its own action and every later token are unseen
        assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-6), key
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:]), key  # later steps do see it
    changed = td.clone()
    changed["observation"][:, t] += 5.0
    assert not torch.allclose(run(m, changed)[:, t], base[:, t])  # s_t itself is seen


def test_padded_steps_change_neither_valid_predictions_nor_the_loss():
    m, td = model(), inputs(pad=(1, 2))
    base = run(m, td)
    noisy = td.clone()
    pad = ~td["mask"]
    for key in ("return_to_go", "observation", "action"):
        noisy[key][pad] = 100.0 * torch.randn_like(noisy[key][pad])
    noisy["timestep"][pad] = 17
    out = run(m, noisy)
    assert torch.allclose(out[td["mask"]], base[td["mask"]], atol=1e-5)
    assert DTLoss(m)(noisy)["loss_action"].item() == pytest.approx(DTLoss(m)(td)["loss_action"].item(),
                                                                   rel=1e-5)
    om = model("tanh_normal")
    torch.manual_seed(4)
    a = ODTLoss(om)(td)
    torch.manual_seed(4)
    b = ODTLoss(om)(noisy)
    for key in ("loss_model", "nll", "entropy"):
        assert a[key].item() == pytest.approx(b[key].item(), rel=1e-5), key


def test_dt_loss_by_hand():
    m, td = model(), inputs(pad=(0, 2))
    pred = run(m, td).double().tolist()
    act, mask = td["action"].double().tolist(), td["mask"].tolist()
    total, count = 0.0, 0
    for b in range(B):
        for k in range(K):
            if mask[b][k]:
                total += sum((pred[b][k][j] - act[b][k][j]) ** 2 for j in range(ACT))
                count += ACT
    assert DTLoss(m)(td)["loss_action"].item() == pytest.approx(total / count, rel=1e-5)


def test_odt_loss_and_temperature_by_hand():
    m, td = model("tanh_normal"), inputs(pad=(1, 0))
    loss = ODTLoss(m, init_temperature=0.1)
    out_params = run(m, td).double()
    torch.manual_seed(9)
    out = loss(td)
    torch.manual_seed(9)
    noise = torch.randn(B, K, ACT, dtype=torch.float32).double().tolist()
    mu, log_std = out_params[..., :ACT].tolist(), out_params[..., ACT:].tolist()
    act, mask = td["action"].double().tolist(), td["mask"].tolist()
    ll = ent = 0.0
    n = 0
    for b in range(B):
        for k in range(K):
            if not mask[b][k]:
                continue
            n += 1
            for j in range(ACT):
                m_, s_ = mu[b][k][j], math.exp(log_std[b][k][j])
                u = math.atanh(act[b][k][j])
                ll += (-0.5 * ((u - m_) / s_) ** 2 - math.log(s_) - 0.5 * math.log(2 * math.pi)
                       - math.log(1 - math.tanh(u) ** 2))
                x = m_ + s_ * noise[b][k][j]  # the reparameterised sample, squashed
                ent -= (-0.5 * noise[b][k][j] ** 2 - math.log(s_) - 0.5 * math.log(2 * math.pi)
                        - math.log(1 - math.tanh(x) ** 2))
    ll, ent = ll / n, ent / n
    assert out["nll"].item() == pytest.approx(-ll, rel=1e-4)
    assert out["entropy"].item() == pytest.approx(ent, rel=1e-4)
    assert out["loss_model"].item() == pytest.approx(-(ll + 0.1 * ent), rel=1e-4)
    target = -float(ACT)
    assert out["loss_temperature"].item() == pytest.approx(0.1 * (ent - target), rel=1e-4)
    # gradient routing: the temperature loss moves only the temperature, the model loss never does
    (g,) = torch.autograd.grad(out["loss_temperature"], [loss.log_temperature], retain_graph=True)
    assert g.item() == pytest.approx(0.1 * (ent - target), rel=1e-4)
    grads = torch.autograd.grad(out["loss_temperature"], list(m.parameters()), allow_unused=True,
                                retain_graph=True)
    assert all(x is None for x in grads)
    (gm,) = torch.autograd.grad(out["loss_model"], [loss.log_temperature], allow_unused=True)
    assert gm is None


def test_tanh_normal_log_prob_matches_torch_transformed_distribution():
    from torch.distributions import Normal, TanhTransform, TransformedDistribution
    mu, log_std = torch.tensor([[0.3, -0.2]]), torch.tensor([[-0.5, 0.1]])
    a = torch.tensor([[0.5, -0.7]])
    d = TransformedDistribution(Normal(mu, log_std.exp()), [TanhTransform()])
    assert tanh_normal_log_prob(mu, log_std, a).item() == pytest.approx(d.log_prob(a).sum().item(), rel=1e-5)


def test_temperature_moves_toward_target_entropy():
    m = model("tanh_normal")
    loss = ODTLoss(m, init_temperature=0.1, target_entropy=-10.0)  # far below the initial entropy
    opt = torch.optim.Adam([loss.log_temperature], lr=0.05)
    td = inputs()
    for _ in range(20):
        opt.zero_grad()
        loss(td)["loss_temperature"].backward()
        opt.step()
    assert loss.log_temperature.exp().item() < 0.1 * 0.5


@pytest.mark.timeout(60)
def test_tiny_dt_overfits_two_sequences():
    torch.manual_seed(0)
    m = DecisionTransformer(OBS, ACT, hidden=32, n_layers=2, n_heads=2, max_timestep=20, dropout=0.0)
    loss = DTLoss(m)
    td = inputs(seed=5, pad=(0, 1))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    first = None
    for _ in range(200):
        out = loss(td)["loss_action"]
        first = first if first is not None else out.item()
        opt.zero_grad()
        out.backward()
        opt.step()
    assert loss(td)["loss_action"].item() < 1e-3 < first


def test_rolling_context_by_hand():
    from rlrun.modules.transformer import RollingContext
    ctx = RollingContext(num_envs=2, context=3, obs_dim=1, action_dim=1, target_return=10.0, rtg_scale=2.0)
    rtg, obs, act, t, mask = ctx.observe(torch.tensor([[1.0], [2.0]]))
    assert mask.tolist() == [[False, False, True]] * 2 and rtg[:, -1, 0].tolist() == [5.0, 5.0]
    ctx.record(torch.tensor([[0.1], [0.2]]), torch.tensor([2.0, 4.0]), done=torch.tensor([False, True]))
    rtg, obs, act, t, mask = ctx.observe(torch.tensor([[3.0], [4.0]]))
    # env 0 continues: rtg 5 - 2/2 = 4; env 1 ended and restarted: one fresh step at the target
    assert obs[0, :, 0].tolist() == [0.0, 1.0, 3.0] and obs[1, :, 0].tolist() == [0.0, 0.0, 4.0]
    assert rtg[0, :, 0].tolist() == [0.0, 5.0, 4.0] and rtg[1, :, 0].tolist() == [0.0, 0.0, 5.0]
    assert act[0, :, 0].tolist() == pytest.approx([0.0, 0.1, 0.0]) and act[1, :, 0].tolist() == [0.0] * 3
    assert t.tolist() == [[0, 0, 1], [0, 0, 0]]
    assert mask.tolist() == [[False, True, True], [False, False, True]]
    for i in range(2):  # the window keeps the last K steps
        ctx.record(torch.tensor([[0.0], [0.0]]), torch.tensor([0.0, 0.0]))
        ctx.observe(torch.tensor([[5.0 + i], [0.0]]))
    assert ctx.observation[0, :, 0].tolist() == [3.0, 5.0, 6.0] and ctx.timestep[0].tolist() == [1, 2, 3]



def test_rolling_context_keeps_features_of_a_step_together_and_resets_every_row():
    from rlrun.modules.transformer import RollingContext
    # two features per observation: the window must shift whole steps, not single numbers
    ctx = RollingContext(num_envs=2, context=2, obs_dim=2, action_dim=1, target_return=3.0)  # rtg_scale 1
    ctx.observe(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    ctx.record(torch.tensor([[0.5], [-0.5]]), torch.tensor([1.0, 0.5]))
    rtg, obs, act, t, mask = ctx.observe(torch.tensor([[5.0, 6.0], [7.0, 8.0]]))
    assert obs.tolist() == [[[1.0, 2.0], [5.0, 6.0]], [[3.0, 4.0], [7.0, 8.0]]]
    assert rtg[:, :, 0].tolist() == [[3.0, 2.0], [3.0, 2.5]]  # unscaled: the default rtg_scale is 1
    assert act[:, :, 0].tolist() == [[0.5, 0.0], [-0.5, 0.0]]
    assert t.dtype == torch.long and mask.dtype == torch.bool  # embedding indices, attention mask
    ctx.reset()  # every row: an evaluation starting afresh
    assert not ctx.mask.any() and not ctx.observation.any() and not ctx.timestep.any()
    rtg, obs, _, t, mask = ctx.observe(torch.tensor([[9.0, 9.0], [9.0, 9.0]]))
    assert rtg[:, -1, 0].tolist() == [3.0, 3.0] and t[:, -1].tolist() == [0, 0]
    assert mask.tolist() == [[False, True]] * 2


def _target(s):
    return 0.5 * s[..., 0] - 0.3 * s[..., 1]


@pytest.mark.learning
@pytest.mark.timeout(90)
def test_dt_conditioned_on_a_high_return_scores_higher_than_on_a_low_one():
    """Episodes of 4 steps; behaviour a = t(s) + b with a per-episode offset b ~ U[0, 1], reward
    -(a - t(s))^2. Returns reveal b, so the return-to-go tells the model which offset to play."""
    from rlrun.datasets.slices import TrajectorySliceSampler
    from rlrun.modules.transformer import RollingContext
    g = torch.Generator().manual_seed(0)
    episodes, length = 400, 4
    s = torch.rand(episodes, length, 2, generator=g) * 2 - 1
    b = torch.rand(episodes, 1, generator=g)
    a = (_target(s) + b).clamp(-1, 1)
    r = -(a - _target(s)) ** 2
    sampler = TrajectorySliceSampler(s.reshape(-1, 2), a.reshape(-1, 1), r.reshape(-1),
                                     torch.arange(episodes) * length, torch.full((episodes,), length),
                                     slice_len=length, seed=0)
    torch.manual_seed(0)
    m = DecisionTransformer(2, 1, hidden=32, n_layers=2, n_heads=2, max_timestep=length, dropout=0.0)
    loss, opt = DTLoss(m), torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(300):
        out = loss(sampler.sample(64))["loss_action"]
        opt.zero_grad()
        out.backward()
        opt.step()

    def rollout(target_return):
        n = 256
        ctx = RollingContext(n, length, 2, 1, target_return)
        states = torch.rand(n, length, 2, generator=torch.Generator().manual_seed(1)) * 2 - 1
        total = torch.zeros(n)
        with torch.no_grad():
            for step in range(length):
                action = m.act(*ctx.observe(states[:, step]))
                reward = -(action[:, 0] - _target(states[:, step])) ** 2
                ctx.record(action, reward)
                total += reward
        return float(total.mean())

    data_mean = float(r.sum(1).mean())  # -1.05 (measured: high -0.01, low -2.72)
    high, low = rollout(0.0), rollout(-3.0)
    assert high > data_mean + 0.5 and high > low + 1.0, (high, low, data_mean)
