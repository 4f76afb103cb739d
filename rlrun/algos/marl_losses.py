"""The Q family's loss over an agent dim (IQL, VDN, QMIX: one TD loss with no mixer, VDN's or QMIX's).

Keys (the agent-group layout of ``rlrun.core.specs``, read through a ``KeyMap``;
``*B`` is any batch shape, e.g. ``[env, time]`` or a minibatch):

- per-agent data under the group key with the agent dim after ``*B``:
  ``("agents", "observation") [*B, n, obs]``, ``("agents", "action") [*B, n]``,
  ``("next", "agents", "observation")``, ``("next", "agents", "reward") [*B, n, 1]``;
- shared data at the root: ``("next", "terminated") [*B, 1]``, ``"state"`` and
  ``("next", "state") [*B, state]`` (QMIX only).

MAPPO and IPPO are PPO's loss (``rlrun.algos.ppo``) on group keys.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import KeyMap
from rlrun.core.errors import ConfigError
from rlrun.core.specs import GROUP
from rlrun.modules.multiagent import GroupMLP, QMixer, VDNMixer
from rlrun.modules.networks import polyak_update, target_copy


class MultiAgentQLoss(nn.Module):
    """TD loss for per-agent Q values, optionally mixed into a team value (IQL / VDN / QMIX).

    Without a mixer (IQL) each agent regresses ``Q_i(o_i, a_i)`` on
    ``r_i + gamma * (1 - terminated) * Q'_i(o'_i, a*_i)``. With a mixer the chosen
    agent values are mixed, ``Q_tot = mixer(Q, s)``, and regressed on
    ``r + gamma * (1 - terminated) * mixer'(Q'(o', a*), s')`` with the target
    mixer ``mixer'``; the team reward ``r`` is the agents' mean reward (equal to each
    agent's own under VMAS's shared rewards). ``a*_i`` is the online network's
    argmax (Double DQN) or the target's.

    Args:
        qnet: ``GroupMLP`` with ``n_actions`` outputs per agent.
        mixer: ``None`` (IQL), ``VDNMixer`` or ``QMixer``.
        gamma: Discount.
        double: Double-DQN action selection.
        loss: ``"l2"`` (squared error) or ``"huber"``.
        tau: Target update rate per ``update_targets`` call (1.0: hard copy).
        keys: Where the entries are (default: the group ``GROUP``'s layout).
    """

    def __init__(self, qnet: GroupMLP, mixer: nn.Module | None = None, gamma: float = 0.9,
                 double: bool = True, loss: str = "l2", tau: float = 1.0, keys: KeyMap | None = None):
        super().__init__()
        self.key = keys if keys is not None else KeyMap(GROUP)
        if loss not in ("l2", "huber"):
            raise ConfigError(f"unknown loss {loss!r}", key="loss.loss", fix="use l2 or huber")
        self.qnet, self.mixer = qnet, mixer
        self.gamma, self.double, self.loss, self.tau = gamma, double, loss, tau
        self.target_qnet = target_copy(qnet)
        self.target_mixer = target_copy(mixer) if mixer is not None else None
        self._needs_state = isinstance(mixer, QMixer)

    def _mix(self, mixer: nn.Module | None, q: Tensor, state: Tensor | None) -> Tensor:
        return q if mixer is None else mixer(q, state)

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        key = self.key
        q_all = self.qnet(td[key("observation")].float())  # [*B, n, A]
        q = q_all.gather(-1, td[key("action")].long().unsqueeze(-1)).squeeze(-1)  # [*B, n]
        state = td[key("state")] if self._needs_state else None
        q_pred = self._mix(self.mixer, q, state)  # [*B, n] (IQL) or [*B]
        with torch.no_grad():
            next_obs = td[key("next.observation")].float()
            next_target = self.target_qnet(next_obs)
            chooser = self.qnet(next_obs) if self.double else next_target
            next_q = next_target.gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)
            next_state = td[key("next.state")] if self._needs_state else None
            next_v = self._mix(self.target_mixer, next_q, next_state)
            reward = td[key("next.reward")].squeeze(-1)  # [*B, n]
            not_terminal = (~td[key("next.terminated")]).float()  # [*B, 1]: broadcasts over agents
            if self.mixer is not None:
                reward, not_terminal = reward.mean(-1), not_terminal.squeeze(-1)
            target = reward + self.gamma * not_terminal * next_v
        if self.loss == "l2":
            per_sample = (q_pred - target).pow(2)
        else:
            per_sample = nn.functional.smooth_l1_loss(q_pred, target, reduction="none")
        return {"loss_critic": per_sample.mean(), "q_value": q.detach().mean(),
                "td_error": (q_pred - target).detach().abs()}

    def update_targets(self) -> None:
        polyak_update(self.target_qnet, self.qnet, self.tau)
        if self.mixer is not None and any(True for _ in self.mixer.parameters()):  # VDN has none
            polyak_update(self.target_mixer, self.mixer, self.tau)


def make_q_mixer(kind: str, n_agents: int, state_dim: int | None = None) -> nn.Module | None:
    """``"none"`` (IQL), ``"vdn"`` or ``"qmix"`` (needs the global state's size)."""
    if kind == "none":
        return None
    if kind == "vdn":
        return VDNMixer()
    if kind == "qmix":
        if not state_dim:
            raise ConfigError("QMIX needs a global state", key="loss.mixer",
                              fix="use an env with a global state (VMAS provides one) or loss.mixer=vdn")
        return QMixer(n_agents, state_dim)
    raise ConfigError(f"unknown mixer {kind!r}", key="loss.mixer", fix="use none, vdn or qmix")
