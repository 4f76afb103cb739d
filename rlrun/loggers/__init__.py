"""Every logger rlrun has, and what a run writes about itself (one home per kind of part).

- ``tracking``: the ``Logger`` base, CSV, TensorBoard and the multi-logger; ``mlflow_logger``: MLflow;
  ``wandb``: W&B. Each module registers its logger when imported
  (``rlrun.core.registry.BUILTIN_MODULES``) and imports its tracker's package only when that
  logger is built, so start-up stays fast.

What a run writes about itself stays true after any fault:

- ``store``: the embedded MLflow store is created aside and moved into place, so a kill
  during its schema set-up never leaves a half-made ``mlflow.db``; one found half-made
  (no runs in it) is set aside and rebuilt; errors are one line.
- ``journal``: metrics for a tracker that cannot retract them (MLflow, W&B) wait in a
  journal in the run directory until a checkpoint covers their step, so a resumed run
  never sends a (metric, step) twice.

``pause_point`` is a test hook: ``RLRUN_TEST_PAUSE_AT=<point>[,<point>...]`` makes the
process announce ``[rlrun] test pause: <point>`` on stderr at each named point and sleep
``RLRUN_TEST_PAUSE_S`` seconds (default 60; 0 only announces), so that a kill harness can
kill it exactly there. Points: ``store_create`` (the store's schema is about to be made),
``store_place`` (made, not yet moved into place), ``checkpoint_write`` (the step's metrics
are logged, the checkpoint not yet written), ``checkpoint_commit`` (the checkpoint is
written, the loggers not yet told), ``journal_send`` (metrics are sent to the tracker, the
journal not yet updated).
"""

from __future__ import annotations

import os
import sys
import time


def pause_point(name: str) -> None:
    """Announces and sleeps at ``name`` if ``RLRUN_TEST_PAUSE_AT`` lists it (tests only)."""
    if name in os.environ.get("RLRUN_TEST_PAUSE_AT", "").split(","):
        print(f"[rlrun] test pause: {name}", file=sys.stderr, flush=True)
        time.sleep(float(os.environ.get("RLRUN_TEST_PAUSE_S", "60")))
