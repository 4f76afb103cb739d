"""Hydra launchers on submitit: parallel local jobs and SLURM arrays, with status files and requeue.

They extend hydra-submitit-launcher's launcher (whose ``checkpoint`` resubmits
the same call when a job is preempted or times out) with what rlrun needs:

- the job registers rlrun's OmegaConf resolvers (it is a fresh process that
  unpickles the launcher, so ``rlrun.cli.main.main`` never ran there);
- under SLURM, SIGTERM requeues like the warning signal, a cancel does not
  (``rlrun.launch.signals``);
- each job keeps ``<run dir>/job.json`` up to date (``rlrun.launch.status``);
- ``LocalLauncher`` (``rlrun.launch.local``) runs the jobs on ``max_parallel``
  worker processes;
- ``SlurmLauncher`` with ``wait=false`` returns once the array is queued.

The requeued job finds its run directory again because the launcher, pickled
with the sweep config, carries the resolved ``${now:...}`` of ``hydra.sweep.dir``
(Hydra copies the resolver cache into each job's config); rlrun then resumes
from ``<run dir>/checkpoint.pt`` with ``resume=auto``, in the same MLflow run.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, LocalQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
from omegaconf import OmegaConf, open_dict

from rlrun.core import saved
from rlrun.core.signals import is_interrupt_code
from rlrun.launch.status import FINAL_STATES, STATUS_FILE, now, read_status, update_status

log = logging.getLogger(__name__)


@dataclass
class LocalConf(LocalQueueConf):
    """``hydra/launcher=rlrun_local``: the jobs on ``max_parallel`` local worker processes."""

    _target_: str = "hydra_plugins.rlrun_launch.plugins.LocalLauncher"
    max_parallel: int | None = None  # None: one job per available CPU core
    max_num_timeout: int = 3


@dataclass
class SlurmConf(SlurmQueueConf):
    """``hydra/launcher=rlrun_slurm``: submitit's SLURM executor; ``wait=false`` returns once queued."""

    _target_: str = "hydra_plugins.rlrun_launch.plugins.SlurmLauncher"
    wait: bool = True


class JobInterrupted(RuntimeError):
    """The run stopped on a signal, with a checkpoint, and was not requeued (rerun to continue)."""


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _summary_fields(run_dir: Path | None) -> dict[str, Any]:
    if run_dir is None:
        return {}
    try:
        summary = saved.load_summary(run_dir / "summary.json")
    except saved.SavedFileError:
        return {}
    keys = ("status", "frames", "total_frames", "stop_reason", "eval/episode_return", "mlflow_run_id")
    return {f"summary_{k}" if k == "status" else k: summary.get(k) for k in keys}


def prepare_tracking(logger: dict[str, Any]) -> None:
    """Creates a job's SQLite MLflow store and experiment (``logger=mlflow`` or an MLflow member of
    ``logger=multi``) before parallel jobs race to (it fails)."""
    from rlrun.launch.sweep_group import mlflow_target, open_experiment

    target = mlflow_target(logger)
    if target is not None and target["tracking_uri"].startswith("sqlite"):
        open_experiment(target)  # a tracking server serialises its own schema set-up


