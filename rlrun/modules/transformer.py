"""Decision Transformer (Chen et al. 2021) and its online variant (Zheng et al. 2022), in torch.nn.

The model reads a trajectory slice as interleaved tokens
``(R_1, s_1, a_1, R_2, s_2, a_2, ...)`` (3K tokens): each modality has its own
linear embedding, a learned timestep embedding is added to all three tokens of a
step (the reference implementation removes GPT-2's positional embeddings; the
timestep is the only position signal, so evaluation may use a shorter context
than training, as Table 9 does), then LayerNorm and GPT-2 style pre-LN blocks
(ReLU MLPs, as the DT reference configures GPT-2) under a causal mask. The action
``a_t`` is predicted from the output at the state token ``s_t``, so it sees
``R_<=t, s_<=t, a_<t``.

Left padding (``mask`` False) is excluded as attention key; every token may
attend to itself, so padded queries never meet an empty row (their outputs are
ignored by the losses).

Heads: ``deterministic`` (DT: ``tanh(linear(h))``) or ``tanh_normal`` (online DT: a
Normal squashed by tanh, log std mapped into ``[log_std_min, log_std_max]``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.nn import functional as F

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with an explicit boolean mask (True: may attend)."""

    def __init__(self, hidden: int, n_heads: int, dropout: float):
        super().__init__()
        if hidden % n_heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.dropout = n_heads, dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, allowed: Tensor) -> Tensor:
        b, n, h = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, h // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, n, h)))


_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}
Activation = Literal[tuple(_ACTIVATIONS)]  # the model factory's annotation: checked with the config


class Block(nn.Module):
    """GPT-2 block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))`` (4x width)."""

    def __init__(self, hidden: int, n_heads: int, dropout: float, activation: str = "relu"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, n_heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), _ACTIVATIONS[activation](),
                                 nn.Linear(4 * hidden, hidden), nn.Dropout(dropout))

    def forward(self, x: Tensor, allowed: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x), allowed)
        return x + self.mlp(self.ln2(x))


