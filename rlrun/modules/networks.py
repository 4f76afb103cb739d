"""Networks: MLP, observation normaliser, actor heads, critics, target copies.

Modules take and return plain tensors: the collector calls the actor once per
env step, and building a TensorDict there would cost more than the network.
Losses read tensors out of batch-level TensorDicts and call these modules.
"""

from __future__ import annotations

import copy
import math
from typing import Annotated, Literal

import torch
from torch import Tensor, nn
from torch.distributions import Categorical, Distribution, Independent, Normal
from torch.nn.modules import module as torch_module

from rlrun.core.registry import Range
from rlrun.modules import onednn

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}
# The annotation factories use, so that the registry refuses an unknown name (and lists the
# valid ones) when the config is checked, not with a KeyError while the network is built.
Activation = Literal[tuple(ACTIVATIONS)]
# Layer widths: each at least 1 (a negative width would reach torch as a negative dimension).
Hidden = list[Annotated[int, Range(gt=0)]]


def mlp(in_dim: int, hidden: list[int], out_dim: int | None, activation: str = "tanh",
        out_gain: float = 1.0, orthogonal: bool = False) -> nn.Sequential:
    """A fully connected network; ``out_dim=None`` ends with the last hidden activation."""
    layers: list[nn.Module] = []
    dims = [in_dim, *hidden]
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [_init(nn.Linear(a, b), math.sqrt(2), orthogonal), _activation(activation)]
    if out_dim is not None:
        layers.append(_init(nn.Linear(dims[-1], out_dim), out_gain, orthogonal))
    return nn.Sequential(*layers)


# Layer types whose ``forward`` is all their call does when no hook is registered (``run_layers``)
_PLAIN_LAYERS = (nn.Linear, *ACTIVATIONS.values())


def plain_layers(net: nn.Module) -> tuple[nn.Module, ...] | None:
    """The layers of a ``Sequential`` of Linear layers and activations (what ``mlp`` builds), in
    order, for ``run_layers``; None for any other network (it is then called as usual)."""
    if type(net) is not nn.Sequential or not all(type(m) in _PLAIN_LAYERS for m in net):
        return None
    return (net, *net)


def run_layers(net: nn.Module, layers: tuple[nn.Module, ...] | None, x: Tensor) -> Tensor:
    """``net(x)``, calling each layer's ``forward`` directly when ``layers`` (``plain_layers``) is set
    and no module hook is registered: the same ops, without ``nn.Module.__call__``'s dispatch per
    layer, which costs more than a 64-wide layer's arithmetic at the collector's 8 rows (measured
    46 us against 73 us for a 64x64 tanh MLP on a loaded 2-core machine)."""
    if (layers is None or layers[0] is not net
            or torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks
            or torch_module._global_backward_hooks or torch_module._global_backward_pre_hooks
            or any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                   for m in layers)):
        return net(x)
    if onednn.enabled():  # gemm=onednn: the large products through oneDNN (rlrun.modules.onednn)
        for m in layers[1:]:
            x = onednn.linear(x, m.weight, m.bias) if type(m) is nn.Linear else m.forward(x)
        return x
    for m in layers[1:]:
        x = m.forward(x)
    return x


def _activation(name: str) -> nn.Module:
    # ReLU in place on the Linear's fresh output (which autograd does not save): one
    # element-wise pass and no new tensor, the same values.
    return nn.ReLU(inplace=True) if name == "relu" else ACTIVATIONS[name]()


def _init(layer: nn.Linear, gain: float, orthogonal: bool) -> nn.Linear:
    # Orthogonal init is what the PPO/A2C implementations the paper compares to use.
    if orthogonal:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


