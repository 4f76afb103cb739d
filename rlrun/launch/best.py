"""Reruns the best trial of a search from its saved, resolved config.

The search writes ``<sweep dir>/best.yaml`` (trial, value, params, run
directories, the path of the trial's ``config.yaml``). The rerun loads that
config as it ran (every preset and default already resolved), drops the
pruning hook, applies ``key=value`` overrides (a longer ``total_frames``,
another ``seed``) and trains it in ``<sweep dir>/best/seed_<seed>``: rerunning
the same command continues that run, as ``rlrun`` does.

Both files are read as data (``rlrun.lifecycle.load.check_loaded``): a sweep directory can come from
elsewhere, so a ``_target_``, an interpolation or an env import in them is refused unless the
user passes ``trust_code``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlrun import __version__
from rlrun.core.errors import ConfigError
from rlrun.core.rundir import git_commit

_MISSING = object()


def _load_yaml(path: Path, key: str, trust_code: bool) -> DictConfig:
    """A YAML mapping read as data: unreadable or code-running content is one ConfigError."""
    from rlrun.lifecycle.load import check_loaded

    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # a YAML syntax error, a binary file, a directory, ...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"cannot read {path} as YAML ({first})", key=key,
                          fix="give the sweep directory of a finished search (best.yaml, config.yaml)"
                          ) from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path} is not a YAML mapping", key=key,
                          fix="give the sweep directory of a finished search (best.yaml, config.yaml)")
    check_loaded(cfg, str(path), trust_code)  # before anything resolves, imports or builds it
    return cfg


def load_best(study_dir: Path, trust_code: bool = False) -> dict[str, Any]:
    """The content of ``<study_dir>/best.yaml`` (or of the given file), checked as data."""
    path = study_dir if study_dir.is_file() else study_dir / "best.yaml"
    if not path.exists():
        raise ConfigError(f"no {path}", key="study_dir",
                          fix="give the sweep directory of a search that finished at least one trial")
    best = OmegaConf.to_container(_load_yaml(path, "study_dir", trust_code), resolve=True)
    for name in ("config", "study_name", "metric"):
        if best.get(name) is not None and not isinstance(best[name], str):
            raise ConfigError(f"{path}: {name} must be a string, got {best[name]!r}", key="study_dir",
                              fix="give the best.yaml a search wrote")
    return best


def best_config(best: dict[str, Any], overrides: list[str], seed: int | None = None,
                trust_code: bool = False) -> DictConfig:
    """The best trial's saved config, without the pruning hook, with ``overrides`` applied.

    The saved config is data: one that would import or call code is refused unless ``trust_code``.
    """
    if not best.get("config") or not Path(best["config"]).is_file():
        raise ConfigError(f"the best trial's config {best.get('config')} is missing",
                          key="config", fix="rerun the search or restore its run directories")
    cfg = _load_yaml(Path(best["config"]), "config", trust_code)
    if "hooks" in cfg and "optuna_pruning" in cfg.hooks:
        cfg.hooks.pop("optuna_pruning")
    if seed is not None:
        cfg.seed = seed
    cfg.resume = "auto"
    for item in overrides:
        key, sep, value = item.partition("=")
        missing = OmegaConf.select(cfg, key.lstrip("+"), default=_MISSING) is _MISSING
        if not sep or (missing and not key.startswith("+")):
            raise ConfigError(f"cannot override {item!r}", key=key,
                              fix="use key=value with a key of the saved config (or +key=value to add one)")
        # YAML typing, as on the command line: numbers, booleans, null, [lists]
        OmegaConf.update(cfg, key.lstrip("+"), OmegaConf.create(f"v: {value}").v, force_add=True)
    return cfg


def rerun_best(study_dir: Path, overrides: list[str], seed: int | None = None,
               run_dir: Path | None = None, dry_run: bool = False,
               trust_code: bool = False) -> dict[str, Any] | None:
    """Trains the best trial's config again; returns the run's summary (None with ``dry_run``).

    Args:
        study_dir: The search's sweep directory (holding ``best.yaml``).
        overrides: ``key=value`` changes to the saved config.
        seed: The seed (default: the saved config's, i.e. the trial's first seed).
        run_dir: Where to train (default ``<study_dir>/best/seed_<seed>``).
        dry_run: Print the config and the directory, do not train.
        trust_code: Accept ``_target_`` (and other code) in the saved files, printing each.
    """
    best = load_best(study_dir, trust_code)
    cfg = best_config(best, overrides, seed, trust_code)
    study_dir = study_dir.parent if study_dir.is_file() else study_dir
    run_dir = run_dir or study_dir / "best" / f"seed_{cfg.seed}"
    print(f"[rlrun] best trial {best['trial']} of {best['study_name']!r}: {best['metric']} "
          f"{best['value']:.4g} with {best['params']}\n[rlrun] config {best['config']} -> {run_dir}",
          file=sys.stderr)
    if dry_run:
        print(OmegaConf.to_yaml(cfg))
        return None
    from rlrun.lifecycle.run import train

    tags = {**{k: str(v) for k, v in (best.get("choices") or {}).items()}, "rlrun_version": __version__,
            "hpo_study": str(best["study_name"]), "hpo_trial": str(best["trial"]),
            "hpo_rerun_of": str(Path(best["config"]).parent)}
    commit = git_commit()
    if commit:
        tags["git_commit"] = commit
    if trust_code:
        return train(cfg, run_dir, tags)
    from rlrun.core.registry import untrusted

    with untrusted(best["config"]):  # second line of defence: the registry refuses _target_ too
        return train(cfg, run_dir, tags)
