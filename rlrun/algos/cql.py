"""CQL(H) (Kumar et al. 2020, "Conservative Q-learning for offline RL") on top of SAC.

The critic's TD loss gets a conservative term per Q network,

    alpha_cql * (temp * E_s[ logsumexp_a (Q(s, a) / temp) ] - E_(s,a)~D[ Q(s, a) ]),

where the logsumexp over actions is estimated by importance sampling, as in the
authors' implementation (``min_q_version=3``): ``n_actions`` uniform actions in
[-1, 1]^A (density 0.5^A), ``n_actions`` policy actions at s and ``n_actions`` policy
actions at s', all evaluated at s, each minus its log-density. With ``lagrange``,
the term becomes ``alpha' * (alpha_cql * gap - target_action_gap)`` with
``alpha' = exp(log_alpha_prime)`` (clipped to [0, 1e6]) raised by dual ascent while
the weighted gap exceeds ``target_action_gap``.

Actor and temperature losses are SAC's. One backward pass: the sampled actions of
the conservative term carry no gradient, the actor's loss evaluates a frozen
critic, and the Lagrange loss sees the gap detached, so each loss reaches only its
own parameters.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.policy import Policy
from rlrun.core.registry import NonNegativeFloat, PositiveFloat, PositiveInt, Rate, register
from rlrun.core.specs import EnvSpec
from rlrun.modules.networks import call_frozen, polyak_update, target_copy


@register("loss", "cql")
class CQLLoss(Loss):
    """SAC's losses plus CQL(H)'s conservative critic term.

    Args:
        policy: An ``actor`` with a ``tanh_normal`` head (``sample`` returns action,
            log-prob) and a ``TwinQCritic`` returning ``[num_q, *batch]``, whose polyak
            copy is the target.
        spec: The env's spec (action size: uniform density, default target entropy).
        gamma: Discount (the run's top-level ``gamma``).
        tau: Polyak rate of the target critic.
        init_alpha: Initial SAC temperature.
        target_entropy: SAC's target entropy; ``None`` means ``-action_dim``.
        learn_alpha: Learn the SAC temperature.
        cql_alpha: Weight of the conservative term (authors: 5 for MuJoCo without Lagrange).
        n_actions: Samples per source (uniform, pi(s), pi(s')) in the logsumexp.
        temp: Temperature of the logsumexp.
        lagrange: Tune the weight by dual descent toward ``target_action_gap``.
        target_action_gap: The gap the Lagrange multiplier aims for.
        backup_entropy: Subtract ``alpha * log pi(a'|s')`` in the TD target (authors'
            ``deterministic_backup=False``).
    """

    action_spaces = ("continuous",)
    reads = ("observation", "action", "next.observation", "next.reward", "next.terminated")
    has_targets = True
    learns_from = ("dataset",)

    def __init__(self, policy: Policy, spec: EnvSpec, gamma: float, tau: Rate = 0.005,
                 init_alpha: PositiveFloat = 1.0, target_entropy: float | None = None,
                 learn_alpha: bool = True, cql_alpha: NonNegativeFloat = 5.0, n_actions: PositiveInt = 10,
                 temp: PositiveFloat = 1.0,
                 lagrange: bool = False, target_action_gap: NonNegativeFloat = 10.0,
                 backup_entropy: bool = False):
        super().__init__(policy)
        self.action_dim = action_dim = spec.action_dim
        self.gamma, self.tau = gamma, tau
        self.cql_alpha, self.n_actions, self.temp = cql_alpha, n_actions, temp
        self.lagrange, self.target_action_gap = lagrange, target_action_gap
        self.backup_entropy = backup_entropy
        self.target_critic = target_copy(policy.critic)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)), requires_grad=learn_alpha)
        self.target_entropy = -float(action_dim) if target_entropy is None else target_entropy
        self.log_alpha_prime = nn.Parameter(torch.zeros(()), requires_grad=lagrange)

    @property
    def actor(self) -> nn.Module:
        return self.policy.actor

    @property
    def critic(self) -> nn.Module:
        return self.policy.critic

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups = {"actor": list(self.actor.parameters()), "critic": list(self.critic.parameters())}
        if self.log_alpha.requires_grad:
            groups["alpha"] = [self.log_alpha]
        if self.lagrange:
            groups["alpha_prime"] = [self.log_alpha_prime]
        return groups

    def _sample_repeated(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``n_actions`` policy samples per row: actions ``[N, B, A]``, log-probs ``[N, B]``."""
        rep = obs.unsqueeze(0).expand(self.n_actions, *obs.shape)
        return self.actor.sample(rep.reshape(-1, *obs.shape[1:]))

    def conservative_gap(self, obs: Tensor, next_obs: Tensor, q_data: Tensor) -> Tensor:
        """Per-Q ``temp * mean_s logsumexp(Q / temp) - mean Q(s, a_data)``, shape ``[num_q]``."""
        n, b = self.n_actions, obs.shape[0]
        with torch.no_grad():
            uniform = torch.rand(n, b, self.action_dim, device=obs.device) * 2.0 - 1.0
            pi_action, pi_log_prob = self._sample_repeated(obs)
            next_action, next_log_prob = self._sample_repeated(next_obs)
        obs_rep = obs.unsqueeze(0).expand(n, *obs.shape)
        q_uniform = self.critic(obs_rep, uniform)  # [num_q, N, B]
        q_pi = self.critic(obs_rep, pi_action.reshape(n, b, -1))
        q_next = self.critic(obs_rep, next_action.reshape(n, b, -1))
        uniform_log_density = self.action_dim * math.log(0.5)
        cat = torch.cat([q_uniform - uniform_log_density,
                         q_next - next_log_prob.reshape(n, b),
                         q_pi - pi_log_prob.reshape(n, b)], dim=1)  # [num_q, 3N, B]
        lse = torch.logsumexp(cat / self.temp, dim=1).mean(-1) * self.temp
        return lse - q_data.mean(-1)

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        actor, critic = self.actor, self.critic
        obs, action, next_obs = td["observation"], td["action"], td["next", "observation"]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_log_prob = actor.sample(next_obs)
            next_q = self.target_critic(next_obs, next_action).min(0).values
            if self.backup_entropy:
                next_q = next_q - alpha * next_log_prob
            not_terminal = (~td["next", "terminated"]).squeeze(-1).float()
            target = td["next", "reward"].squeeze(-1) + self.gamma * not_terminal * next_q
        q = critic(obs, action)
        td_error = q - target
        loss_td = td_error.pow(2).mean(-1).sum()

        gap = self.conservative_gap(obs, next_obs, q)  # [num_q]
        out: dict[str, Tensor] = {}
        if self.lagrange:
            # authors' form: alpha' * (cql_alpha * gap - target_gap); alpha' rises while the
            # weighted gap exceeds the target, and its loss does not move the critic
            alpha_prime = self.log_alpha_prime.exp().clamp(0.0, 1e6)
            slack = self.cql_alpha * gap - self.target_action_gap
            loss_cql = (alpha_prime.detach() * slack).sum()
            out["loss_alpha_prime"] = -0.5 * (alpha_prime * slack.detach()).sum()
            out["alpha_prime"] = alpha_prime.detach()
        else:
            loss_cql = self.cql_alpha * gap.sum()

        new_action, log_prob = actor.sample(obs)
        q_new = call_frozen(critic, obs, new_action).min(0).values
        out.update({
            "loss_critic": loss_td + loss_cql,
            "loss_actor": (alpha * log_prob - q_new).mean(),
            "loss_alpha": -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean(),
            "alpha": alpha,
            "cql_gap": gap.detach().mean(),
            "td_loss": loss_td.detach(),
            "entropy": -log_prob.detach().mean(),
            "q_value": q.detach().mean(),
            "td_error": td_error.detach().abs().max(0).values,
        })
        return out

    def update_targets(self) -> None:
        polyak_update(self.target_critic, self.critic, self.tau)
