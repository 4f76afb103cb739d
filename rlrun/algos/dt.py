"""Decision Transformer (Chen et al. 2021) and online DT (Zheng et al. 2022) on the one loop.

- ``model=dt``: a ``DTPolicy`` wrapping ``rlrun.modules.transformer.DecisionTransformer``;
  it acts on a rolling context of the last ``eval_context`` steps of each sub-env,
  conditioned on ``target_return`` (scaled like the training returns-to-go) and
  decremented by each observed reward (the evaluator calls ``reset_context`` and
  ``record``, which Markov policies do not have);
- ``buffer=trajectory_slices``: the dataset as ``[B, K]`` slices drawn in proportion
  to episode length (``TrajectorySliceSampler``), in the buffer's place;
- ``loss=dt``: masked L2 on the deterministic head; ``loss=odt``: online DT's
  log-likelihood with entropy regularisation and a learned temperature.

Observations are normalised with the dataset's statistics (the policy's normaliser,
set by ``rlrun.collectors.dataset.normalize_from_dataset`` and saved with the policy).
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from rlrun.core.contracts import Loss
from rlrun.core.errors import ConfigError
from rlrun.core.policy import Policy
from rlrun.core.registry import PositiveFloat, PositiveInt, Range, register
from rlrun.core.specs import EnvSpec
from rlrun.modules.networks import Hidden, ObservationNormalizer
from rlrun.modules.transformer import Activation, DecisionTransformer, DTLoss, ODTLoss, RollingContext

SLICE_KEYS = ("return_to_go", "observation", "action", "timestep", "mask")


class DTPolicy(Policy):
    """A Decision Transformer acting on a rolling per-episode context.

    ``act(obs)`` appends ``obs`` to the context of each sub-env and returns the
    model's action for the last step (dropout off); ``record(action, reward, done)``
    stores what happened, lowers the return-to-go by the reward and restarts the
    context of finished episodes; ``reset_context()`` starts every row afresh (the
    evaluator calls it before each evaluation). The context is sized on the first
    ``act`` after a reset by the number of rows it receives.

    Args:
        model: The transformer (``actor``: its ``head`` is the policy's).
        normalizer: Observation normaliser (dataset statistics), or None.
        target_return: Return conditioned on at each episode start (env units).
        rtg_scale: Returns-to-go are divided by this (as the training slices').
        eval_context: Steps of context when acting (Table 9: 20 for Hopper, 5 for HalfCheetah).
    """

    def __init__(self, model: DecisionTransformer, normalizer: nn.Module | None, target_return: float,
                 rtg_scale: float, eval_context: int):
        super().__init__(model, None, normalizer)
        self.target_return, self.rtg_scale, self.eval_context = float(target_return), rtg_scale, eval_context
        self._context: RollingContext | None = None

    @property
    def model(self) -> DecisionTransformer:
        return self.actor

    def normalize(self, obs: Tensor) -> Tensor:
        return obs if self.normalizer is None else self.normalizer(obs)

    def slice_inputs(self, td: TensorDict) -> dict[str, Tensor]:
        """The model's inputs from a batch of slices, observations normalised (a dict: no
        TensorDict built per update)."""
        inputs = {k: td[k] for k in SLICE_KEYS}
        inputs["observation"] = self.normalize(inputs["observation"].float())
        return inputs

    def reset_context(self, rows: Tensor | None = None) -> None:
        """Restarts the context of ``rows`` (all, and resized on the next ``act``, if None)."""
        if rows is None or self._context is None:
            self._context = None
        else:
            self._context.reset(rows)

    def act(self, obs: Tensor) -> Tensor:
        """The action for the newest step of each row, conditioned on what is left of the target."""
        ctx = self._context
        if ctx is None or ctx.observation.shape[0] != obs.shape[0]:
            ctx = self._context = RollingContext(obs.shape[0], self.eval_context, self.model.obs_dim,
                                                 self.model.action_dim, self.target_return, self.rtg_scale,
                                                 obs.device)
        inputs = ctx.observe(self.normalize(obs.float()))
        training = self.model.training
        if training:
            self.model.eval()  # no dropout when acting
        action = self.model.act(*inputs)
        if training:
            self.model.train()
        return action

    def sample_action(self, obs: Tensor, ctx: RollingContext) -> Tensor:
        """A tanh-Normal action sampled for the newest step of each row of ``ctx`` (online DT's
        collection; the caller records the step in ``ctx``)."""
        inputs = ctx.observe(self.normalize(obs.float()))
        mu, log_std = self.model(*inputs)[:, -1].chunk(2, -1)
        return torch.tanh(mu + log_std.exp() * torch.randn_like(mu))

    def record(self, action: Tensor, reward: Tensor, done: Tensor) -> None:
        """Stores the step's action and reward in the context; ``done`` rows restart."""
        if self._context is not None:
            self._context.record(action, reward.to(action.device), done.to(action.device))


@register("model", "dt")
def decision_transformer(spec: EnvSpec, hidden: PositiveInt = 128, n_layers: PositiveInt = 3,
                         n_heads: PositiveInt = 1,
                         max_timestep: PositiveInt = 1000,
                         dropout: Annotated[float, Range(ge=0, lt=1)] = 0.1, head: str = "deterministic",
                         activation: Activation = "relu", head_hidden: Hidden = (),
                         eval_context: PositiveInt = 20,
                         target_return: float = 0.0, rtg_scale: PositiveFloat = 1.0,
                         normalize_observations: bool = True) -> DTPolicy:
    """A Decision Transformer policy (``head``: deterministic for DT, tanh_normal for online DT).

    ``target_return`` is the return the policy is asked for at evaluation (env units);
    ``rtg_scale`` must be the buffer's (the algo presets interpolate it).
    """
    if spec.discrete:
        raise ConfigError("the Decision Transformer here needs continuous actions", key="model.name",
                          fix="pick a continuous-action env (pendulum, hopper, halfcheetah)")
    if head not in ("deterministic", "tanh_normal"):
        raise ConfigError(f"unknown head {head!r}", key="model.head", fix="use deterministic or tanh_normal")
    if hidden % n_heads:
        raise ConfigError(f"hidden={hidden} is not divisible by n_heads={n_heads}", key="model.n_heads",
                          fix="pick n_heads dividing model.hidden")
    if not rtg_scale > 0:
        raise ConfigError(f"must be > 0, got {rtg_scale}", key="buffer.rtg_scale", fix="e.g. 1000 (MuJoCo)")
    obs_dim = int(torch.tensor(spec.observation_shape).prod())
    model = DecisionTransformer(obs_dim, spec.action_dim, hidden, n_layers, n_heads, max_timestep, dropout,
                                head, activation, tuple(head_hidden))
    norm = ObservationNormalizer(spec.observation_shape) if normalize_observations else None
    return DTPolicy(model, norm, target_return, float(rtg_scale), eval_context)


class DatasetSlices:
    """A dataset's trajectory slices in the buffer's place: ``[B, K]`` batches, nothing stored.

    Checkpoints keep only the sampler's generator (``saved_nbytes`` is 0): the data is
    the dataset on disk.
    """

    sample_keys = frozenset({"observation", "action", "reward", "return_to_go", "timestep", "mask"})

    def __init__(self, sampler: Any, batch_size: int):
        self.sampler, self.batch_size = sampler, int(batch_size)

    def sample(self, batch_size: int | None = None) -> TensorDict:
        return self.sampler.sample(batch_size or self.batch_size)

    def __len__(self) -> int:
        return int(self.sampler.reward.shape[0])

    def saved_nbytes(self) -> int:
        return 0

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


def unit_actions(data: Any) -> Tensor:
    """The dataset's actions mapped from its Box bounds into [-1, 1], where the policy acts (the env
    rescales them back: ``rescale_actions``); datasets store them in the env's units."""
    low = torch.as_tensor(data.action_space.low, dtype=torch.float32)
    high = torch.as_tensor(data.action_space.high, dtype=torch.float32)
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        return data.action.float()
    return (2 * (data.action.float() - low) / (high - low) - 1).clamp(-1.0, 1.0)


@register("buffer", "trajectory_slices")
def trajectory_slices(data: Any, batch_size: PositiveInt = 64, slice_len: PositiveInt = 20,
                      rtg_scale: PositiveFloat = 1.0,
                      seed: int = 0, device: str = "cpu") -> DatasetSlices:
    """Slices of ``slice_len`` steps of the run's dataset, episodes drawn in proportion to length.

    Args:
        data: The dataset (supplied by rlrun from the run's ``dataset`` key).
        batch_size: Slices per optimiser step.
        slice_len: ``K``, the training context.
        rtg_scale: Returns-to-go are divided by this (DT: 1000 on MuJoCo).
        seed: The sampler's seed (the run's).
        device: Where batches live.
    """
    from rlrun.datasets.slices import TrajectorySliceSampler

    if slice_len < 1:
        raise ConfigError(f"must be >= 1, got {slice_len}", key="buffer.slice_len", fix="e.g. 20")
    if not rtg_scale > 0:
        raise ConfigError(f"must be > 0, got {rtg_scale}", key="buffer.rtg_scale", fix="e.g. 1000 (MuJoCo)")
    dev = torch.device(device)
    sampler = TrajectorySliceSampler(data.observation.to(dev), unit_actions(data).to(dev),
                                     data.reward.to(dev), data.episode_start.to(dev),
                                     data.episode_length.to(dev), slice_len,
                                     rtg_scale, seed)
    return DatasetSlices(sampler, batch_size)


def _check_policy(policy: Any, head: str, loss: str) -> None:
    if not isinstance(policy, DTPolicy):
        raise ConfigError(f"loss={loss} trains a Decision Transformer, not {type(policy).__name__}",
                          key="model", fix="use model=dt")
    if policy.head != head:
        raise ConfigError(f"loss={loss} needs a {head} head, not {policy.head}", key="model.head",
                          fix=f"set model.head={head}")


class _SliceLoss(Loss):
    action_spaces = ("continuous",)
    learns_from = ("dataset",)
    reads = SLICE_KEYS

    def __init__(self, policy: DTPolicy, inner: nn.Module):
        super().__init__(policy)
        # held outside the module tree: its model is the policy's (saved once, under policy.*)
        object.__setattr__(self, "_inner", inner)

    def forward(self, td: TensorDict) -> dict[str, Tensor]:
        return self._inner(self.policy.slice_inputs(td))

    def update_targets(self) -> None:
        raise TypeError(f"{type(self).__name__} has no target networks")


@register("loss", "dt")
class DTActionLoss(_SliceLoss):
    """DT's loss: mean squared error of the deterministic head's actions over valid steps
    (left padding of the slices is ignored)."""

    def __init__(self, policy: DTPolicy, spec: EnvSpec, gamma: float):
        _check_policy(policy, "deterministic", "dt")
        super().__init__(policy, DTLoss(policy.model))

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"model": list(self.policy.model.parameters())}


@register("loss", "odt")
class ODTActionLoss(_SliceLoss):
    """Online DT's loss: ``-(log-likelihood + temperature * entropy)`` over valid steps, and the
    temperature's own loss toward ``target_entropy`` (null: ``-action_dim``).

    Learns from a dataset: alone (offline), or from the online DT source's trajectory buffer.
    """

    learns_from = ("dataset",)

    def __init__(self, policy: DTPolicy, spec: EnvSpec, gamma: float, init_temperature: PositiveFloat = 0.1,
                 target_entropy: float | None = None):
        _check_policy(policy, "tanh_normal", "odt")
        if not init_temperature > 0:
            raise ConfigError(f"must be > 0, got {init_temperature}", key="loss.init_temperature",
                              fix="e.g. 0.1")
        inner = ODTLoss(policy.model, init_temperature, target_entropy)
        super().__init__(policy, inner)
        self.log_temperature = inner.log_temperature  # saved in the loss's state

    @property
    def target_entropy(self) -> float:
        return self._inner.target_entropy

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"model": list(self.policy.model.parameters()), "temperature": [self.log_temperature]}
