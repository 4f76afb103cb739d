"""Registers the ``optuna_pruning`` hook; light on purpose (imported at Hydra start-up).

The hook itself (``rlrun.launch.optuna_hook``) needs torch and Optuna and is
imported only when a run builds it.
"""

from __future__ import annotations

from typing import Any

from rlrun.core.registry import NonNegativeInt, register


@register("hook", "optuna_pruning")
def make_optuna_pruning(storage: str | None = None, study_name: str | None = None,
                        trial: NonNegativeInt | None = None, report: bool = True) -> Any:
    """Reports eval returns to an Optuna trial (+hpo=...) and stops the run if the trial is pruned."""
    from rlrun.launch.optuna_hook import OptunaPruning

    return OptunaPruning(storage, study_name, trial, report)
