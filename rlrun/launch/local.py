"""``hydra/launcher=local``: a sweep's jobs on ``max_parallel`` worker processes of this machine.

Each worker is one submitit local job that takes the sweep's jobs from a
shared queue and runs them one after another, in-process, as Hydra's basic
launcher does. A worker pays Python's and torch's start-up once, not once per
job, which is what lets short jobs on a few cores finish sooner side by side
than one after the other. Workers keep submitit's requeue path: on the warning
signal (a local time-out) the running job writes its checkpoint, the worker
restarts (submitit's local controller) and goes on with that same job, which
rlrun resumes from its checkpoint. ``timeout_min`` applies to a worker.
"""

from __future__ import annotations

import fcntl
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from rlrun.core import runfiles
from rlrun.launch.status import FINAL_STATES, now, read_status, update_status
from rlrun.launch.submitit_launch import JobInterrupted, SubmititLauncher, available_cpus

# Ctrl-C reaches every process of the terminal's group. The workers' controllers must ignore it:
# they would otherwise kill their job within a second, before it can end its batch and write a
# checkpoint. SIG_IGN survives exec; the job restores Python's handler (SubmititLauncher.__call__)
# and rlrun's training loop then installs its own.
IGNORE_SIGINT = "trap '' INT"


def claim(queue: Path, n_jobs: int, close: bool = False) -> int | None:
    """Takes the next job index from the shared queue file; None when all are taken.

    ``close`` marks every job as taken (after Ctrl-C no worker starts another one).
    """
    with runfiles.open_write(queue, "a+", key="hydra.sweep.dir") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        taken = int(f.read().strip() or 0)
        if taken >= n_jobs or close:
            taken = max(taken, n_jobs) if close else taken
            f.seek(0)
            f.truncate()
            f.write(str(taken))
            return None
        f.seek(0)
        f.truncate()
        f.write(str(taken + 1))
        return taken


class LocalWorker:
    """One worker process: runs queued jobs until the queue is empty; returns ``{index: JobReturn}``.

    Args:
        launcher: The launcher; each job is ``launcher(*params[i])``, as for SLURM.
        params: Every job's call arguments.
        queue: The queue file shared with the other workers.
    """

    def __init__(self, launcher: SubmititLauncher, params: list[tuple], queue: str):
        self.launcher, self.params, self.queue = launcher, params, queue
        self.current: int | None = None  # survives a requeue: the restarted worker resumes this job
        self.results: dict[int, JobReturn] = {}

    def __call__(self) -> dict[int, JobReturn]:
        while True:
            i = self.current if self.current is not None else claim(Path(self.queue), len(self.params))
            if i is None:
                return self.results
            self.current = i
            try:
                self.results[i] = self.launcher(*self.params[i])
            except Exception as err:  # one failed job does not stop the worker (SystemExit does)
                self.results[i] = JobReturn(overrides=self.params[i][0], status=JobStatus.FAILED,
                                            _return_value=err)
                if isinstance(err, JobInterrupted):  # Ctrl-C or SIGTERM: take no further job
                    return self.results
            self.current = None

    def checkpoint(self) -> Any:
        """submitit's preemption/time-out hook: restart this worker where it stands."""
        import submitit

        self.launcher.expect_requeue()  # let the job's SystemExit through: the worker restarts
        if self.current is not None:
            update_status(Path(self.params[self.current][5]), state="REQUEUED", requeued_at=now())
        return submitit.helpers.DelayedSubmission(self)


class LocalLauncherBase(SubmititLauncher):
    """A sweep's jobs on ``max_parallel`` local worker processes (default: one per CPU core)."""

    _EXECUTOR = "local"
    _OWN_PARAMS = ("max_parallel",)

    def _executor(self) -> Any:
        executor = super()._executor()
        executor.update_parameters(local_setup=[IGNORE_SIGINT, *executor.parameters.get("setup", [])])
        return executor

    @staticmethod
    def _wait(workers: list[Any], queue: Path, n_jobs: int) -> None:
        """Waits for the workers; on Ctrl-C, for their running jobs to stop with a checkpoint."""
        try:
            while not all(w.done() for w in workers):
                time.sleep(0.2)
        except KeyboardInterrupt:
            claim(queue, n_jobs, close=True)  # the jobs not started yet stay QUEUED
            print("[rlrun] Ctrl-C: running jobs stop after their batch with a checkpoint "
                  "(Ctrl-C again: do not wait for them)", file=sys.stderr, flush=True)
            while not all(w.done() for w in workers):
                time.sleep(0.2)
            raise

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None
        params = self._prepare(job_overrides, initial_job_idx, state="QUEUED")
        executor = self._executor()
        n_workers = min(len(params), max(1, int(self.options.get("max_parallel") or available_cpus())))
        queue = Path(str(self.config.hydra.sweep.dir)).resolve() / f".queue-{time.time_ns()}"
        with runfiles.open_write(queue, "w", key="hydra.sweep.dir") as f:
            f.write("0")
        workers = [executor.submit(LocalWorker(self, params, str(queue))) for _ in range(n_workers)]
        try:
            self._wait(workers, queue, len(params))
        finally:
            queue.unlink(missing_ok=True)
        results: dict[int, JobReturn] = {}
        errors: list[Exception] = []
        for w in workers:
            try:
                results.update(w.result())
            except Exception as err:  # a worker died: its unfinished jobs failed
                errors.append(err)
        returns = []
        for i, p in enumerate(params):
            if i not in results:
                err = errors[0] if errors else RuntimeError("job never ran")
                if read_status(Path(p[5])).get("state") not in FINAL_STATES:
                    update_status(Path(p[5]), state="FAILED", error=f"{type(err).__name__}: {err}"[:1000])
                results[i] = JobReturn(overrides=p[0], status=JobStatus.FAILED, _return_value=err)
            returns.append(results[i])
        return returns
