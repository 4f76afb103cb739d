"""Job-side signal set-up under SLURM: SIGTERM requeues like the warning signal, at most once.

submitit binds the warning signal (USR2, ``signal_delay_s`` before the time
limit, or sent on preemption) to checkpoint-and-requeue, and only logs
SIGTERM. rlrun's own handlers stop the loop after the current batch, write a
checkpoint and then call the handler that was there before them
(``rlrun.core.signals.chain_signal_handler``); this module decides what that handler
is. Preemption that arrives as a bare SIGTERM must requeue too, but a SIGTERM
from ``scancel`` must not: the job's state in SLURM tells them apart. The
controller's own view (scontrol) is asked first: ``COMPLETING`` with no reason
for a cancel, ``COMPLETING`` with ``Reason=TimeLimit`` at the time limit,
``RUNNING`` for ``scancel --signal TERM``. sacct (``CANCELLED``, ``TIMEOUT``) is
asked only when the controller no longer knows the job: slurmdbd records a
cancel when it gets to it, and under load sacct still said ``RUNNING`` when the
job's handler asked, so a cancelled job requeued itself (CI, 2026-12-04).
And since ``scontrol requeue`` itself ends the running job with a SIGTERM, only
the first signal may requeue.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

REQUEUE, EXIT, IGNORE = "requeue", "exit", "ignore"


def slurm_job_state(job_id: str) -> tuple[str, str]:
    """(state, reason) of a SLURM job: the controller's (scontrol) if it knows the job, else sacct's.

    The controller marks a cancel before it signals the job; slurmdbd, which sacct reads, may
    record it seconds later, so sacct is only the fallback (a job the controller has purged).
    """
    try:
        out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                             timeout=20)
        fields = dict(w.split("=", 1) for w in out.stdout.split() if "=" in w)
        if out.returncode == 0 and fields.get("JobState"):
            return fields["JobState"], fields.get("Reason", "")
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0].rstrip("+"), ""
    except (OSError, subprocess.SubprocessError):
        pass
    return "", ""


def sigterm_action(state: str, reason: str = "") -> str:
    """What a SIGTERM means, from the job's SLURM state at the time.

    Returns:
        ``REQUEUE`` (preemption notice, time limit: checkpoint and requeue),
        ``EXIT`` (preempted by SLURM, whose PreemptMode decides on the requeue:
        save submitit's state and exit) or ``IGNORE`` (cancelled by a user:
        just stop; rlrun has already written its checkpoint).
    """
    state = state.upper()
    if state.startswith("CANCELLED"):
        return IGNORE
    if state == "PREEMPTED":
        return EXIT
    if state == "COMPLETING":  # the controller's view: a time limit says so, a cancel does not
        return REQUEUE if reason == "TimeLimit" else IGNORE
    return REQUEUE  # RUNNING (signal sent while the job goes on), TIMEOUT, unknown


def install_requeue_handlers(job_id: str | None = None,
                             state_of: Callable[[str], tuple[str, str]] = slurm_job_state) -> bool:
    """Rebinds USR2 and SIGTERM so that the first of them checkpoints submitit's state and requeues.

    Call it in the job, after submitit has installed its handlers and before
    rlrun's ``train`` installs its own (which then chain to these).

    Args:
        job_id: The SLURM job id to look up on SIGTERM (default ``$SLURM_JOB_ID``).
        state_of: ``job_id -> (state, reason)``; replaceable in tests.

    Returns:
        False when submitit's handler is not installed (not a submitit job).
    """
    from submitit.core.job_environment import JobEnvironment

    usr_sig = JobEnvironment._usr_sig()
    submitit_handler: Any = getattr(signal.getsignal(usr_sig), "__self__", None)
    if submitit_handler is None or not hasattr(submitit_handler, "checkpoint_and_try_requeue"):
        return False
    job_id = job_id or os.environ.get("SLURM_JOB_ID", "")
    done = False

    def once(action: Callable[[int, Any], None], signum: int, frame: Any) -> None:
        nonlocal done
        if done:
            log.warning("ignoring %s: the job is already being requeued", signal.Signals(signum).name)
            return
        done = True
        action(signum, frame)

    def on_warning(signum: int, frame: Any) -> None:
        once(submitit_handler.checkpoint_and_try_requeue, signum, frame)

    def on_sigterm(signum: int, frame: Any) -> None:
        if done:
            return
        state, reason = state_of(job_id) if job_id else ("", "")
        action = sigterm_action(state, reason)
        # on the job's stderr, as rlrun's other lines: what the decision was made from
        print(f"[rlrun] SIGTERM with SLURM job state {state or '?'!r} (reason {reason or '-'}): {action}",
              file=sys.stderr, flush=True)
        if action == REQUEUE:
            once(submitit_handler.checkpoint_and_try_requeue, signum, frame)
        elif action == EXIT:
            once(submitit_handler.checkpoint_and_exit, signum, frame)

    signal.signal(usr_sig, on_warning)
    signal.signal(signal.SIGTERM, on_sigterm)
    return True
