"""Gymnasium vector envs behind a small array interface.

``GymVecEnv`` wraps ``gymnasium.make_vec`` (sync or async) in SAME_STEP
autoreset mode: when a sub-env ends, ``step`` returns its reset observation and
gymnasium hands the true final observation in ``info["final_obs"]``. The
adapter puts that final observation in ``next_obs`` so the collector never
records a fake transition (NEXT_STEP mode would emit one step that ignores the
action) and bootstrapping through truncation sees the real last state.

Per-sub-env transforms use gymnasium's own wrappers: float64 -> float32
(``DtypeObservation``), action rescaling to [-1, 1] (``RescaleAction``) and
clipping (``ClipAction``), the time limit, and later Atari preprocessing.
Observation normalisation lives in the networks (``ObservationNormalizer``):
it then acts identically on observations, final observations and evaluation,
which an observation wrapper cannot do for ``info["final_obs"]``.

Env quirks that change only the learning signal live here too, applied by the
collector once per batch: reward clipping and scaling (``learning_reward``)
and learning-only terminals such as Atari's lost lives (``learning_terminal``,
set by ``rlrun.envs.atari``). Logged and evaluated returns stay the env's own.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import sys
import warnings
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from torch import Tensor

from rlrun.core.envs import EnvStep
from rlrun.core.errors import ConfigError, did_you_mean
from rlrun.core.registry import Footprint, PositiveFloat, PositiveInt, register
from rlrun.core.specs import EnvSpec
from rlrun.envs.ids import check_registered


def _wrappers(rescale_actions: bool, clip_actions: bool, float32: bool) -> list[Callable]:
    wrappers: list[Callable] = []
    if float32:
        wrappers.append(_to_float32)
    if rescale_actions:
        wrappers.append(_rescale)
    if clip_actions:
        wrappers.append(_clip)
    return wrappers


def _to_float32(env: gym.Env) -> gym.Env:
    space = env.observation_space
    if isinstance(space, gym.spaces.Box) and space.dtype == np.float64:
        # Casting the bounds to float32 is the point of this wrapper (the networks run in float32),
        # so gymnasium's "Box low's/high's precision lowered" warning says nothing the user can act
        # on; it reached stderr before rlrun's own output on every MuJoCo env (issue 25 §6).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*precision lowered by casting to float32")
            return gym.wrappers.DtypeObservation(env, np.float32)
    return env


def _rescale(env: gym.Env) -> gym.Env:
    if isinstance(env.action_space, gym.spaces.Box):
        space = env.action_space
        return gym.wrappers.RescaleAction(env, np.full(space.shape, -1.0, space.dtype),
                                          np.full(space.shape, 1.0, space.dtype))
    return env


def _clip(env: gym.Env) -> gym.Env:
    if isinstance(env.action_space, gym.spaces.Box):
        return gym.wrappers.ClipAction(env)
    return env


def set_learning_signal(env: Any, reward_clip: str | None, reward_scale: float) -> None:
    """Checks and sets what ``GymVecEnv.learning_reward`` reads (every backend shares it):
    ``reward_clip``, ``reward_scale`` and ``learning_terminal`` (None: episodes end as the env says)."""
    if reward_clip not in (None, "sign"):
        raise ConfigError(f"unknown reward_clip {reward_clip!r}", key="env.reward_clip",
                          fix="use null or sign")
    env.reward_clip, env.reward_scale = reward_clip, reward_scale
    env.learning_terminal = None


class GymVecEnv:
    """A gymnasium vector env that returns plain numpy arrays.

    Args:
        id: Gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: Number of sub-envs.
        vectorization: ``"sync"`` (one process) or ``"async"`` (one process per sub-env).
        max_episode_steps: Overrides the id's time limit (truncation).
        rescale_actions: Box actions are rescaled so the policy acts in [-1, 1].
        clip_actions: Box actions are clipped to the bounds (Normal policies).
        extra_wrappers: More per-sub-env wrappers, applied after the above.
        make_kwargs: Extra keyword arguments for ``gymnasium.make``.
        reward_clip: ``"sign"`` clips learning rewards to {-1, 0, 1} (DeepMind's Atari set-up).
        reward_scale: Multiplies learning rewards.

    Attributes:
        learning_terminal: None, or after each step a bool array of sub-envs whose
            step ends the learning signal but not the episode (set by subclasses).

    Examples:
        >>> env = GymVecEnv("Pendulum-v1", num_envs=2)
        >>> obs = env.reset(seed=0)
        >>> step = env.step(np.zeros((2, 1), np.float32))     # an EnvStep of numpy arrays
        >>> step.reward.shape, step.terminated.shape
        ((2,), (2,))
    """

    def __init__(
        self,
        id: str,
        num_envs: int = 1,
        vectorization: str = "sync",
        max_episode_steps: int | None = None,
        rescale_actions: bool = True,
        clip_actions: bool = True,
        extra_wrappers: list[Callable] | None = None,
        make_kwargs: dict[str, Any] | None = None,
        reward_clip: str | None = None,
        reward_scale: float = 1.0,
    ):
        if vectorization not in ("sync", "async"):
            raise ConfigError(f"unknown vectorization {vectorization!r}", key="env.vectorization",
                              fix="use env.vectorization=sync or env.vectorization=async")
        _check_id(id)
        check_make_kwargs(id, make_kwargs)  # here too: a custom id is registered only by now
        _quiet_mujoco(id)
        wrappers = _wrappers(rescale_actions, clip_actions, float32=True) + list(extra_wrappers or [])
        set_learning_signal(self, reward_clip, reward_scale)
        self.id, self.num_envs = id, num_envs
        # rebuilds this env in another process (multi-process collectors pickle it with cloudpickle)
        self.factory = functools.partial(GymVecEnv, id, num_envs, vectorization, max_episode_steps,
                                         rescale_actions, clip_actions, extra_wrappers, make_kwargs,
                                         reward_clip, reward_scale)
        try:
            self.env = gym.make_vec(
                id, num_envs=num_envs, vectorization_mode=vectorization,
                vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, wrappers=wrappers,
                **({"max_episode_steps": max_episode_steps} if max_episode_steps else {}),
                **(make_kwargs or {}),
            )
        except gym.error.DependencyNotInstalled as err:
            raise ConfigError(f"{id} needs a package that is not installed ({err})", key="env.id",
                              fix="install the env family's extra, e.g. pip install 'rlrun[mujoco]'"
                              ) from None
        # ClipAction widens the visible space to (-inf, inf): take bounds from below it.
        act_space = self.env.single_action_space
        if clip_actions and isinstance(act_space, gym.spaces.Box):
            act_space = (gym.spaces.Box(-1.0, 1.0, act_space.shape, np.float32) if rescale_actions
                         else gym.make(id, **(make_kwargs or {})).action_space)
        self.spec = _spec(self.env.single_observation_space, act_space)

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        return obs

    def step(self, action: np.ndarray) -> EnvStep:
        """Steps every sub-env: an ``EnvStep`` of numpy arrays. ``next_obs`` is the
        observation each action led to (the true final one where an episode ended);
        ``obs`` is where each sub-env continues from (its reset observation where an
        episode ended, else ``next_obs`` itself)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._after_step(info, terminated | truncated)
        next_obs = obs
        if "_final_obs" in info:  # only on steps where some episode ended
            mask = info["_final_obs"]
            next_obs = obs.copy()
            next_obs[mask] = np.stack(info["final_obs"][mask])
        return EnvStep(next_obs, reward, terminated, truncated, obs)

    def _after_step(self, info: dict, done: np.ndarray) -> None:
        """Subclasses read the step's info here (e.g. lives); plain envs have nothing to do."""

    def learning_reward(self, reward: Tensor) -> Tensor:
        """The learning signal of a batch of raw rewards (clipped and/or scaled)."""
        if self.reward_clip == "sign":
            reward = reward.sign()
        if self.reward_scale != 1.0:
            reward = reward * self.reward_scale
        return reward

    def close(self) -> None:
        self.env.close()


def import_env_modules(modules: list[str] | None) -> None:
    """Imports the modules that register envs (``env.imports``), with a clear error if one is missing."""
    for module in modules or []:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(f"cannot import {module!r} ({err})", key="env.imports",
                              fix="install the package, or put its folder on PYTHONPATH") from None


def _mujoco_warning(text: str) -> None:
    # MuJoCo 3.3+ warns on every model load that gymnasium's v5 XMLs use deprecated
    # attributes (settotalmass): one line per sub-env and evaluation env, nothing the
    # user can act on. Those go to the debug log; every other MuJoCo warning is printed.
    if "is deprecated" in text:
        logging.getLogger("rlrun.envs").debug("mujoco: %s", text)
    else:
        print(f"MuJoCo warning: {text}", file=sys.stderr)


def _quiet_mujoco(id: str) -> None:
    """Routes MuJoCo's deprecation warnings to the debug log, for envs that load MuJoCo."""
    entry = getattr(gym.spec(id.rpartition(":")[2]), "entry_point", "")
    if "mujoco" not in str(entry):
        return
    import mujoco

    if hasattr(mujoco, "set_mju_user_warning"):
        mujoco.set_mju_user_warning(_mujoco_warning)


def _check_id(id: str) -> None:
    """Fails early, with the fix, when the id is not registered in gymnasium.

    ``module:EnvName-vN`` (gymnasium's own syntax) imports ``module`` first, as
    ``gymnasium.make`` does, so that a package registering envs on import needs no other step.
    """
    module, _, name = id.rpartition(":")
    if module:
        import_env_modules([module])
    check_registered(id, name)


# gymnasium.make's own keywords (the rest go to the env's constructor), and rlrun's options that
# make_vec is given itself: in make_kwargs they would clash ("got multiple values").
_MAKE_KEYWORDS = ("disable_env_checker",)
_RLRUN_OPTIONS = {"max_episode_steps": "env.max_episode_steps", "num_envs": "env.num_envs",
                  "vectorization_mode": "env.vectorization", "wrappers": None, "vector_kwargs": None}


def env_keywords(id: str) -> list[str] | None:
    """The keywords ``gymnasium.make(id, **kw)`` accepts: the constructor's (the spec's entry
    point) and make's own; None when the entry point takes ``**kwargs`` (anything goes)."""
    spec = gym.spec(id.rpartition(":")[2])
    entry = spec.entry_point
    if isinstance(entry, str):  # "package.module:Attr": the module gymnasium.make imports anyway
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
    try:
        params = inspect.signature(entry).parameters
    except (TypeError, ValueError):  # a builtin or C constructor: nothing to check against
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return sorted({n for n, p in params.items() if p.kind is not p.VAR_POSITIONAL} | set(_MAKE_KEYWORDS))


def check_make_kwargs(id: str, make_kwargs: dict | None, key: str = "env.make_kwargs") -> None:
    """Refuses a ``make_kwargs`` key the env's constructor does not take (it was a TypeError from
    inside the first sub-env), naming the keywords it does take."""
    if not make_kwargs:
        return
    for name in make_kwargs:
        if name in _RLRUN_OPTIONS:
            where = _RLRUN_OPTIONS[name]
            raise ConfigError("is an option of rlrun's env, not of the env's constructor",
                              key=f"{key}.{name}",
                              fix=f"set {where}=... instead" if where else f"remove {key}.{name}")
    try:
        accepted = env_keywords(id)
    except (gym.error.Error, ImportError, AttributeError):
        return  # an unknown id or a missing extra: _check_id and make report it, naming env.id
    if accepted is None:
        return
    for name in make_kwargs:
        if name not in accepted:
            raise ConfigError(f"{id} does not take the keyword {name!r}.{did_you_mean(str(name), accepted)}",
                              key=f"{key}.{name}",
                              fix=f"remove it; {id} takes: {', '.join(accepted) or 'no keywords'}")


def _check_options(options: dict, key: str) -> Footprint:
    """The config-time check of a gym env node (``registry.register(check=...)``): its
    ``make_kwargs`` against the constructor, and what its sub-envs hold in memory."""
    if not str(options["id"]).rpartition(":")[0]:  # a module:id registers its envs when built
        check_make_kwargs(options["id"], options.get("make_kwargs"), f"{key}.make_kwargs")
    return Footprint(
        count=int(options["num_envs"]), count_key=f"{key}.num_envs",
        # a sync sub-env holds ~2.7 KB of Python objects (CartPole, tracemalloc); an async one is
        # a process (~50 MB resident): lower bounds, so that only an impossible run is refused
        each_bytes=8 * 2**20 if options.get("vectorization") == "async" else 2048,
        transition_bytes=lambda: _transition_bytes(options["id"], options.get("make_kwargs")))


def _transition_bytes(id: str, make_kwargs: dict | None) -> int:
    """Bytes of one stored transition (observation, next observation, action) of one env."""
    env = gym.make(id, **(make_kwargs or {}))
    try:
        obs, act = env.observation_space, env.action_space
        itemsize = 4 if obs.dtype == np.float64 else np.dtype(obs.dtype).itemsize  # cast to float32
        act_bytes = int(np.prod(act.shape or (1,))) * 4
        return 2 * int(np.prod(obs.shape or (1,))) * itemsize + act_bytes
    finally:
        env.close()


def _spec(obs_space: gym.Space, act_space: gym.Space) -> EnvSpec:
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(f"observation space {obs_space} is not a Box", key="env.id",
                          fix="wrap the env so that it returns array observations")
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(obs_space.shape, obs_space.dtype, True, int(act_space.n))
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        low, high = float(act_space.low.min()), float(act_space.high.max())
        return EnvSpec(obs_space.shape, obs_space.dtype, False, act_space.shape[0], low, high)
    raise ConfigError(f"action space {act_space} is not supported", key="env.id",
                      fix="use an env with a Discrete or 1-D Box action space")


# Other libraries that step the same ids (``env.backend``): name -> a GymVecEnv-like class made
# as cls(id, num_envs, max_episode_steps, rescale_actions, clip_actions, make_kwargs, reward_clip,
# reward_scale). Their modules add themselves (rlrun.envs.envpool), imported with the components,
# so this module imports none of them.
BACKENDS: dict[str, Callable[..., Any]] = {}


@register("env", "gym", check=_check_options)
def make_gym_env(
    id: str,
    num_envs: PositiveInt = 1,
    vectorization: Literal["sync", "async"] = "sync",
    max_episode_steps: PositiveInt | None = None,
    rescale_actions: bool = True,
    clip_actions: bool = True,
    make_kwargs: dict | None = None,
    reward_clip: Literal["sign"] | None = None,
    reward_scale: PositiveFloat = 1.0,
    imports: list[str] | None = None,
    backend: Literal["gymnasium", "envpool"] = "gymnasium",
) -> GymVecEnv:
    """A gymnasium env id as a vector env (sync or async), SAME_STEP autoreset.

    ``id`` may be ``module:EnvName-vN``; ``imports`` names modules to import first (those
    that register custom envs); ``make_kwargs`` go to the env's constructor.
    ``backend=envpool``: the same env stepped by EnvPool (``rlrun.envs.envpool``); a render
    mode (videos) keeps gymnasium, whose sub-envs the recorder wraps.
    """
    if backend != "gymnasium" and "render_mode" not in (make_kwargs or {}):
        return BACKENDS[backend](id, num_envs, max_episode_steps, rescale_actions, clip_actions,
                                 make_kwargs, reward_clip, reward_scale)
    import_env_modules(imports)
    return GymVecEnv(id, num_envs, vectorization, max_episode_steps, rescale_actions,
                     clip_actions, None, make_kwargs, reward_clip, reward_scale)