class DecisionTransformer(nn.Module):
    """Causal transformer over (return-to-go, state, action) tokens.

    Args:
        obs_dim: Observation size (flat).
        action_dim: Action size.
        hidden: Embedding width (DT: 128).
        n_layers: Transformer blocks (DT: 3).
        n_heads: Attention heads (DT: 1).
        max_timestep: Size of the timestep embedding (episode length); larger
            timesteps use the last entry.
        dropout: Dropout on embeddings, attention and residuals (DT: 0.1).
        head: ``deterministic`` or ``tanh_normal``.
        activation: Of the blocks' MLPs (the DT reference and Table 9: relu; GPT-2: gelu).
        head_hidden: Hidden layers (ReLU) of the action head before its output layer
            (Table 9: one of the embedding width).
        log_std_min: Lower log-std bound of the ``tanh_normal`` head.
        log_std_max: Upper log-std bound.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 128, n_layers: int = 3,
                 n_heads: int = 1, max_timestep: int = 1000, dropout: float = 0.1,
                 head: str = "deterministic", activation: str = "relu", head_hidden: tuple[int, ...] = (),
                 log_std_min: float = -5.0, log_std_max: float = 2.0):
        super().__init__()
        if head not in ("deterministic", "tanh_normal"):
            raise ValueError(f"unknown head {head!r}; use deterministic or tanh_normal")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; use one of {', '.join(_ACTIVATIONS)}")
        self.obs_dim, self.action_dim, self.head = obs_dim, action_dim, head
        self.max_timestep, self.log_std_min, self.log_std_max = max_timestep, log_std_min, log_std_max
        self.embed_timestep = nn.Embedding(max_timestep, hidden)
        self.embed_return = nn.Linear(1, hidden)
        self.embed_state = nn.Linear(obs_dim, hidden)
        self.embed_action = nn.Linear(action_dim, hidden)
        self.embed_ln = nn.LayerNorm(hidden)
        self.embed_drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(hidden, n_heads, dropout, activation) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(hidden)
        layers: list[nn.Module] = []
        dims = [hidden, *head_hidden]
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], action_dim * (2 if head == "tanh_normal" else 1)))
        self.action_head = nn.Sequential(*layers)
        self.apply(self._init)
        for block in self.blocks:  # GPT-2: residual projections scaled by depth
            for proj in (block.attn.proj, block.mlp[2]):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * n_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, return_to_go: Tensor, observation: Tensor, action: Tensor, timestep: Tensor,
                mask: Tensor | None = None) -> Tensor:
        """Head outputs at every state token: ``[B, K, A]`` (deterministic: the action;
        tanh_normal: pre-squash mean and log std concatenated, ``[B, K, 2A]``).

        Args:
            return_to_go: ``[B, K, 1]`` (scaled) returns-to-go.
            observation: ``[B, K, obs_dim]``.
            action: ``[B, K, action_dim]`` (the action at step t is only seen by later steps).
            timestep: ``[B, K]`` int64 step within the episode.
            mask: ``[B, K]`` bool, False on padding; None: all valid.
        """
        b, k = timestep.shape
        t = self.embed_timestep(timestep.clamp(0, self.max_timestep - 1))
        tokens = torch.stack([self.embed_return(return_to_go.float()) + t,
                              self.embed_state(observation.float()) + t,
                              self.embed_action(action.float()) + t], dim=2).reshape(b, 3 * k, -1)
        x = self.embed_drop(self.embed_ln(tokens))
        n = 3 * k
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        if mask is None:
            allowed = causal[None, None]
        else:
            key_ok = mask.bool().repeat_interleave(3, dim=1)  # [B, 3K]
            eye = torch.eye(n, dtype=torch.bool, device=x.device)
            allowed = ((causal[None] & key_ok[:, None, :]) | eye[None])[:, None]
        for block in self.blocks:
            x = block(x, allowed)
        x = self.ln_f(x).reshape(b, k, 3, -1)
        out = self.action_head(x[:, :, 1])
        if self.head == "deterministic":
            return torch.tanh(out)
        mu, log_std = out.chunk(2, -1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(log_std) + 1)
        return torch.cat([mu, log_std], -1)

    def act(self, return_to_go: Tensor, observation: Tensor, action: Tensor, timestep: Tensor,
            mask: Tensor | None = None) -> Tensor:
        """The action for the last step of each context (the mode for ``tanh_normal``), ``[B, A]``."""
        out = self(return_to_go, observation, action, timestep, mask)[:, -1]
        return out if self.head == "deterministic" else torch.tanh(out[..., :self.action_dim])


def tanh_normal_log_prob(mu: Tensor, log_std: Tensor, action: Tensor, eps: float = 1e-6) -> Tensor:
    """``log p(action)`` under ``tanh(N(mu, exp(log_std)))``, summed over the last dim.

    Actions are clipped ``eps`` inside (-1, 1), where atanh is finite.
    """
    a = action.clamp(-1.0 + eps, 1.0 - eps)
    u = torch.atanh(a)
    log_normal = -0.5 * ((u - mu) / log_std.exp()).pow(2) - log_std - _HALF_LOG_2PI
    log_det = 2 * (math.log(2) - u - F.softplus(-2 * u))  # log(1 - tanh(u)^2), stable
    return (log_normal - log_det).sum(-1)


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


def _model_inputs(td: TensorDict) -> tuple[Tensor, ...]:
    return td["return_to_go"], td["observation"], td["action"], td["timestep"], td["mask"]


class DTLoss(nn.Module):
    """Decision Transformer's loss: mean squared action error over valid (unpadded) steps.

    Reads ``return_to_go, observation, action, timestep, mask`` (``[B, K, ...]``, as
    ``TrajectorySliceSampler`` yields); the mean runs over valid steps and action dims.
    """

    def __init__(self, model: DecisionTransformer):
        super().__init__()
        if model.head != "deterministic":
            raise ValueError("DTLoss needs a deterministic head; use ODTLoss for tanh_normal")
        self.model = model

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"model": list(self.model.parameters())}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        pred = self.model(*_model_inputs(td))
        mask = td["mask"]
        err = (pred - td["action"]).pow(2).mean(-1)
        return {"loss_action": _masked_mean(err, mask)}

    def update_targets(self) -> None:
        """No target networks."""


class ODTLoss(nn.Module):
    """Online DT's loss: ``-(log-likelihood + temperature * entropy)`` with a learned temperature.

    The entropy of the squashed policy has no closed form; as in the authors' code it
    is estimated from one reparameterised sample per step. Unlike their code, the
    entropy is averaged over valid steps only, so padding never enters the loss.
    The temperature loss ``temperature * (entropy - target_entropy)`` (entropy
    detached) lowers the temperature while the entropy exceeds its target.

    Args:
        model: A ``tanh_normal`` ``DecisionTransformer``.
        init_temperature: Initial temperature (oDT: 0.1).
        target_entropy: Target entropy; ``None`` means ``-action_dim``.
    """

    def __init__(self, model: DecisionTransformer, init_temperature: float = 0.1,
                 target_entropy: float | None = None):
        super().__init__()
        if model.head != "tanh_normal":
            raise ValueError("ODTLoss needs a tanh_normal head")
        self.model = model
        self.log_temperature = nn.Parameter(torch.tensor(math.log(init_temperature)))
        self.target_entropy = -float(model.action_dim) if target_entropy is None else target_entropy

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"model": list(self.model.parameters()), "temperature": [self.log_temperature]}

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        out = self.model(*_model_inputs(td))
        mask = td["mask"]
        mu, log_std = out.chunk(2, -1)
        log_lik = _masked_mean(tanh_normal_log_prob(mu, log_std, td["action"]), mask)
        u = mu + log_std.exp() * torch.randn_like(mu)
        log_det = 2 * (math.log(2) - u - F.softplus(-2 * u))
        log_p = (-0.5 * ((u - mu) / log_std.exp()).pow(2) - log_std - _HALF_LOG_2PI - log_det).sum(-1)
        entropy = -_masked_mean(log_p, mask)
        temperature = self.log_temperature.exp()
        return {
            "loss_model": -(log_lik + temperature.detach() * entropy),
            "loss_temperature": temperature * (entropy - self.target_entropy).detach(),
            "nll": -log_lik.detach(),
            "entropy": entropy.detach(),
            "temperature": temperature.detach(),
        }

    def update_targets(self) -> None:
        """No target networks."""


class RollingContext:
    """The last ``K`` steps of ``N`` parallel episodes, as a Decision Transformer acts on them.

    Per env step: ``observe(obs)`` appends the step (return-to-go, observation, a zero
    placeholder action, timestep) and returns the model inputs; after acting,
    ``record(action, reward, done)`` stores the action, lowers the return-to-go by
    ``reward / rtg_scale`` (the target return is conditioned on what is left), and
    restarts the rows whose episode ended. All rows move together: no loop over envs.

    Args:
        num_envs: ``N``.
        context: ``K``, the model's slice length.
        obs_dim: Observation size.
        action_dim: Action size.
        target_return: Return conditioned on at each episode start (unscaled).
        rtg_scale: Same scale as in training.
        device: Where the tensors live.
    """

    def __init__(self, num_envs: int, context: int, obs_dim: int, action_dim: int, target_return: float,
                 rtg_scale: float = 1.0, device: str | torch.device = "cpu"):
        self.target = float(target_return) / float(rtg_scale)
        self.rtg_scale = float(rtg_scale)
        n, k = num_envs, context
        self.return_to_go = torch.zeros(n, k, 1, device=device)
        self.observation = torch.zeros(n, k, obs_dim, device=device)
        self.action = torch.zeros(n, k, action_dim, device=device)
        self.timestep = torch.zeros(n, k, dtype=torch.long, device=device)
        self.mask = torch.zeros(n, k, dtype=torch.bool, device=device)
        self._rtg = torch.full((n,), self.target, device=device)
        self._t = torch.zeros(n, dtype=torch.long, device=device)

    def _buffers(self) -> tuple[Tensor, ...]:
        return self.return_to_go, self.observation, self.action, self.timestep, self.mask

    def observe(self, obs: Tensor) -> tuple[Tensor, ...]:
        """Appends the new step; returns ``(return_to_go, observation, action, timestep, mask)``."""
        for buf in self._buffers():
            buf.copy_(buf.roll(-1, dims=1))
        self.return_to_go[:, -1, 0] = self._rtg
        self.observation[:, -1] = obs.float()
        self.action[:, -1] = 0.0
        self.timestep[:, -1] = self._t
        self.mask[:, -1] = True
        return self._buffers()

    def record(self, action: Tensor, reward: Tensor, done: Tensor | None = None) -> None:
        """Stores the step's action and reward; rows with ``done`` start a new episode."""
        self.action[:, -1] = action.float()
        self._rtg -= reward.reshape(-1).float() / self.rtg_scale
        self._t += 1
        if done is not None:
            self.reset(done.reshape(-1).bool())

    def reset(self, rows: Tensor | None = None) -> None:
        """Clears the context of ``rows`` (bool ``[N]``; all if None) and restores the target return."""
        rows = torch.ones_like(self._t, dtype=torch.bool) if rows is None else rows
        for buf in self._buffers():
            buf.masked_fill_(rows.view(-1, *([1] * (buf.dim() - 1))), 0)
        self._rtg = torch.where(rows, torch.full_like(self._rtg, self.target), self._rtg)
        self._t = torch.where(rows, torch.zeros_like(self._t), self._t)