class SubmititLauncher(BaseSubmititLauncher):
    """Shared job side (resolvers, signals, status) and submission of the rlrun launchers."""

    _OWN_PARAMS: tuple[str, ...] = ()  # ours, not submitit's: kept out of update_parameters
    # a job's SLURM tasks (tasks_per_node x nodes) are the ranks of one data-parallel run
    _TASKS_ARE_RANKS = True

    def __init__(self, **params: Any) -> None:
        own = {k: params.pop(k) for k in self._OWN_PARAMS if k in params}
        super().__init__(**params)
        self.options = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v
                        for k, v in own.items()}
        self._requeueing = False

    # ------------------------------------------------------------------ job side
    def __call__(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: dict, status_file: str | None = None) -> JobReturn:
        import submitit

        from rlrun.lifecycle.compose import register_resolvers

        register_resolvers()
        self._requeueing = False  # this instance may come from a requeue's pickle
        env = submitit.JobEnvironment()
        if self._EXECUTOR == "slurm":
            from rlrun.launch.signals import install_requeue_handlers

            install_requeue_handlers()
        else:  # local workers start with SIGINT ignored (rlrun.launch.local): the job must see Ctrl-C
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if self._EXECUTOR == "slurm" and env.num_tasks > 1 and self._TASKS_ARE_RANKS:
            ranks_from_tasks()
        # one job, one record: rank 0's (the run's face; the others' records would race with it)
        status = Path(status_file) if status_file and env.global_rank == 0 else None
        planned = read_status(status).get("run_dir") if status else None
        run_dir = Path(planned) if planned else None
        if status:
            update_status(status, state="RUNNING", job_id=env.job_id, stdout=str(env.paths.stdout),
                          stderr=str(env.paths.stderr), attempt={
                "started_at": now(), "host": socket.gethostname(), "pid": os.getpid(),
                "job_id": env.job_id, "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"),
                "resumed_from_checkpoint": bool(run_dir and (run_dir / "checkpoint.pt").exists())})
        try:
            ret = super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
        except SystemExit as exc:
            if self._requeueing or exc.code in (0, None):
                raise  # submitit exits after requeueing; the requeued job starts over here
            if status:
                update_status(status, state="INTERRUPTED" if is_interrupt_code(exc.code) else "FAILED",
                              exit_code=exc.code, **_summary_fields(run_dir))
            # an exception (unlike SystemExit) reaches the launcher as this job's result
            error = JobInterrupted if is_interrupt_code(exc.code) else RuntimeError
            raise error(f"rlrun exited with code {exc.code} in job {env.job_id}; "
                        f"see {env.paths.stderr}") from None
        except KeyboardInterrupt:
            if status:
                update_status(status, state="INTERRUPTED", **_summary_fields(run_dir))
            raise
        except BaseException as err:
            if status:
                update_status(status, state="FAILED", error=f"{type(err).__name__}: {err}"[:1000])
            raise
        if status:
            out = Path(str(ret.hydra_cfg.hydra.runtime.output_dir)) if ret.hydra_cfg else run_dir
            failed = ret.status != JobStatus.COMPLETED
            update_status(status, state="FAILED" if failed else "COMPLETED", run_dir=str(out),
                          **({"error": repr(ret._return_value)[:1000]} if failed else {}),
                          **_summary_fields(out))
        return ret

    def expect_requeue(self) -> None:
        """Marks the job's coming ``SystemExit`` as submitit's requeue: it is let through (the job,
        or the worker that runs it, restarts) instead of being reported as the job's failure."""
        self._requeueing = True

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on preemption/time-out: resubmit this same call (the run resumes)."""
        self.expect_requeue()
        status_file = args[5] if len(args) > 5 else kwargs.get("status_file")
        if status_file:
            update_status(Path(status_file), state="REQUEUED", requeued_at=now())
        return super().checkpoint(*args, **kwargs)

    # ------------------------------------------------------------------ submitting side
    def _executor(self) -> Any:
        import submitit

        params = dict(self.params)
        init = {"folder": params.pop("submitit_folder")}
        if "max_num_timeout" in params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"{self._EXECUTOR}_{k}": v
                                      for k, v in params.items()})
        return executor

    def _job_info(self, overrides: Sequence[str], job_num: int) -> tuple[Path | None, dict | None]:
        """The job's run directory and logger config, resolved here as ``run_job`` will in the job."""
        assert self.hydra_context is not None and self.config is not None
        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg.hydra.job):
                cfg.hydra.job.num = job_num
            hydra_config = HydraConfig.instance()
            saved = hydra_config.cfg
            hydra_config.set_config(cfg)  # ${hydra:job.num} etc. resolve against the job's config
            try:
                run_dir = Path(os.path.abspath(os.path.join(str(cfg.hydra.sweep.dir),
                                                            str(cfg.hydra.sweep.subdir))))
                logger = cfg.get("logger")
                return run_dir, OmegaConf.to_container(logger, resolve=True) if logger else None
            finally:
                hydra_config.cfg = saved
        except Exception as err:  # a subdir only the job can resolve: status goes elsewhere
            log.debug("cannot resolve the run dir of job %d: %s", job_num, err)
            return None, None

    def _prepare(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                 state: str = "SUBMITTING") -> list[tuple]:
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        log.info(f"rlrun '{self._EXECUTOR}' launcher, sweep dir: {sweep_dir}")
        params, prepared = [], set()
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            run_dir, logger = self._job_info(overrides, idx)
            if logger and repr(logger) not in prepared:
                prepared.add(repr(logger))
                try:
                    prepare_tracking(logger)
                except Exception as err:  # the jobs will report a bad store themselves, clearly
                    log.warning(f"could not prepare the MLflow store: {type(err).__name__}: {err}")
            status = (run_dir or sweep_dir.resolve() / ".status" / str(idx)) / STATUS_FILE
            update_status(status, fresh=True, state=state, job_num=idx, executor=self._EXECUTOR,
                          run_dir=str(run_dir) if run_dir else None, overrides=list(overrides),
                          sweep_dir=str(sweep_dir.resolve()))
            params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}",
                           Singleton.get_state(), str(status)))
        return params

    @staticmethod
    def _submitted(job: Any, params: tuple) -> None:
        update_status(Path(params[5]), if_unset_state="PENDING", job_id=job.job_id,
                      submitted_at=now(), submitit_folder=str(job.paths.folder),
                      stdout=str(job.paths.stdout), stderr=str(job.paths.stderr))

    @staticmethod
    def _results(jobs: list[Any], params: list[tuple]) -> list[JobReturn]:
        """Waits for every job; a failed one becomes a FAILED JobReturn (raised after all ended)."""
        results = []
        for job, p in zip(jobs, params):
            try:
                results.append(job.results()[0])
            except Exception as err:
                if read_status(Path(p[5])).get("state") not in FINAL_STATES:
                    update_status(Path(p[5]), state="FAILED", error=f"{type(err).__name__}: {err}"[:1000])
                results.append(JobReturn(overrides=p[0], status=JobStatus.FAILED, _return_value=err))
        return results


