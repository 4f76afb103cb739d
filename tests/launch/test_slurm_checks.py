"""SLURM requests that could never start: refused before submitting, with the key and the largest fit.

The parsing and checking run anywhere; the checks against the live cluster skip without one.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from cli_utils import spawn
from launch_utils import FAST, SLURM_SMALL, UNENDING

from rlrun.core.errors import ConfigError
from rlrun.launch.slurm_checks import (
    Node,
    Partition,
    check_requests,
    gres_gpus,
    hopeless_error,
    keys_for,
    parse_minutes,
)

PART = Partition("p", [Node("a", 8, 16000, 0), Node("b", 32, 64000, 4)], max_time_min=2880,
                 max_mem_per_node_mb=None)


@pytest.mark.parametrize(("text", "minutes"), [
    ("UNLIMITED", None), ("INFINITE", None), ("30", 30), ("30:30", 30.5), ("02:00:00", 120),
    ("1-00:00:00", 1440), ("2-12", 2 * 1440 + 720), ("1-01:30", 1440 + 90)])
def test_slurm_times_in_minutes(text, minutes):
    assert parse_minutes(text) == minutes


@pytest.mark.parametrize(("gres", "gpus"), [("(null)", 0), ("gpu:4", 4), ("gpu:a100:2(S:0-1)", 2),
                                            ("gpu:a100:2,gpu:v100:1", 3), ("tmpdisk:100", 0)])
def test_gpus_of_a_node(gres, gpus):
    assert gres_gpus(gres) == gpus


@pytest.mark.parametrize(("params", "key", "largest"), [
    ({"cpus_per_task": 33}, "cpus_per_task", "cpus_per_task=32"),
    ({"cpus_per_task": 9, "tasks_per_node": 4}, "cpus_per_task", "cpus_per_task=8"),  # 32 CPUs / 4 tasks
    ({"mem_gb": 63}, "mem_gb", "mem_gb=62"),  # 64000 MB is 62.5 GB
    ({"gpus_per_node": 8}, "gpus_per_node", "gpus_per_node=4"),
    ({"timeout_min": 2881}, "timeout_min", "timeout_min=2880"),
    ({"nodes": 3}, "nodes", "nodes=2"),
    # the largest of everything at once: node b has it
    ({"cpus_per_task": 32, "mem_gb": 62, "gpus_per_node": 4}, None, None),
])
def test_requests_checked_against_the_partition(params, key, largest):
    if key is None:
        check_requests(params, PART)  # node b fits all at once
        return
    with pytest.raises(ConfigError) as info:
        check_requests(params, PART)
    assert info.value.key == f"hydra.launcher.{key}"
    assert f"hydra.launcher.{largest} or less" in info.value.fix


def test_requests_that_fit_no_single_node_are_refused():
    part = Partition("p", [Node("cpu", 64, 256000, 0), Node("gpu", 8, 32000, 2)], None, None)
    with pytest.raises(ConfigError, match="no single node"):
        check_requests({"cpus_per_task": 16, "gpus_per_node": 1}, part)


@pytest.mark.parametrize(("reason", "key"), [
    ("PartitionConfig", "cpus_per_task"), ("PartitionTimeLimit", "timeout_min"),
    ("QOSMaxCpuPerJobLimit", "cpus_per_task"), ("QOSMaxWallDurationPerJobLimit", "additional_parameters"),
    ("AssocMaxMemPerJob", "mem_gb"), ("Resources", None), ("Priority", None), ("ReqNodeNotAvail", None),
    ("BeginTime", None), ("QOSMaxJobsPerUserLimit", None)])
def test_pending_reasons_that_cannot_clear(reason, key):
    keys = keys_for(reason)
    assert (keys[0] if keys else None) == key
    if key:
        err = hopeless_error({"12_0": reason}, 2)
        assert err.key == f"hydra.launcher.{key}" and reason in err.message and "cancelled" in err.message


def _node_cpus_and_mem(partition: str) -> tuple[int, int]:
    nodes = subprocess.run(["sinfo", "-h", "-N", "-p", partition, "-o", "%c %m"], capture_output=True,
                           text=True, timeout=30, check=True).stdout.split("\n")
    sizes = [tuple(int(x) for x in line.split()) for line in nodes if line.strip()]
    return max(c for c, _ in sizes), max(m for _, m in sizes)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("request_key", ["cpus_per_task", "mem_gb", "partition"])
def test_sweep_asking_for_more_than_the_cluster_has_is_refused_before_submitting(tmp_path, slurm_partition,
                                                                                 request_key):
    cpus, mem_mb = _node_cpus_and_mem(slurm_partition)
    too_much = {"cpus_per_task": cpus + 1, "mem_gb": mem_mb // 1024 + 1, "partition": "nosuchpartition"}
    small = [a for a in SLURM_SMALL if not a.startswith(f"hydra.launcher.{request_key}=")]
    partition = [] if request_key == "partition" else [f"hydra.launcher.partition={slurm_partition}"]
    proc = spawn(["-m", "hydra/launcher=slurm", *partition, *small,
                  f"hydra.launcher.{request_key}={too_much[request_key]}", *FAST, "seed=0,1",
                  f"hydra.sweep.dir={tmp_path / 'sw'}"], tmp_path)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err and err.count("rlrun: error:") == 1, err[-3000:]
    assert f"hydra.launcher.{request_key}:" in err
    largest = {"cpus_per_task": f"cpus_per_task={cpus} or less", "mem_gb": f"mem_gb={mem_mb // 1024} or less",
               "partition": slurm_partition}[request_key]
    assert largest in err, err
    assert not list((tmp_path / "sw").rglob("job.json"))  # nothing was submitted


@pytest.mark.timeout(300)
def test_job_pending_for_a_reason_that_cannot_clear_stops_the_wait(tmp_path, slurm_partition, capsys):
    """A job past the preflight (here: submitted directly) that pends on PartitionConfig is cancelled."""
    import submitit

    from rlrun.launch.submitit_launch import SlurmLauncherBase

    cpus, _ = _node_cpus_and_mem(slurm_partition)
    executor = submitit.AutoExecutor(folder=tmp_path / "sub", cluster="slurm")
    executor.update_parameters(slurm_partition=slurm_partition, slurm_cpus_per_task=cpus + 1,
                               slurm_mem_gb=1, timeout_min=5)
    jobs = executor.map_array(abs, [-1, -2])

    class Waiter:
        POLL_S = 1.0

    with pytest.raises(SystemExit) as info:
        SlurmLauncherBase._wait(Waiter(), jobs)  # type: ignore[arg-type]
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "2 of 2 job(s) can never start: PENDING (PartitionConfig)" in err
    assert "hydra.launcher.cpus_per_task" in err and "fix:" in err
    queue = subprocess.run(["squeue", "-h", "-j", jobs[0].job_id.split("_")[0]], capture_output=True,
                           text=True, timeout=30).stdout
    assert "PD" not in queue  # cancelled, not left waiting


@pytest.mark.timeout(600)
def test_cancelled_job_ends_the_sweep_with_a_table_not_a_traceback(tmp_path, slurm_partition):
    from launch_utils import job_records, wait_for

    proc = spawn(["-m", "hydra/launcher=slurm", f"hydra.launcher.partition={slurm_partition}", *SLURM_SMALL,
                  UNENDING, "collector.frames_per_batch=256", "eval.interval_frames=0",
                  "logger=none", "progress=false", "seed=0", f"hydra.sweep.dir={tmp_path / 'sw'}"], tmp_path)
    record = wait_for(lambda: next((r for r in job_records(tmp_path / "sw") if r.get("state") == "RUNNING"),
                                   None), 300, "the job to run", proc=proc)
    try:
        subprocess.run(["scancel", record["job_id"]], check=True, timeout=60)
        _, err = proc.communicate(timeout=300)
    finally:  # a failed test leaves no job training on
        subprocess.run(["scancel", record["job_id"]], timeout=60)
        proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err and "UncompletedJobError" not in err, err[-3000:]
    table = err[err.index("job_id"):]
    assert re.search(rf"\s0 {re.escape(record['job_id'])}\s+CANCELLED", table), table
    assert "rlrun: error: 1 of 1 job(s) did not complete (CANCELLED)" in err
