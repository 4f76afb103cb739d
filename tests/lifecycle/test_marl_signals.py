"""A multi-agent run stopped by SIGTERM saves, exits 143, and the same command finishes it exactly,
in the same tracker run."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_utils import spawn, summary_of
from mlflow.tracking import MlflowClient

pytest.importorskip("vmas")

RUN = Path("runs/marl")
ARGS = ["algo=mappo", "env=vmas/navigation", "env.num_envs=4", "env.max_steps=20", "total_frames=6000",
        "collector.frames_per_batch=80", "buffer.batch_size=40", "trainer.epochs_per_batch=2",
        "model.hidden=[16,16]", "checkpoint.interval_frames=160", "eval.interval_frames=0",
        "eval.episodes=1", "progress=false", f"hydra.run.dir={RUN}"]


def mlflow_runs(cwd: Path) -> list:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rlrun")
    return client.search_runs([exp.experiment_id]) if exp else []


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_saves_exits_143_and_the_same_command_finishes_exactly_in_one_tracker_run(tmp_path):
    proc = spawn(ARGS, tmp_path)
    deadline = time.time() + 180
    while time.time() < deadline and not (tmp_path / RUN / "checkpoint.pt").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    stopped = summary_of(tmp_path / RUN)
    assert stopped["status"] == "interrupted" and 0 < stopped["frames"] < 6000
    assert stopped["frames"] % 80 == 0  # whole batches only
    saved = torch.load(tmp_path / RUN / "checkpoint.pt", weights_only=True)
    assert saved["frames"] == stopped["frames"]

    proc = spawn(ARGS, tmp_path)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    finished = summary_of(tmp_path / RUN)
    assert finished["status"] == "finished" and finished["frames"] == 6000
    runs = mlflow_runs(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert finished["mlflow_run_id"] == stopped["mlflow_run_id"] == runs[0].info.run_id
