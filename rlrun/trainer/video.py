"""Videos of evaluation episodes, with gymnasium's ``RecordVideo`` on render envs of their own.

A render env is the run's env config built with ``render_mode="rgb_array"``,
synchronous sub-envs (so that each can be wrapped), and ``RecordVideo`` around
the sub-envs whose episodes are kept. Nothing of it exists unless a video is
asked for, and it never shares an RNG with the training or evaluation envs:

- in training (``eval.video=true``), ``EvalVideo`` replays the first episode of
  every ``eval.video_every``-th evaluation on a one-sub-env render env reset with
  the evaluation's seed (the seed of the evaluation env's first sub-env), keeps the
  MP4 in ``<run dir>/videos/`` and logs it to the tracker;
- ``rlrun eval <run> video=true`` records every evaluation episode.

MuJoCo renders off-screen with EGL where there is no display (``MUJOCO_GL=egl``,
needing ``libegl1 libgbm1 libgl1-mesa-dri``); MP4s are written by ``moviepy`` with
the ffmpeg that ``imageio-ffmpeg`` ships (``pip install 'rlrun[video]'``).
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlrun.core.errors import ConfigError
from rlrun.core.registry import build, lookup
from rlrun.trainer.evaluation import Evaluator
from rlrun.trainer.hooks import Hook

_FIX = "pip install 'rlrun[video]' (moviepy, imageio-ffmpeg, pygame)"


def headless_gl() -> None:
    """Off-screen rendering where there is no display: MuJoCo through EGL, pygame without a window."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (classic control) draws off-screen


def check_installed(key: str) -> None:
    try:
        import imageio_ffmpeg  # noqa: F401
        import moviepy  # noqa: F401
    except ImportError as err:
        raise ConfigError(f"videos need a package that is not installed ({err})", key=key, fix=_FIX) from None


def render_overrides(env_cfg: DictConfig | dict, key: str = "eval.video") -> dict[str, Any]:
    """Env config entries that make the run's env render ``rgb_array`` frames in synchronous sub-envs."""
    headless_gl()
    node = OmegaConf.to_container(env_cfg, resolve=True) if isinstance(env_cfg, DictConfig) else dict(env_cfg)
    params = inspect.signature(lookup("env", node.get("name", ""), key="env.name").factory).parameters
    if "make_kwargs" in params:
        return {"vectorization": "sync",
                "make_kwargs": {**(node.get("make_kwargs") or {}), "render_mode": "rgb_array"}}
    if "render_mode" in params:
        return {"vectorization": "sync", "render_mode": "rgb_array"}
    raise ConfigError(f"env {node.get('name')!r} takes no render mode, so it cannot be recorded", key=key,
                      fix="leave videos off, or give the env factory a make_kwargs or render_mode argument")


def render_env(env_cfg: DictConfig | dict, num_envs: int, key: str = "eval.video") -> Any:
    """The run's env with ``num_envs`` synchronous sub-envs that render ``rgb_array`` frames."""
    node = OmegaConf.to_container(env_cfg, resolve=True) if isinstance(env_cfg, DictConfig) else dict(env_cfg)
    return build("env", {**node, "num_envs": num_envs, **render_overrides(node, key)}, key="env")


def record(env: Any, folder: Path, episodes: Sequence[int], prefix: str = "") -> None:
    """Wraps sub-env ``i`` of a ``render_env`` in ``RecordVideo`` keeping its first ``episodes[i]`` episodes.

    Files: ``<folder>/<prefix>env<i>-episode-<j>.mp4`` (``j`` counts resets of that sub-env).
    """
    from gymnasium.wrappers import RecordVideo

    folder.mkdir(parents=True, exist_ok=True)
    subs = env.env.envs
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
        for i, keep in enumerate(episodes):
            subs[i] = RecordVideo(subs[i], str(folder), episode_trigger=lambda ep, keep=keep: ep < keep,
                                  name_prefix=f"{prefix}env{i}", disable_logger=True)


class EvalVideo(Hook):
    """Records the first episode of every ``every``-th evaluation (``eval.video``) as an MP4 artifact.

    Args:
        env_cfg: The run's env config (a render env is built from it for each recording).
        seed: The evaluation's reset seed.
        folder: Where the MP4s are kept (``<run dir>/videos``).
        every: Record every k-th evaluation (1: each).
        device: Where the policy acts.
    """

    def __init__(self, env_cfg: DictConfig, seed: int, folder: Path, every: int = 1, device: str = "cpu"):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"must be an integer >= 1, got {every!r}", key="eval.video_every",
                              fix="e.g. eval.video_every=1 (each evaluation) or 5")
        check_installed("eval.video")
        headless_gl()
        self.env_cfg, self.seed, self.folder, self.device = env_cfg, seed, folder, device
        self.every_nth = every  # not `every`: Hook.every declares dispatch filters
        self.evaluations = 0
        self.files: list[Path] = []

    def post_eval(self, trainer, metrics: dict[str, float]) -> None:
        self.evaluations += 1
        if (self.evaluations - 1) % self.every_nth:
            return
        # built and closed per recording: no render context or open file lives between evaluations
        env = render_env(self.env_cfg, 1)
        tmp = self.folder / ".recording"
        try:
            record(env, tmp, [1])
            Evaluator(env, 1, self.seed, device=self.device).evaluate(trainer.policy.act)
        finally:
            env.close()
        dst = self.folder / f"eval-frame{trainer.frames:010d}.mp4"
        os.replace(tmp / "env0-episode-0.mp4", dst)
        self.files.append(dst)
        if trainer.logger is not None:
            trainer.logger.log_artifact(dst)

    def state_dict(self) -> dict:
        return {"evaluations": self.evaluations}

    def load_state_dict(self, state: dict) -> None:
        self.evaluations = int(state["evaluations"])
