"""Kill harness (issue 25, sections 2 and 3): SIGKILLs at seeded random points of real
``python -m rlrun`` processes, each followed by a rerun, then the run finishes; afterwards
no store is bricked, no frame is lost, every logger holds each (metric, step) once, and each
run directory has exactly one tracker run.

Kills land while the embedded MLflow store is being created (first runs in a fresh
directory, mid-schema and just before it is moved into place), while checkpoints are
written, between a checkpoint and the journal's send, between that send and the journal's
update, and at random moments near checkpoints. The exact points come from the test hook
``RLRUN_TEST_PAUSE_AT`` (``rlrun.loggers.pause_point``): the process announces each point on
stderr and, with ``RLRUN_TEST_PAUSE_S`` > 0, waits there to be killed.

Bounded in time: 4 kills in sequence during store creation, then 4 run directories side
by side with 5 kills each (23 in all); every wait has a deadline (HARNESS_S).
"""

from __future__ import annotations

import csv
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from followed import Followed

# 8 checkpoints (every 512 frames): five kills of one directory move it on by at most 7 (an exact
# point by one, a kill near the 1st or 2nd checkpoint after the resume by two), so every planned
# kill lands before the run ends (with 2048 frames, 17 of 23 did on a quiet machine)
TOTAL = 4096
DIRS = 4
# hard bound on the whole harness (23 kills, 27 process starts; on the shared 2-core box 643 s at load
# 12, 359 s at load 5, 98 s beside one other test process; RLRUN_HARNESS_S changes it)
HARNESS_S = float(os.environ.get("RLRUN_HARNESS_S", "900"))


def args(i: int) -> list[str]:
    return ["algo=ppo", "env=cartpole", f"total_frames={TOTAL}", "collector.frames_per_batch=256",
            "checkpoint.interval_frames=512", "eval.interval_frames=1024", "eval.episodes=1",
            "progress=false", "threads=1", f"seed={i}", f"hydra.run.dir=runs/r{i}", "logger=multi",
            "+logger.loggers.csv={name: csv}"]


class Attempt(Followed):
    """One ``python -m rlrun`` process, killed at an announced point (or left to finish)."""

    def __init__(self, cwd: Path, i: int, point: str | None, pause_s: float):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "RLRUN_TEST_PAUSE_AT": point or "",
               "RLRUN_TEST_PAUSE_S": str(pause_s)}
        super().__init__([sys.executable, "-m", "rlrun", *args(i)], cwd, env)

    def kill_after(self, point: str, nth: int, delay: float, deadline: float) -> bool:
        """SIGKILLs ``delay`` s after the ``nth`` announcement of ``point``; False if it ended first."""
        seen = 0
        while seen < nth:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                pytest.fail(f"no '{point}' within the harness's time; stderr: {''.join(self.err)[-2000:]}")
            if line is None:
                return False
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"the harness ran out of time waiting for '{point}'")
            seen += f"test pause: {point}" in line
        time.sleep(delay)
        self.proc.send_signal(signal.SIGKILL)
        return True

    def wait(self, deadline: float) -> int:
        try:
            return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"an rlrun process did not end in time; stderr: {''.join(self.err)[-2000:]}")


def attempt(cwd: Path, i: int, plan: tuple[str, int, float, float] | None, deadline: float,
            outcomes: list) -> None:
    """Runs one attempt; ``plan`` = (point, nth, pause_s, delay) or None (run to the end)."""
    point, nth, pause_s, delay = plan or (None, 0, 0.0, 0.0)
    a = Attempt(cwd, i, point, pause_s)
    killed = a.kill_after(point, nth, delay, deadline) if point else False
    code = a.wait(deadline)
    outcomes.append((i, plan, killed, code, "".join(a.err)))


def kill_plans(rng: random.Random) -> list[tuple[str, int, float, float]]:
    """Five kills of one run directory: exact points and random moments near checkpoints."""
    exact = [("checkpoint_write", 1, 60.0, 0.0), ("checkpoint_commit", 1, 60.0, 0.0),
             ("journal_send", 1, 60.0, 0.0)]
    near = [("checkpoint_write", rng.randint(1, 2), 0.0, rng.uniform(0.0, 0.4)) for _ in range(2)]
    plans = exact + near
    rng.shuffle(plans)
    return plans


