"""The ``optuna_pruning`` hook: evaluation returns go to an Optuna trial, which may stop the run."""

from __future__ import annotations

import sys
from typing import Any

from rlrun.launch.study import load_trial
from rlrun.trainer.hooks import Hook


class OptunaPruning(Hook):
    """Reports each evaluation to trial ``trial`` of an Optuna study and stops the run when pruned.

    Each result arrives through ``post_eval``, in the batch the evaluation was
    made, and is reported with that frame count as the step. Only the seed with
    ``report`` set (the first seed of a trial) reports; every seed asks the
    pruner, so all of a pruned trial's runs stop. A pruned run ends normally
    after that batch (checkpoint, summary with ``stop_reason: pruned``).
    Without a trial (``trial: null``, e.g. ``+hpo=...`` without ``-m``) the
    hook does nothing.

    Args:
        storage: Optuna storage URL of the study (``sqlite:///...``).
        study_name: The study.
        trial: Trial number.
        report: Report intermediate values (else only check for pruning).
    """

    def __init__(self, storage: str | None, study_name: str | None, trial: int | None,
                 report: bool = True):
        self.storage, self.study_name, self.number, self.report = storage, study_name, trial, report
        self.enabled = None not in (storage, study_name, trial)
        self.metric = "eval/episode_return"
        self._trial: Any = None

    def pre_steps_log(self, trainer, batch) -> None:
        if self.enabled and self._trial is None:  # load the trial and tag the run at the first batch
            self._guarded(self._load, trainer)

    def post_eval(self, trainer, metrics: dict[str, float]) -> None:
        if self.enabled:
            self._guarded(self._step, trainer, metrics)

    def _guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as err:  # a locked or lost study must not end a training run
            print(f"[rlrun] optuna_pruning disabled: {type(err).__name__}: {err}", file=sys.stderr)
            self.enabled = False

    def _load(self, trainer) -> None:
        self._trial, attrs = load_trial(str(self.storage), str(self.study_name), int(self.number))
        self.metric = attrs.get("metric", self.metric)
        self._tag(trainer, {"optuna.study": str(self.study_name), "optuna.trial": str(self.number)})

    def _step(self, trainer, metrics: dict[str, float]) -> None:
        if self.metric not in metrics:
            return
        if self.report:
            self._trial.report(float(metrics[self.metric]), step=trainer.clock)
        # a run that has spent its budget finishes: its final evaluation is the result
        if not trainer.done and self._trial.should_prune():
            trainer.request_stop("pruned", interrupted=False)
            self._tag(trainer, {"optuna.pruned": "true"})
            print(f"[rlrun] optuna trial {self.number} pruned at {trainer.clock} {trainer.budget.unit}",
                  file=sys.stderr)

    @staticmethod
    def _tag(trainer, tags: dict[str, str]) -> None:
        if trainer.logger is not None:
            trainer.logger.set_tags(tags)
