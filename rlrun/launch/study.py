"""Optuna helpers shared by the search driver (the sweeper) and the jobs (the pruning hook).

The driver stores what the jobs need in the study's user attribute ``rlrun``
(pruner spec, objective metric), so a job only needs the storage URL, the
study name and its trial number: the same whether it runs in-process, in a
local process or on a SLURM node sharing the SQLite file.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlrun.core.errors import ConfigError

STUDY_ATTR = "rlrun"
PRUNERS = {"median": "MedianPruner", "percentile": "PercentilePruner", "hyperband": "HyperbandPruner",
           "successive_halving": "SuccessiveHalvingPruner", "threshold": "ThresholdPruner",
           "wilcoxon": "WilcoxonPruner", "nop": "NopPruner", "none": "NopPruner"}
SAMPLERS = {"tpe": "TPESampler", "random": "RandomSampler", "cmaes": "CmaEsSampler", "qmc": "QMCSampler",
            "gp": "GPSampler", "nsga2": "NSGAIISampler"}
AGGREGATES = {"mean": statistics.fmean, "median": statistics.median}


def require_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ConfigError("Optuna is not installed", key="hydra/sweeper",
                          fix="pip install 'rlrun[hpo]' (or: pip install optuna)") from None
    return optuna


def get_storage(url: str) -> Any:
    """An Optuna storage for ``url``; SQLite waits for the file lock that parallel jobs share."""
    optuna = require_optuna()
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        # several processes write one SQLite file: wait on its lock rather than fail at once
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 120}})
    return optuna.storages.get_storage(url)


def _build(module: Any, names: Mapping[str, str], spec: Mapping[str, Any] | None, default: str,
           key: str) -> Any:
    spec = dict(spec or {})
    name = str(spec.pop("name", default))
    cls = getattr(module, names.get(name, name), None)
    if cls is None:
        raise ConfigError(f"unknown {key.rsplit('.', 1)[-1]} {name!r}", key=f"{key}.name",
                          fix=f"use one of: {', '.join(names)}")
    try:
        return cls(**spec)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"cannot build {cls.__name__}: {err}", key=key,
                          fix=f"check the options of optuna's {cls.__name__}") from None


def build_pruner(spec: Mapping[str, Any] | None) -> Any:
    """A pruner from ``{name: median, n_startup_trials: 5, ...}`` (names as in ``PRUNERS``)."""
    return _build(require_optuna().pruners, PRUNERS, spec, "median", "hydra.sweeper.pruner")


def build_sampler(spec: Mapping[str, Any] | None) -> Any:
    """A sampler from ``{name: tpe, seed: 0, ...}`` (names as in ``SAMPLERS``)."""
    return _build(require_optuna().samplers, SAMPLERS, spec, "tpe", "hydra.sweeper.sampler")


def distributions(params: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Optuna distributions from the YAML search space.

    Each entry is ``key: {type: float|int|categorical, low, high, log, step, choices}``;
    ``type`` may be left out (``choices`` means categorical, integer bounds int).
    """
    optuna = require_optuna()
    dists = {}
    for key, spec in params.items():
        where = f"hydra.sweeper.params.{key}"
        if not isinstance(spec, Mapping):
            raise ConfigError(f"expected a mapping, got {spec!r}", key=where,
                              fix="write e.g. {type: float, low: 1e-4, high: 1e-2, log: true}")
        spec = dict(spec)
        kind = spec.pop("type", None) or ("categorical" if "choices" in spec else
                                          "int" if all(isinstance(spec.get(b), int) for b in ("low", "high"))
                                          else "float")
        try:
            if kind == "categorical":
                dists[key] = optuna.distributions.CategoricalDistribution(list(spec.pop("choices")))
            elif kind in ("float", "int"):
                low, high = float(spec.pop("low")), float(spec.pop("high"))
                if kind == "int":
                    dists[key] = optuna.distributions.IntDistribution(
                        int(low), int(high), log=bool(spec.pop("log", False)), step=int(spec.pop("step", 1)))
                else:
                    step = spec.pop("step", None)
                    dists[key] = optuna.distributions.FloatDistribution(
                        low, high, log=bool(spec.pop("log", False)),
                        step=None if step is None else float(step))
            else:
                raise ValueError(f"unknown type {kind!r} (use float, int or categorical)")
            if spec:
                raise ValueError(f"unknown option(s) {', '.join(spec)}")
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"bad search space entry: {err}", key=where,
                              fix="write e.g. {type: float, low: 1e-4, high: 1e-2, log: true} or "
                              "{choices: [a, b]}") from None
    if not dists:
        raise ConfigError("the search space is empty", key="hydra.sweeper.params",
                          fix="declare at least one parameter, e.g. optim.lr: {low: 1e-4, high: 1e-2}")
    return dists


def aggregate(values: Sequence[float], how: str) -> float:
    """Combines the seeds' results of one trial (``mean`` or ``median``)."""
    if how not in AGGREGATES:
        raise ConfigError(f"unknown aggregate {how!r}", key="hydra.sweeper.aggregate",
                          fix=f"use one of: {', '.join(AGGREGATES)}")
    return float(AGGREGATES[how](values))


def load_trial(storage_url: str, study_name: str, number: int) -> tuple[Any, dict[str, Any]]:
    """The running trial ``number`` of the study, with the pruner the driver configured."""
    optuna = require_optuna()
    storage = get_storage(storage_url)
    study_id = storage.get_study_id_from_name(study_name)
    attrs = dict(storage.get_study_user_attrs(study_id).get(STUDY_ATTR, {}))
    study = optuna.load_study(study_name=study_name, storage=storage,
                              pruner=build_pruner(attrs.get("pruner") or {"name": "nop"}))
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    return optuna.trial.Trial(study, trial_id), attrs
