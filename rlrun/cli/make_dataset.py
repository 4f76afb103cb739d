"""``rlrun dataset make``: offline datasets made with D4RL's recipe, through rlrun's own training.

* ``medium-replay``: the whole replay buffer of a SAC agent trained until its
  evaluation return reaches the env's "medium" level (``MEDIUM``), stopped there by
  ``eval.target_return``. The buffer comes from the run's final checkpoint
  (``checkpoint.buffer=true``), in the order it was collected.
* ``medium``: ``episodes`` episodes of that same SAC policy, sampling its actions.
* ``expert``: likewise from a SAC agent trained for its whole budget.

SAC runs as ``rlrun algo=sac env=<env> ...`` in a subprocess, in a run directory of its
own (``run_dir=``, default ``runs/datasets/sac-<env>-<level>-s<seed>``), so the
run is an ordinary rlrun run: it resumes after a kill, and a run that already reached
its target is reused rather than trained again. Every other ``key=value`` is passed to
that training run as an override (``total_frames=``, ``model.hidden=``, ...).

Replay-buffer episodes are the buffer's trajectories (``collector.traj_ids``), so
several sub-envs' interleaved steps are told apart. An episode ends where it
terminated or was truncated, with the flag it had; the last, unfinished episode
of each sub-env is cut by the end of training and is marked truncated (a cut
bootstraps, as a time limit does), as minari's ``DataCollector`` marks it.
Actions are stored in the env's own action space (rlrun's policies act in
[-1, 1]; ``rlrun.lifecycle.load.ActionMap`` maps them back).
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlrun.core import saved
from rlrun.core.errors import ConfigError, RlrunError, did_you_mean
from rlrun.core.rundir import git_commit
from rlrun.datasets.scores import D4RL_REFERENCE

if TYPE_CHECKING:
    import torch

    from rlrun.datasets.minari_format import Episode
# torch, gymnasium and h5py are imported where data is handled, so bad input fails fast

KINDS = ("medium-replay", "medium", "expert")


@dataclass(frozen=True)
class EnvRecipe:
    """How datasets of one env are made.

    Attributes:
        medium_return: Evaluation return at which SAC counts as "medium".
        why: Where that threshold comes from.
        episodes: Episodes of a ``medium`` or ``expert`` dataset.
        sac: SAC overrides of the medium run (budget cap, evaluation cadence).
        expert_sac: SAC overrides of the expert run (its full budget).
    """

    medium_return: float
    why: str
    episodes: int
    sac: tuple[str, ...]
    expert_sac: tuple[str, ...] = ()


_MUJOCO_SAC = ("total_frames=1000000", "eval.interval_frames=5000", "eval.episodes=5")
# D4RL: "medium" is a SAC policy early-stopped at about a third of an expert's return.
RECIPES: dict[str, EnvRecipe] = {
    "pendulum": EnvRecipe(
        -800.0, "Pendulum-v1 has no D4RL reference: a random policy returns about -1200 and a "
        "trained SAC about -150, so a third of the way up is about -800", 50,
        # CI-sized: small networks and frequent short evaluations; stops at the threshold
        # after a few thousand frames, or at the 6000-frame cap
        ("total_frames=6000", "collector.frames_per_batch=250", "collector.init_random_frames=500",
         "model.hidden=[64,64]", "model.critic_hidden=[64,64]", "buffer.batch_size=128",
         "eval.interval_frames=500", "eval.episodes=5"),
        ("total_frames=20000", "eval.interval_frames=5000")),
    "halfcheetah": EnvRecipe(
        4000.0, "a third of D4RL's expert return 12135 (D4RL's medium level: 'about 1/3 of expert')",
        1000, _MUJOCO_SAC),
    "hopper": EnvRecipe(
        1100.0, "a third of D4RL's expert return 3234", 1000, _MUJOCO_SAC),
    "walker2d": EnvRecipe(
        1500.0, "a third of D4RL's expert return 4592", 1000, _MUJOCO_SAC),
}
# make's own keys; every other key=value goes to the SAC run
MAKE_KEYS = ("env", "kind", "seed", "episodes", "threshold", "root", "run_dir", "version", "overwrite")
# the buffer must hold the env's own rewards (not scaled or clipped learning rewards)
_FORBIDDEN = ("env.reward_scale", "env.reward_clip", "env.id", "algo")


def recipe(env: str) -> EnvRecipe:
    if env not in RECIPES:
        raise ConfigError(f"no dataset recipe for env {env!r}.{did_you_mean(env, RECIPES)}", key="env",
                          fix=f"use one of: {', '.join(RECIPES)}")
    return RECIPES[env]


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ConfigError(f"unknown dataset kind {kind!r}.{did_you_mean(kind, KINDS)}", key="kind",
                          fix=f"use one of: {', '.join(KINDS)}")
    return kind


def dataset_id(env: str, kind: str, version: int = 0) -> str:
    """``rlrun/<env>/<kind>-v<version>``."""
    return f"rlrun/{env}/{kind}-v{version}"


# -- the SAC run ---------------------------------------------------------------------------------

def _summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "summary.json"
    return saved.load_summary(path) if path.is_file() else None


def _reached(summary: dict[str, Any] | None, threshold: float | None) -> bool:
    """A finished run that stopped at ``threshold`` (None: that ran its whole budget)."""
    if summary is None or summary.get("status") != "finished":
        return False
    if threshold is None:
        return summary["frames"] >= summary["total_frames"]
    return (summary.get("eval/episode_return") is not None
            and summary["eval/episode_return"] >= threshold) or summary["frames"] >= summary["total_frames"]


def train_sac(env: str, run_dir: Path, seed: int, threshold: float | None, overrides: list[str]) -> dict:
    """Trains SAC with rlrun's CLI in ``run_dir`` (skipped if it is already done); its summary.

    Args:
        env: The env preset.
        run_dir: The run directory (resumed if it holds a checkpoint).
        seed: The run's seed.
        threshold: ``eval.target_return`` (None: train the whole budget).
        overrides: Further overrides, after the recipe's.
    """
    done = _summary(run_dir)
    if _reached(done, threshold):
        print(f"[rlrun] dataset: reusing the finished SAC run {run_dir} "
              f"({done['frames']} frames, eval return {done.get('eval/episode_return')})", file=sys.stderr)
        return done
    args = [sys.executable, "-m", "rlrun.cli.main", "algo=sac", f"env={env}", f"seed={seed}",
            *(recipe(env).sac if threshold is not None else recipe(env).expert_sac),
            # the medium run's buffer is the medium-replay dataset: always in its checkpoints
            *([f"eval.target_return={threshold}", "checkpoint.buffer=true"] if threshold is not None else []),
            "logger=csv", *overrides, f"hydra.run.dir={run_dir}"]
    print(f"[rlrun] dataset: training {' '.join(args[3:])}", file=sys.stderr)
    proc = subprocess.run(args, stdout=sys.stderr)
    if proc.returncode == 2:
        raise ConfigError(f"the SAC run rejected its config (see above): {' '.join(overrides)}",
                          key="overrides", fix="pass valid rlrun overrides (see `rlrun --cfg job algo=sac`)")
    if proc.returncode != 0:
        raise RlrunError(f"the SAC run in {run_dir} failed with exit code {proc.returncode}",
                         fix="rerun the same command to continue it from its last checkpoint")
    summary = _summary(run_dir)
    if summary is None:
        raise RlrunError(f"the SAC run in {run_dir} wrote no summary.json")
    return summary


# -- episodes from a replay buffer ---------------------------------------------------------------

def _time_order(x: torch.Tensor, cursor: int, length: int, capacity: int) -> np.ndarray:
    # a wrapped ring holds its oldest row at the cursor
    x = x.numpy()
    return np.concatenate([x[cursor:], x[:cursor]]) if length == capacity and cursor else x


def buffer_episodes(buffer_state: dict[str, Any], capacity: int, action_map: Any) -> list[Episode]:
    """The episodes of a replay buffer's ``state_dict`` (``rlrun.buffers.ReplayBuffer``).

    Rows are grouped by trajectory id (stable, so each keeps its time order); each
    trajectory is one episode, ending with its own terminated/truncated flags, or
    marked truncated if it was cut by the end of collection.

    Args:
        buffer_state: ``ReplayBuffer.state_dict()`` with its data.
        capacity: The buffer's capacity (to undo a wrap of the ring).
        action_map: Maps the policy's [-1, 1] actions to the env's (``rlrun.lifecycle.load.ActionMap``).
    """
    import torch

    from rlrun.datasets.minari_format import episodes_from_transitions

    storage = buffer_state["storage"]
    if storage.get("data") is None:
        raise ConfigError("the SAC run's checkpoint holds no replay buffer", key="checkpoint.buffer",
                          fix="train the SAC run with checkpoint.buffer=true")
    data, cursor, length = storage["data"], int(storage["cursor"]), int(storage["length"])

    def col(x: torch.Tensor) -> np.ndarray:
        return _time_order(x, cursor, length, capacity)

    nxt = data["next"]
    traj = col(data["collector"]["traj_ids"]).reshape(-1)
    with torch.no_grad():
        action = col(action_map(data["action"]))
    order = np.argsort(traj, kind="stable")
    obs, act = col(data["observation"])[order], action[order]
    reward = col(nxt["reward"]).reshape(-1)[order].astype(np.float64)
    next_obs = col(nxt["observation"])[order]
    term = col(nxt["terminated"]).reshape(-1)[order]
    trunc = col(nxt["truncated"]).reshape(-1)[order]
    bounds = np.flatnonzero(np.diff(traj[order])) + 1
    episodes: list[Episode] = []
    for s, e in zip(np.r_[0, bounds], np.r_[bounds, len(traj)]):
        cut = not (term[e - 1] or trunc[e - 1])
        tr = trunc[s:e].copy()
        tr[-1] |= cut
        # within one trajectory there is no end but the last: one episode, checked for continuity
        (ep,) = episodes_from_transitions(obs[s:e], act[s:e], reward[s:e], next_obs[s:e], term[s:e], tr)
        episodes.append(ep)
    return episodes


# -- episodes of a trained policy ----------------------------------------------------------------

def rollout_episodes(policy: Any, env_id: str, episodes: int, seed: int, num_envs: int = 10) -> list[Episode]:
    """``episodes`` whole episodes of ``policy`` (env actions from observations) on ``env_id``.

    Each of ``num_envs`` sub-envs runs its share of episodes; steps past a
    sub-env's share are discarded, so that short episodes are not favoured.
    """
    import gymnasium as gym

    from rlrun.datasets.minari_format import episodes_from_transitions

    n = max(1, min(num_envs, episodes))
    quota = np.full(n, episodes // n) + (np.arange(n) < episodes % n)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, _ = envs.reset(seed=seed)
    done_count = np.zeros(n, np.int64)
    keys = ("obs", "act", "rew", "next", "term", "trunc", "live")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    while (done_count < quota).any():
        action = policy(obs.astype(np.float32))
        next_obs, reward, term, trunc, info = envs.step(action)
        ended = term | trunc
        final = next_obs.copy()
        if ended.any():  # same-step autoreset: next_obs is already the reset one
            final[ended] = np.stack(info["final_obs"][ended])
        for k, v in zip(cols, (obs, action, reward, final, term, trunc, done_count < quota)):
            cols[k].append(np.asarray(v))
        done_count += ended
        obs = next_obs
    envs.close()
    arrays = {k: np.stack(v, 1) for k, v in cols.items()}  # [n, T, ...]
    out: list[Episode] = []
    for i in range(n):
        keep = arrays["live"][i]
        eps = episodes_from_transitions(*(arrays[k][i][keep] for k in ("obs", "act", "rew", "next", "term",
                                                                       "trunc")))
        out.extend(eps[:quota[i]])
    return out


# -- make ----------------------------------------------------------------------------------------

def _int_arg(own: dict[str, str], key: str, default: int, low: int, high: int) -> int:
    text = own.get(key)
    try:
        value = default if text is None else int(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ConfigError(f"must be an integer >= {low} and <= {high}, got {text!r}", key=key,
                          fix=f"e.g. {key}={max(low, default)}")
    return value


def _float_arg(own: dict[str, str], key: str, default: float) -> float:
    text = own.get(key)
    try:
        value = default if text is None else float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {text!r}", key=key, fix=f"e.g. {key}={default}")
    return value


def _bool_arg(own: dict[str, str], key: str) -> bool:
    text = own.get(key, "false").lower()
    if text not in ("1", "true", "yes", "0", "false", "no"):
        raise ConfigError(f"must be true or false, got {own[key]!r}", key=key,
                          fix=f"{key}=true or {key}=false")
    return text in ("1", "true", "yes")


def _parse(args: list[str]) -> tuple[dict[str, str], list[str]]:
    own, rest = {}, []
    for a in args:
        key, eq, value = a.partition("=")
        if not eq:
            raise ConfigError(f"expected key=value, got {a!r}", key=a,
                              fix="e.g. rlrun dataset make env=pendulum kind=medium-replay")
        if key in MAKE_KEYS:
            own[key] = value
        elif key.lstrip("+~") in _FORBIDDEN:
            raise ConfigError("a dataset's SAC run keeps the env's own rewards, id and algorithm", key=key,
                              fix="leave this key out of `rlrun dataset make`")
        else:
            rest.append(a)
    return own, rest


def make(args: list[str]) -> Path:
    """``rlrun dataset make env=<env> kind=<kind> [key=value ...]``; the dataset's directory.

    Keys: ``env``, ``kind``, ``seed`` (0), ``episodes`` (medium/expert; the recipe's),
    ``threshold`` (the medium return; the recipe's), ``root`` (datasets root),
    ``run_dir`` (the SAC run), ``version`` (0), ``overwrite`` (false); anything else
    is an override of the SAC run.
    """
    own, overrides = _parse(args)
    for key in ("env", "kind"):
        if key not in own:
            raise ConfigError(f"missing {key}=", key=key,
                              fix="e.g. rlrun dataset make env=pendulum kind=medium-replay")
    env, kind = own["env"], check_kind(own["kind"])
    rec = recipe(env)
    # every argument checked here, before the SAC run trains for minutes (episodes=-3 failed after it)
    seed = _int_arg(own, "seed", 0, 0, 2**32 - 1)
    version = _int_arg(own, "version", 0, 0, 10**6)
    episodes = _int_arg(own, "episodes", rec.episodes, 1, 10**7)
    threshold = _float_arg(own, "threshold", rec.medium_return)
    overwrite = _bool_arg(own, "overwrite")
    level = "expert" if kind == "expert" else "medium"
    run_dir = Path(own.get("run_dir") or Path("runs") / "datasets" / f"sac-{env}-{level}-s{seed}").resolve()
    did = dataset_id(env, kind, version)
    root = own.get("root")
    from rlrun.datasets.minari_format import dataset_path

    if dataset_path(did, root).exists() and not overwrite:
        raise ConfigError(f"dataset {did} already exists at {dataset_path(did, root)}", key="version",
                          fix="pass version=<k+1>, or overwrite=true")

    summary = train_sac(env, run_dir, seed, threshold if level == "medium" else None, overrides)
    reached = summary.get("eval/episode_return")
    if level == "medium" and (reached is None or reached < threshold):
        print(f"[rlrun] dataset: warning: SAC stopped at {summary['frames']} frames with eval return "
              f"{reached}, below the medium threshold {threshold} (raise total_frames=)", file=sys.stderr)

    import gymnasium as gym
    from omegaconf import OmegaConf

    from rlrun.core import checkpoint
    from rlrun.datasets.minari_format import write_dataset
    from rlrun.lifecycle.load import load

    policy = load(run_dir, deterministic=False)
    cfg = policy.config
    env_id = str(cfg.env.id)
    if kind == "medium-replay":
        state = checkpoint.load(run_dir / "checkpoint.pt")
        episodes_ = buffer_episodes(state["buffer"], int(cfg.buffer.capacity), policy.action_map)
        algorithm = f"SAC replay buffer until eval return {threshold} (rlrun)"
    else:
        episodes_ = rollout_episodes(policy, env_id, episodes, seed + 1_000_003)
        algorithm = f"SAC policy ({level}, sampled actions) (rlrun)"
    spec_env = gym.make(env_id)
    obs_space, act_space = spec_env.observation_space, spec_env.action_space
    spec_env.close()
    ref = D4RL_REFERENCE.get(env)
    from importlib.metadata import version as pkg_version

    receipts = {
        "seed": seed, "git_commit": git_commit(), "env_id": env_id, "kind": kind,
        "source": str(run_dir), "sac_frames": int(summary["frames"]),
        "sac_eval_return": reached, "medium_threshold": threshold if level == "medium" else None,
        "threshold_reason": rec.why if level == "medium" else None,
        "threshold_reached": (bool(reached is not None and reached >= threshold)
                              if level == "medium" else None),
        "sac_overrides": [*(rec.sac if level == "medium" else rec.expert_sac), *overrides],
        "sac_config": OmegaConf.to_container(cfg, resolve=True),
        "mujoco_version": _version_or_none(pkg_version, "mujoco"),
    }
    path = write_dataset(did, episodes_, obs_space, act_space, env_spec=env_id, root=root,
                         algorithm_name=algorithm, ref_min_score=ref[0] if ref else None,
                         ref_max_score=ref[1] if ref else None,
                         description=f"{kind} dataset of {env_id} made with D4RL's recipe by rlrun "
                         "(regenerated, not D4RL's data)", receipts=receipts, overwrite=overwrite)
    steps = sum(len(e.rewards) for e in episodes_)
    returns = np.array([e.rewards.sum() for e in episodes_])
    print(f"[rlrun] dataset {did}: {len(episodes_)} episodes, {steps} steps, return mean "
          f"{returns.mean():.1f} (min {returns.min():.1f}, max {returns.max():.1f}) -> {path}",
          file=sys.stderr)
    return path


def _version_or_none(fn, pkg: str) -> str | None:
    try:
        return fn(pkg)
    except Exception:
        return None