class ObservationNormalizer(nn.Module):
    """Running mean/std normalisation of observations, saved in the state dict.

    Statistics are updated from whole collected batches (Chan et al. parallel
    update), not per step, and only between optimisation phases so that the
    policy that collected a batch and the one that trains on it agree.
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))

    def forward(self, obs: Tensor) -> Tensor:
        return ((obs - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, obs: Tensor) -> None:
        obs = obs.reshape(-1, *self.mean.shape).to(self.mean.dtype)
        n = obs.shape[0]
        b_mean, b_var = obs.mean(0), obs.var(0, unbiased=False)
        total = self.count + n
        delta = b_mean - self.mean
        self.mean += delta * (n / total).to(self.mean.dtype)
        m2 = self.var * self.count + b_var * n + delta.pow(2) * (self.count * n / total)
        self.var.copy_((m2 / total).to(self.var.dtype))
        self.count.copy_(total)


class Actor(nn.Module):
    """A policy: a trunk maps observations to distribution parameters.

    Args:
        net: Maps (normalised) observations to the head's parameters.
        head: ``"categorical"``, ``"normal"`` (state-independent log std),
            ``"tanh_normal"`` or ``"deterministic"`` (tanh-squashed).
        action_dim: Number of actions or action size.
        normalizer: Optional observation normaliser applied first.
    """

    def __init__(self, net: nn.Module, head: str, action_dim: int,
                 normalizer: ObservationNormalizer | None = None, init_log_std: float = 0.0,
                 min_log_std: float = -5.0, max_log_std: float = 2.0):
        super().__init__()
        self.net, self.head, self.normalizer = net, head, normalizer
        self.min_log_std, self.max_log_std = min_log_std, max_log_std
        self._layers = plain_layers(net)
        if head == "normal":
            self.log_std = nn.Parameter(torch.full((action_dim,), init_log_std))
        elif head not in ("categorical", "tanh_normal", "deterministic"):
            raise ValueError(f"unknown actor head {head!r}")

    def features(self, obs: Tensor) -> Tensor:
        obs = obs.float()
        return run_layers(self.net, self._layers,
                          self.normalizer(obs) if self.normalizer is not None else obs)

    def dist(self, obs: Tensor) -> Distribution:
        """The action distribution (pre-squash Normal for tanh_normal)."""
        # validate_args=False: argument checks cost more than the small networks themselves
        out = self.features(obs)
        if self.head == "categorical":
            return Categorical(logits=out, validate_args=False)
        if self.head == "normal":
            return Independent(Normal(out, self.log_std.exp().expand_as(out), validate_args=False), 1,
                               validate_args=False)
        if self.head == "tanh_normal":
            mu, log_std = out.chunk(2, -1)
            log_std = log_std.clamp(self.min_log_std, self.max_log_std)
            return Independent(Normal(mu, log_std.exp(), validate_args=False), 1, validate_args=False)
        raise TypeError("a deterministic actor has no distribution")

    def sample(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Reparameterised action and its log-probability (tanh correction included)."""
        if self.head != "tanh_normal":
            d = self.dist(obs)
            action = d.sample()
            return action, d.log_prob(action)
        mu, log_std = self.features(obs).chunk(2, -1)
        std = log_std.clamp(self.min_log_std, self.max_log_std).exp()
        # Normal(mu, std).rsample() and later its log_prob, op for op and in the order
        # torch.distributions computes them (its broadcast views included), without building
        # the distribution objects: the same bits, gradients included (the order of the
        # recorded ops fixes the order in which autograd sums a tensor's gradients)
        mu, std = torch.broadcast_tensors(mu, std)
        u = mu + torch.empty(mu.shape, dtype=mu.dtype, device=mu.device).normal_() * std
        action = torch.tanh(u)
        # log|d tanh(u)/du| = 2 (log 2 - u - softplus(-2u)), numerically stable form
        correction = (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        var, log_scale = std**2, std.log()
        log_prob = -((u - mu) ** 2) / (2 * var) - log_scale - _HALF_LOG_2PI
        log_prob = log_prob.reshape(log_prob.shape[:-1] + (-1,)).sum(-1)  # Independent's sum
        return action, log_prob - correction

    @property
    def explore_keys(self) -> tuple[str, ...]:
        """What ``explore`` returns: on-policy heads add the log-probability the loss reads."""
        return ("action", "sample_log_prob") if self.head in ("categorical", "normal") else ("action",)

    def explore(self, obs: Tensor) -> dict[str, Tensor]:
        """Acting for collection: a sampled action (plus its log-prob when on-policy)."""
        if self.head == "deterministic":
            return {"action": torch.tanh(self.features(obs))}
        if self.head == "normal":
            # Called once per env step: the closed form skips building distribution
            # objects, which cost more than the network here (same law, same log-prob).
            mean = self.features(obs)
            noise = torch.randn_like(mean)
            log_prob = (-0.5 * noise.square() - self.log_std - _HALF_LOG_2PI).sum(-1)
            return {"action": mean + self.log_std.exp() * noise, "sample_log_prob": log_prob}
        if self.head == "categorical":
            return _categorical_explore(self.features(obs))
        action, log_prob = self.sample(obs)
        if self.head == "tanh_normal":  # off-policy: the log-prob is never read back
            return {"action": action}
        return {"action": action, "sample_log_prob": log_prob}

    def act(self, obs: Tensor) -> Tensor:
        """Deterministic action: the mode (argmax, mean, tanh(mean))."""
        out = self.features(obs)
        if self.head == "categorical":
            return out.argmax(-1)
        if self.head == "normal":
            return out
        if self.head == "tanh_normal":
            return torch.tanh(out.chunk(2, -1)[0])
        return torch.tanh(out)


def _categorical_explore(logits: Tensor) -> dict[str, Tensor]:
    """``Categorical(logits)``'s ``sample()`` and its ``log_prob``, op for op as torch.distributions
    computes them (the same draws from the same generator, the same bits), without building the
    distribution: at the collector's few rows its Python cost (~100 us a step, measured) exceeded
    the ops'."""
    logits = logits - logits.logsumexp(dim=-1, keepdim=True)  # Categorical.__init__
    n = logits.shape[-1]
    probs = nn.functional.softmax(logits, dim=-1)  # the probs property (logits_to_probs)
    action = torch.multinomial(probs.reshape(-1, n), 1, True).T.reshape(logits.shape[:-1])
    index, log_pmf = torch.broadcast_tensors(action.long().unsqueeze(-1), logits)  # log_prob
    return {"action": action, "sample_log_prob": log_pmf.gather(-1, index[..., :1]).squeeze(-1)}


class ValueCritic(nn.Module):
    """State value V(s)."""

    def __init__(self, net: nn.Module, normalizer: ObservationNormalizer | None = None):
        super().__init__()
        self.net, self.normalizer = net, normalizer
        self._layers = plain_layers(net)

    def forward(self, obs: Tensor) -> Tensor:
        obs = obs.float()
        return run_layers(self.net, self._layers,
                          self.normalizer(obs) if self.normalizer is not None else obs).squeeze(-1)


class TwinQCritic(nn.Module):
    """Two Q(s, a) networks evaluated together; returns ``[2, *batch]``.

    The two MLPs' weights are stacked so one batched matmul per layer runs both
    (half the kernel launches of two separate networks).
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: list[int], activation: str = "relu",
                 normalizer: ObservationNormalizer | None = None, num_q: int = 2):
        super().__init__()
        self.normalizer = normalizer
        dims = [obs_dim + action_dim, *hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for a, b in zip(dims[:-1], dims[1:]):
            layers = [nn.Linear(a, b) for _ in range(num_q)]  # PyTorch's default init per net
            self.weights.append(nn.Parameter(torch.stack([lin.weight.T for lin in layers])))
            self.biases.append(nn.Parameter(torch.stack([lin.bias[None] for lin in layers])))
        self.act = ACTIVATIONS[activation]()

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        obs = obs.float()
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        x = torch.cat([obs, action], -1)
        batch = x.shape[:-1]
        x = x.reshape(1, -1, x.shape[-1])
        on = onednn.enabled()
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if on:  # gemm=onednn: large products through oneDNN (rlrun.modules.onednn)
                x = onednn.batched_linear(x, w, b)
            else:
                x = torch.baddbmm(b, x.expand(w.shape[0], -1, -1) if i == 0 else x, w)
            if i < len(self.weights) - 1:
                # in place on baddbmm's fresh output (autograd saves its inputs, not it)
                x = x.relu_() if isinstance(self.act, nn.ReLU) else self.act(x)
        return x.squeeze(-1).reshape(-1, *batch)


def call_frozen(module: nn.Module, *args: Tensor) -> Tensor:
    """``module(*args)`` on its parameters detached: gradients reach the inputs, never the parameters.

    Through ``functional_call`` (views, no copies) rather than switching ``requires_grad`` off and on:
    torch.compile cannot trace that switch, so under ``compile=true`` it ended the compiled graph
    there and the rest of the loss ran eagerly. The ops and their results are the same either way.
    """
    params = {name: p.detach() for name, p in module.named_parameters()}
    return torch.func.functional_call(module, params, args)


def target_copy(module: nn.Module) -> nn.Module:
    """A frozen deep copy for target networks (updated by polyak averaging).

    Observation normalisers are shared, not copied: their statistics are not
    parameters, so polyak averaging would never refresh a copy.
    """
    memo = {id(m): m for m in module.modules() if isinstance(m, ObservationNormalizer)}
    target = copy.deepcopy(module, memo)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source`` in one fused foreach call."""
    t_params = list(target.parameters())
    s_params = list(source.parameters())
    torch._foreach_lerp_(t_params, s_params, tau)