def ranks_from_tasks() -> None:
    """Makes this SLURM task a rank of the job's torch.distributed world (issue 39): submitit's
    ``TorchDistributedEnvironment`` exports what torchrun would (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` = the first node, ``MASTER_PORT`` from the
    job id), which ``rlrun.distributed.world`` reads. ``RLRUN_RANKS_FROM=slurm``: the scheduler
    allocated each task its CPUs, so the cores check meant for torchrun on one machine is skipped."""
    from submitit.helpers import TorchDistributedEnvironment

    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)  # each rank takes LOCAL_RANK's GPU
    os.environ["RLRUN_RANKS_FROM"] = "slurm"


def _exit_with(err: Exception) -> None:
    """Ends the sweep with one message and exit code 2 (a SystemExit passes Hydra's error report)."""
    import sys

    from rlrun.core.errors import RlrunError

    print(f"rlrun: error: {err.render() if isinstance(err, RlrunError) else err}", file=sys.stderr)
    raise SystemExit(getattr(err, "exit_code", 2))


class SlurmLauncherBase(SubmititLauncher):
    """One SLURM job array per batch; ``wait=false`` returns once it is queued."""

    _EXECUTOR = "slurm"
    _OWN_PARAMS = ("wait",)

    POLL_S = 5.0

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlrun.core.errors import RlrunError
        from rlrun.launch.slurm_checks import preflight

        try:  # a request no node can meet would wait forever: refuse it before submitting
            preflight(dict(self.params))
        except RlrunError as err:
            _exit_with(err)
        params = self._prepare(job_overrides, initial_job_idx)
        jobs = self._executor().map_array(self, *zip(*params))
        for job, p in zip(jobs, params):
            self._submitted(job, p)
        if self.options.get("wait", True):
            self._wait(jobs)
            results = self._results(jobs, params)
            self._report(jobs, params, results)
            return results
        assert self.config is not None
        log.info(f"submitted {len(jobs)} job(s) (array {jobs[0].job_id.split('_')[0]}); follow them with "
                 f"`python -m rlrun.launch status {self.config.hydra.sweep.dir}`")
        return [JobReturn(overrides=p[0], status=JobStatus.COMPLETED,
                          _return_value={"job_id": job.job_id, "status_file": p[5]})
                for job, p in zip(jobs, params)]

    def _wait(self, jobs: list[Any]) -> None:
        """Waits for the jobs; stops the sweep when one is pending for a reason that cannot clear."""
        import subprocess
        import time

        from rlrun.launch.slurm_checks import hopeless, hopeless_error

        warned = False
        while not all(job.done() for job in jobs):
            stuck = hopeless([job.job_id for job in jobs if not job.done()])
            if stuck:
                arrays = sorted({job.job_id.split("_")[0] for job in jobs})
                subprocess.run(["scancel", *arrays], capture_output=True, timeout=60)
                _exit_with(hopeless_error(stuck, len(jobs)))
            if not warned:
                warned = True
                log.info("waiting for %d job(s); pending reasons that cannot clear stop the sweep", len(jobs))
            time.sleep(self.POLL_S)

    @staticmethod
    def _report(jobs: list[Any], params: list[tuple], results: list[JobReturn]) -> None:
        """Prints each job's outcome as a table; a sweep with jobs that did not complete exits 1."""
        import sys

        from rlrun.launch.slurm_checks import outcome_table
        from rlrun.launch.status import scheduler_states

        states = scheduler_states([job.job_id for job in jobs])
        rows = []
        for job, p in zip(jobs, params):
            record = read_status(Path(p[5]))
            slurm = states.get(job.job_id) or str(getattr(job, "state", "?"))
            rows.append((p[2], job.job_id, slurm.split()[0] if slurm else "?", record.get("state", "?"),
                         record.get("run_dir") or "-"))
        print(outcome_table(rows), file=sys.stderr)
        bad = [r for r, ret in zip(rows, results) if ret.status != JobStatus.COMPLETED]
        if bad:
            print(f"rlrun: error: {len(bad)} of {len(rows)} job(s) did not complete "
                  f"({', '.join(sorted({r[2] for r in bad}))}); see the table above, each job's "
                  "stderr under the submitit folder, and `python -m rlrun.launch status <sweep dir>`",
                  file=sys.stderr)
            raise SystemExit(1)
