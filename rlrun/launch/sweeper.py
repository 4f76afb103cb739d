"""Optuna search as a Hydra sweeper (``hydra/sweeper=rlrun_optuna``, selected by ``+hpo=NAME``).

Each trial runs as ``len(seeds)`` ordinary rlrun jobs through the configured
launcher (in-process by default, ``hydra/launcher=local`` or ``slurm`` for
parallel trials), with the trial's values as overrides and the pruning hook
pointed at the trial. The trial's value is the mean (or median) over seeds of
the final ``metric`` in each run's ``summary.json``; a run stopped by the
pruner marks the trial pruned. The study lives in an SQLite file (default
``<sweep dir>/study.db``) that several drivers can share: each asks for new
trials until the study holds ``n_trials``, so rerunning the command, or
starting it on several machines, continues the same search. After every
batch ``<sweep dir>/best.yaml`` names the best trial and its saved config;
``python -m rlrun.launch best <sweep dir>`` reruns it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from rlrun.core import runfiles, saved
from rlrun.core.errors import ConfigError
from rlrun.launch.study import (
    STUDY_ATTR,
    aggregate,
    build_pruner,
    build_sampler,
    distributions,
    get_storage,
    require_optuna,
)

log = logging.getLogger(__name__)
HOOK = "hooks.optuna_pruning"


@dataclass
class OptunaSweeperConf:
    """``hydra/sweeper=rlrun_optuna``: see ``sweeps/hpo/*.yaml`` for an annotated example."""

    _target_: str = "hydra_plugins.rlrun_launch.plugins.OptunaSweeper"
    study_name: str = "rlrun"
    storage: str | None = None  # None: sqlite:///<sweep dir>/study.db
    direction: str = "maximize"
    metric: str = "eval/episode_return"
    n_trials: int = 20  # trials in the study, counting those of earlier or parallel drivers
    n_jobs: int = 1  # trials launched together (in parallel with a parallel launcher)
    seeds: list[int] = field(default_factory=lambda: [0])
    aggregate: str = "mean"  # mean | median over the seeds of a trial
    params: dict[str, Any] = field(default_factory=dict)  # key: {type, low, high, log, step, choices}
    sampler: dict[str, Any] = field(default_factory=lambda: {"name": "tpe"})
    pruner: dict[str, Any] = field(default_factory=lambda: {"name": "median"})


def _value(v: Any) -> str:
    """A trial value as a Hydra override value (strings pass through: ``[64,64]`` is a list)."""
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    return repr(v) if isinstance(v, (int, float)) else str(v)


def _quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


class OptunaSweeperBase(Sweeper):
    """Runs an Optuna study whose trials are rlrun jobs; see the module docstring."""

    def __init__(self, **conf: Any) -> None:
        conf = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                for k, v in conf.items()}
        self.conf = OptunaSweeperConf(**conf)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def _base_overrides(self, arguments: list[str]) -> list[str]:
        base = []
        for o in OverridesParser.create().parse_overrides(arguments):
            if o.is_sweep_override():
                raise ConfigError("a search runs each trial with single values, not sweeps",
                                  key=o.key_or_group, fix="declare the key in hydra.sweeper.params, or "
                                  "give it one value")
            if o.key_or_group == "seed":
                log.warning("seed=... is ignored: the seeds of each trial are hydra.sweeper.seeds")
                continue
            base.append(o.input_line)
        return base

    def sweep(self, arguments: list[str]) -> Any:
        optuna = require_optuna()
        assert self.config is not None and self.launcher is not None
        c = self.conf
        if getattr(self.launcher, "options", {}).get("wait", True) is False:
            raise ConfigError("a search needs its trials' results", key="hydra.launcher.wait",
                              fix="use hydra.launcher.wait=true with a search")
        if not c.seeds:
            raise ConfigError("no seeds", key="hydra.sweeper.seeds", fix="e.g. hydra.sweeper.seeds=[0,1]")
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).resolve()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        runfiles.check_tree(sweep_dir, key="hydra.sweep.dir")  # a link in it would be written through
        with runfiles.open_write(sweep_dir / "multirun.yaml", "w", key="hydra.sweep.dir") as f:
            f.write(OmegaConf.to_yaml(self.config))
        base = self._base_overrides(arguments)
        dists = distributions(c.params)
        storage_url = c.storage or f"sqlite:///{sweep_dir / 'study.db'}"
        study = optuna.create_study(study_name=c.study_name, storage=get_storage(storage_url),
                                    sampler=build_sampler(c.sampler), pruner=build_pruner(c.pruner),
                                    direction=c.direction, load_if_exists=True)
        study.set_user_attr(STUDY_ATTR, {"pruner": c.pruner, "metric": c.metric, "seeds": c.seeds,
                                         "aggregate": c.aggregate, "params": c.params})
        counted = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                   optuna.trial.TrialState.FAIL, optuna.trial.TrialState.RUNNING,
                   optuna.trial.TrialState.WAITING)
        log.info(f"Optuna study {c.study_name!r} in {storage_url}: {c.n_trials} trials x seeds {c.seeds}")
        job_idx = 0
        while (todo := min(c.n_jobs, c.n_trials - len(study.get_trials(deepcopy=False,
                                                                        states=counted)))) > 0:
            trials = [study.ask(dists) for _ in range(todo)]
            jobs = [(t, seed, self._job_overrides(base, t, seed, i == 0, storage_url))
                    for t in trials for i, seed in enumerate(c.seeds)]
            try:
                self.validate_batch_is_legal([j[2] for j in jobs])
                returns = self.launcher.launch([j[2] for j in jobs], initial_job_idx=job_idx)
            except BaseException:  # config error, Ctrl-C: these trials will not report
                for t in trials:
                    study.tell(t, state=optuna.trial.TrialState.FAIL)
                raise
            job_idx += len(jobs)
            for t in trials:
                self._tell(study, t, base, [(seed, r) for (tt, seed, _), r in zip(jobs, returns) if tt is t])
            self._write_best(study, sweep_dir, storage_url)
        return []

    def _job_overrides(self, base: list[str], trial: Any, seed: int, report: bool,
                       storage_url: str) -> list[str]:
        return [*base, *(f"{k}={_value(v)}" for k, v in trial.params.items()), f"seed={seed}",
                f"++{HOOK}.name=optuna_pruning", f"++{HOOK}.storage={_quote(storage_url)}",
                f"++{HOOK}.study_name={_quote(self.conf.study_name)}", f"++{HOOK}.trial={trial.number}",
                f"++{HOOK}.report={str(report).lower()}",
                f"hydra.sweep.subdir=trial_{trial.number:04d}/seed_{seed}"]

    def _tell(self, study: Any, trial: Any, base: list[str], runs: list[tuple[int, JobReturn]]) -> None:
        optuna = require_optuna()
        values: dict[int, float] = {}
        run_dirs, problems, pruned, choices = [], [], False, {}
        for seed, ret in runs:
            if ret.status != JobStatus.COMPLETED or ret.hydra_cfg is None:
                problems.append(f"seed {seed}: {ret._return_value!r}"[:300])
                continue
            run_dir = Path(str(ret.hydra_cfg.hydra.runtime.output_dir)).resolve()
            choices = {k: str(ret.hydra_cfg.hydra.runtime.choices.get(k)) for k in ("algo", "env")}
            run_dirs.append(str(run_dir))
            try:
                summary = saved.load_summary(run_dir / "summary.json")
            except saved.SavedFileError as err:
                problems.append(f"seed {seed}: no summary ({err.message})")
                continue
            pruned |= summary.get("stop_reason") == "pruned"
            if summary.get("status") != "finished" or summary.get(self.conf.metric) is None:
                problems.append(f"seed {seed}: {summary.get('status')}, no {self.conf.metric}")
                continue
            values[seed] = float(summary[self.conf.metric])
        trial.set_user_attr("run_dirs", run_dirs)
        trial.set_user_attr("values", {str(k): v for k, v in values.items()})
        trial.set_user_attr("choices", choices)
        trial.set_user_attr("overrides", [*base, *(f"{k}={_value(v)}" for k, v in trial.params.items())])
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            log.info(f"trial {trial.number} {trial.params}: pruned")
        elif problems or not values:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log.warning(f"trial {trial.number} {trial.params}: failed ({'; '.join(problems)})")
        else:
            value = aggregate(list(values.values()), self.conf.aggregate)
            study.tell(trial, value)
            log.info(f"trial {trial.number} {trial.params}: {self.conf.aggregate} {value:.4g} over {values}")

    def _write_best(self, study: Any, sweep_dir: Path, storage_url: str) -> None:
        try:
            best = study.best_trial
        except ValueError:  # no completed trial yet
            return
        run_dirs = best.user_attrs.get("run_dirs", [])
        states: dict[str, int] = {}
        for t in study.get_trials(deepcopy=False):
            states[t.state.name] = states.get(t.state.name, 0) + 1
        data = {"study_name": self.conf.study_name, "storage": storage_url, "direction": self.conf.direction,
                "metric": self.conf.metric, "aggregate": self.conf.aggregate, "trial": best.number,
                "value": best.value, "params": best.params, "values_per_seed": best.user_attrs.get("values"),
                "choices": best.user_attrs.get("choices", {}), "overrides": best.user_attrs.get("overrides"),
                "run_dirs": run_dirs, "config": str(Path(run_dirs[0]) / "config.yaml") if run_dirs else None,
                "trials": states}
        tmp = sweep_dir / f".best.yaml.tmp-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        with runfiles.open_write(tmp, "w", key="hydra.sweep.dir") as f:
            f.write(OmegaConf.to_yaml(OmegaConf.create(data)))
        os.replace(tmp, sweep_dir / "best.yaml")
        log.info(f"best so far: trial {best.number} ({best.value:.4g}) {best.params}; rerun it with "
                 f"`python -m rlrun.launch best {sweep_dir}`")