def scalars(log_dir: Path) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_kills_at_random_points_never_brick_lose_or_duplicate(tmp_path):
    pytest.importorskip("tensorboard")
    from mlflow.tracking import MlflowClient

    rng = random.Random(25)
    deadline = time.monotonic() + HARNESS_S
    outcomes: list = []
    # 1. the first run in a fresh directory, killed while it creates the MLflow store
    store_kills = [("store_create", 1, 0.0, rng.uniform(0.05, 1.0)) for _ in range(2)]
    store_kills.insert(rng.randint(0, 2), ("store_place", 1, 60.0, 0.0))
    for plan in store_kills:
        attempt(tmp_path, 0, plan, deadline, outcomes)
    # 2. four runs side by side in the one store, each killed five times, then run to the end
    failures: list[BaseException] = []

    def series(i: int) -> None:
        try:
            for plan in [*kill_plans(random.Random(rng.random() + i)), None]:
                attempt(tmp_path, i, plan, deadline, outcomes)
        except BaseException as err:  # pytest.fail in a thread: re-raised below, with what was done
            failures.append(AssertionError(f"r{i}: {err}; done: {[o[:4] for o in outcomes]}"))

    threads = [threading.Thread(target=series, args=(i,)) for i in range(DIRS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "the harness ran out of time"
    if failures:
        raise failures[0]

    kills = sum(killed for _, _, killed, _, _ in outcomes)
    assert kills >= 20, [o[:4] for o in outcomes]
    store_killed = [o for o in outcomes if o[1] and o[1][0].startswith("store") and o[2]]
    assert len(store_killed) >= 3, [o[:4] for o in outcomes]
    # zero bricked stores: every process that was not killed ended well, none said "error"
    for i, plan, killed, code, err in outcomes:
        if not killed:
            assert code == 0, (i, plan, err[-3000:])
        assert "rlrun: error" not in err and "Traceback" not in err, (i, plan, err[-3000:])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("rlrun")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == DIRS, [r.info.run_name for r in runs]  # one tracker run per directory
    assert not list(tmp_path.glob("mlflow.db.tmp-*")) and not list(tmp_path.glob("mlflow.prev-*"))
    for i in range(DIRS):
        run_dir = tmp_path / "runs" / f"r{i}"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["frames"] == TOTAL  # zero lost frames
        run = client.get_run(summary["mlflow_run_id"])
        assert run.info.status == "FINISHED"
        assert [r.info.run_id for r in runs].count(run.info.run_id) == 1
        with open(run_dir / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        csv_pairs = Counter((r["key"], int(r["step"])) for r in rows)
        assert [p for p, n in csv_pairs.items() if n > 1] == [], f"duplicated in metrics.csv of r{i}"
        csv_values = {(r["key"], int(r["step"])): float(r["value"]) for r in rows}
        every_batch = list(range(256, TOTAL + 1, 256))
        assert sorted(s for k, s in csv_pairs if k == "frames") == every_batch  # no row lost either
        for key in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, key)
            steps = Counter(m.step for m in history)
            assert [s for s, n in steps.items() if n > 1] == [], f"{key} duplicated in MLflow (r{i})"
            # the values of the attempt that continued: the same in MLflow as in the CSV
            in_csv = {p: v for p, v in csv_values.items() if p[0] == key}
            in_mlflow = {(key, m.step): m.value for m in history}
            assert in_mlflow == pytest.approx(in_csv, rel=1e-6, nan_ok=True), key
        tb = scalars(run_dir / "tensorboard")
        for tag, steps in tb.items():
            assert len(steps) == len(set(steps)), f"{tag} duplicated in TensorBoard (r{i}): {steps}"
            assert sorted(steps) == sorted(s for k, s in csv_pairs if k == tag), tag
        assert not (run_dir / "mlflow.journal").exists()  # everything was sent
