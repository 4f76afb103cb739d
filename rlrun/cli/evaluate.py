"""``rlrun eval <run dir or checkpoint> [key=value ...]``: evaluate a trained (or training) policy.

    episodes=N            episodes (default: the run's eval.episodes)
    seed=S                reset seed (default: the run's evaluation seed, seed + 1000003, so that
                          the run's own evaluation is reproduced exactly)
    deterministic=BOOL    the mode of the action distribution (default true); false: the
                          behaviour policy (sampling, or the exploration noise where it was)
    video=BOOL            MP4s of every episode (needs pip install 'rlrun[video]')
    device=D              cpu (default), cuda, cuda:N or auto
    out=FILE              the JSON of returns (default: <run dir>/eval/<frames>-<seed>-<mode>.json)

The policy is rebuilt from the run's own saved config (no overrides needed) with
its weights and observation normaliser; episodes run on the run's env, spread
over up to eval.max_envs sub-envs as in training. A run that is still training
is read from its last checkpoint without its lock and without writing to it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from rlrun.core.checkpoint import atomic_write_text
from rlrun.core.errors import ConfigError, RlrunError, did_you_mean
from rlrun.core.runfiles import check_file, check_tree
from rlrun.lifecycle.load import find_checkpoint, read, restore
from rlrun.trainer.builtins import EVAL_SEED_OFFSET
from rlrun.trainer.evaluation import Evaluator

OPTIONS = {"episodes": int, "seed": int, "deterministic": bool, "video": bool, "device": str, "out": str,
           "trust_code": bool}


def evaluate(path: str | Path, episodes: int | None = None, seed: int | None = None,
             deterministic: bool = True, video: bool = False, device: str = "cpu",
             out: str | Path | None = None, trust_code: bool = False) -> dict[str, Any]:
    """Runs ``episodes`` episodes of the policy saved at ``path``; writes and returns the result.

    Returns:
        ``{"mean", "std", "returns", "episodes", "seed", "deterministic", "frames", "checkpoint",
        "json", "videos"}``.
    """
    from rlrun.lifecycle.build import resolve_device
    from rlrun.modules import onednn

    file = find_checkpoint(path)
    state, cfg = read(file, trust_code)  # a saved config that would run code is refused unless trusted
    episodes = int(cfg.eval.episodes) if episodes is None else episodes
    if episodes < 1:
        raise ConfigError(f"must be >= 1, got {episodes}", key="episodes", fix="e.g. episodes=10")
    seed = cfg.seed + EVAL_SEED_OFFSET if seed is None else seed
    dev = resolve_device(device)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))  # as the run evaluated: same kernels, same numbers
    onednn.use(cfg.get("gemm") or "blas")
    mode = "deterministic" if deterministic else "stochastic"
    stem = f"frame{state['frames']}-seed{seed}-{mode}-{episodes}ep"
    if not out:  # the run dir's own eval/: a link there would put the JSON (and videos) elsewhere
        check_file(file.parent / "eval", key="out")
    out = (Path(out) if out else file.parent / "eval" / f"{stem}.json").resolve()
    num_envs = min(episodes, int(cfg.eval.max_envs))
    videos: list[str] = []
    if video:
        from rlrun.trainer.video import check_installed, record, render_overrides

        check_installed("video")
    policy, env = restore(cfg, state, dev, num_envs, trust_code,
                          **(render_overrides(cfg.env, "video") if video else {}))
    try:
        evaluator = Evaluator(env, episodes, seed, device=str(dev))
        if video:
            folder = out.with_name(f"{out.stem}-videos")
            check_file(folder, key="out")  # the recorder writes its MP4s there by name: no links
            check_tree(folder, key="out")
            record(env, folder, [int(q) for q in evaluator.quota])
        if deterministic:
            act = policy.act
        else:
            torch.manual_seed(seed)
            behave = policy.behaviour(explore=True)
            act = lambda obs: behave(obs)["action"]  # noqa: E731
        returns = evaluator.evaluate(act)
    finally:
        env.close()
    if video:
        videos = sorted(str(p) for p in folder.glob("*.mp4"))
    result = {"mean": float(returns.mean()), "std": float(returns.std()), "returns": returns.tolist(),
              "episodes": len(returns), "seed": seed, "deterministic": deterministic,
              "frames": state["frames"], "checkpoint": str(file), "videos": videos}
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(result, indent=2), key="out")
    return {**result, "json": str(out)}


def parse(args: list[str]) -> tuple[str, dict[str, Any]]:
    """``<path> key=value ...`` -> (path, options), with typed values."""
    # run directories are often named after overrides (a=1,b=2): an option is a known key
    paths = [a for a in args if a.partition("=")[0] not in OPTIONS]
    for a in paths:
        if "=" in a and "/" not in a and not Path(a).exists():
            key = a.partition("=")[0]
            raise ConfigError(f"unknown option {key!r}.{did_you_mean(key, OPTIONS)}", key=key,
                              fix=f"use {', '.join(OPTIONS)}")
    if len(paths) != 1:
        raise ConfigError(f"expected one run directory or checkpoint, got {len(paths)}", key="path",
                          fix="rlrun eval runs/<algo>-<env>/<name> [episodes=N] [seed=S] [video=true]")
    opts: dict[str, Any] = {}
    for arg in args:
        key, _, value = arg.partition("=")
        if key not in OPTIONS:
            continue
        kind = OPTIONS[key]
        if kind is bool:
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"must be true or false, got {value!r}", key=key, fix=f"{key}=true")
            opts[key] = value.lower() == "true"
        elif kind is int:
            try:
                opts[key] = int(value)
            except ValueError:
                raise ConfigError(f"must be an integer, got {value!r}", key=key,
                                  fix=f"e.g. {key}=10") from None
        else:
            opts[key] = value
    return paths[0], opts


def main(args: list[str]) -> int:
    if not args or any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0
    try:
        path, opts = parse(args)
        result = evaluate(path, **opts)
    except RlrunError as err:
        print(f"rlrun: error: {err.render()}", file=sys.stderr)
        return err.exit_code
    mode = "deterministic" if result["deterministic"] else "stochastic"
    print(f"return {result['mean']:.2f} ± {result['std']:.2f} over {result['episodes']} {mode} episodes "
          f"(seed {result['seed']}, frame {result['frames']}) -> {result['json']}")
    for v in result["videos"]:
        print(f"  video: {v}")
    return 0

