"""The MLflow worker process ends at once after ``finish``, its run finished in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

# An atexit handler runs on the interpreter's normal teardown only: the mark file tells whether
# the worker went through it (the seconds of teardown the run used to wait for).
WORKER = ("import atexit, sys; atexit.register(lambda: open(sys.argv[1], 'w').close()); "
          "from rlrun.loggers.remote_worker import serve; serve()")


def _serve(code: str, requests: list[tuple[str, dict]], *args: str
           ) -> tuple[subprocess.CompletedProcess, list]:
    """Runs a worker (``python -c code *args``) on ``requests``; returns the process and its replies."""
    stdin = "".join(json.dumps({"op": op, "kwargs": kw}) + "\n" for op, kw in requests)
    done = subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    return done, [json.loads(line) for line in done.stdout.splitlines()]


def test_worker_skips_the_teardown_after_finish(tmp_path: Path):
    mark = tmp_path / "teardown-ran"
    requests = [("open_store", {"tracking_uri": None, "root": str(tmp_path), "experiment": "rlrun"}),
                ("start_run", {"run_name": "r", "run_id": None, "tags": {}}),
                ("log_metrics", {"metrics": {"x": 1.0}, "step": 3}),
                ("finish", {"status": "FINISHED"})]
    done, replies = _serve(WORKER, requests, str(mark))
    assert done.returncode == 0 and len(replies) == 4 and all("result" in r for r in replies), done.stderr
    assert not mark.exists()
    from mlflow.tracking import MlflowClient

    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(replies[1]["result"])
    assert run.info.status == "FINISHED" and run.data.metrics == {"x": 1.0}


# Prints, at the end of input, which of the hidden libraries the worker's MLflow imported anyway.
WORKER_REPORTING = ("import atexit, sys; "
                    "from rlrun.loggers.remote_worker import WithoutDataLibraries, serve; "
                    "atexit.register(lambda: print(sorted(m for m in WithoutDataLibraries.HIDDEN "
                    "if m in sys.modules), file=sys.stderr)); serve()")


def test_every_request_is_served_without_pandas_or_numpy(tmp_path: Path):
    """The worker hides the data libraries from MLflow (as mlflow-skinny runs): every request the
    run sends still succeeds, and what it logged is in the store."""
    artifact = tmp_path / "config.yaml"
    artifact.write_text("seed: 1\n")
    requests = [("open_store", {"tracking_uri": None, "root": str(tmp_path), "experiment": "rlrun"}),
                ("start_run", {"run_name": "r", "run_id": None, "tags": {"algo": "ppo"}}),
                ("log_params", {"params": {"lr": "0.001"}}),
                ("log_metric_rows", {"rows": [[1, 1000, {"loss": 0.5}], [2, 2000, {"loss": 0.25}]]}),
                ("last_steps", {"keys": ["loss", "absent"]}),
                ("log_artifact", {"path": str(artifact)}),
                ("set_tags", {"tags": {"status": "ok"}})]
    done, replies = _serve(WORKER_REPORTING, requests)
    assert done.returncode == 0 and [list(r) for r in replies] == [["result"]] * len(requests), done.stdout
    assert replies[4]["result"] == {"loss": 2}
    assert done.stderr.strip().splitlines()[-1] == "[]"  # none of them was imported
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(replies[1]["result"])
    assert run.data.params == {"lr": "0.001"} and run.data.tags["status"] == "ok"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["config.yaml"]


def test_a_run_tagged_with_the_attempt_is_continued_not_made_again(tmp_path: Path):
    """A process killed before it learned its tracker run's id: the rerun's start_run, with the same
    attempt_id tag, continues that run; another attempt (or a malformed id) makes a new one."""
    from rlrun.loggers.mlflow_logger import MLflowLogger

    def started(tags: dict) -> str:
        logger = MLflowLogger()
        logger.open_store(None, tmp_path, "rlrun")
        logger.start_run("r", None, tags)
        return logger.run_id

    attempt, other = "0123456789abcdef" * 2, "fedcba9876543210" * 2
    first = started({"attempt_id": attempt, "algo": "ppo"})
    assert started({"attempt_id": attempt, "algo": "ppo"}) == first
    assert started({"attempt_id": other}) != first
    assert started({"attempt_id": "x' OR tags.algo = 'ppo"}) not in (first,)  # data, never a filter
