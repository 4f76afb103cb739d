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
          "from rlrun.record.remote_worker import serve; serve()")


def test_worker_skips_the_teardown_after_finish(tmp_path: Path):
    mark = tmp_path / "teardown-ran"
    requests = [("open_store", {"tracking_uri": None, "root": str(tmp_path), "experiment": "rlrun"}),
                ("start_run", {"run_name": "r", "run_id": None, "tags": {}}),
                ("log_metrics", {"metrics": {"x": 1.0}, "step": 3}),
                ("finish", {"status": "FINISHED"})]
    stdin = "".join(json.dumps({"op": op, "kwargs": kw}) + "\n" for op, kw in requests)
    done = subprocess.run([sys.executable, "-c", WORKER, str(mark)], input=stdin, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and len(replies) == 4 and all("result" in r for r in replies), done.stderr
    assert not mark.exists()
    from mlflow.tracking import MlflowClient

    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(replies[1]["result"])
    assert run.info.status == "FINISHED" and run.data.metrics == {"x": 1.0}
