"""checkpoint.keep_best / keep_last (issue 42): the best evaluation's policy is kept in
``<run dir>/best``, ties to the earlier; the best so far is resumable state, so a run killed
(SIGKILL) between writing ``best/policy.pt`` and its checkpoint ends, once resumed, with the
``best/`` and the metrics of a run never killed."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from rlrun.trainer.builtins import KeepBest


class _Clock:
    def __init__(self):
        self.frames, self.logged = 0, []

    def log(self, metrics):
        self.logged.append(dict(metrics))


def test_keep_best_keeps_the_strictly_better_and_ties_to_the_earlier():
    saved = []
    hook = KeepBest(lambda frames, metrics: saved.append((frames, metrics["eval/episode_return"])))
    trainer = _Clock()
    for frames, ret in [(10, 5.0), (20, 9.0), (30, 9.0), (40, float("nan")), (50, 3.0)]:
        trainer.frames = frames
        hook.post_eval(trainer, {"eval/episode_return": ret})
    assert saved == [(10, 5.0), (20, 9.0)]  # 30 ties 20: the earlier stays
    assert trainer.logged[-1] == {"eval/best_return": 9.0, "eval/best_frame": 20.0}
    fresh = KeepBest(lambda *a: saved.append(a))
    fresh.load_state_dict(hook.state_dict())
    trainer.frames = 60
    fresh.post_eval(trainer, {"eval/episode_return": 9.0})
    assert len(saved) == 2  # the restored best still wins the tie


ARGS = ["algo=ppo", "env=cartpole", "total_frames=2048", "collector.frames_per_batch=256",
        "checkpoint.interval_frames=512", "eval.interval_frames=256", "eval.episodes=2",
        "checkpoint.keep_best=true", "checkpoint.keep_last=2", "progress=false", "threads=1",
        "seed=0", "logger=csv"]


def _run(cwd: Path, name: str, kill_at: str | None = None, nth: int = 1) -> tuple[int, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RLRUN_TEST_PAUSE_AT": kill_at or "",
           "RLRUN_TEST_PAUSE_S": "5"}  # the announcement is seen well within it
    proc = subprocess.Popen([sys.executable, "-m", "rlrun", *ARGS, f"hydra.run.dir=runs/{name}"], cwd=cwd,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen, err, deadline = 0, [], time.monotonic() + 300
    for line in proc.stderr:
        err.append(line)
        if kill_at and f"test pause: {kill_at}" in line:
            seen += 1
            if seen == nth:
                proc.kill()  # SIGKILL: no handler runs
                break
        if time.monotonic() > deadline:
            proc.kill()
            break
    return proc.wait(timeout=60), "".join(err)


def _metric(run: Path, name: str) -> list[tuple[str, str]]:
    with open(run / "metrics.csv") as f:
        return [(r["step"], r["value"]) for r in csv.DictReader(f) if r["key"] == name]


def test_keep_best_survives_sigkill_and_resume(tmp_path):
    code, err = _run(tmp_path, "clean")
    assert code == 0, err[-2000:]
    clean = tmp_path / "runs" / "clean"
    best = json.loads((clean / "best" / "eval.json").read_text())
    returns = [float(v) for _, v in _metric(clean, "eval/episode_return")]
    assert best["eval/episode_return"] == max(returns)  # the best evaluation, the first of its value
    kept = sorted(p.name for p in (clean / "checkpoints").glob("*.pt"))
    assert kept == ["000000001536.pt", "000000002048.pt"]  # keep_last=2 of 512, ..., 2048

    # killed between best/policy.pt and best/eval.json: at the 2nd best written, then at the
    # resumed run's 1st (replaying the batches after its checkpoint)
    for nth in (2, 1):
        code, err = _run(tmp_path, "killed", kill_at="best_write", nth=nth)
        assert code == -9, f"the run ended before its planned kill: {err[-1000:]}"
        # the best so far is in the checkpoint the resume reads, as the metrics it covers say
        run = tmp_path / "runs" / "killed"
        state = torch.load(run / "checkpoint.pt", weights_only=True)
        covered = [float(v) for st, v in _metric(run, "eval/episode_return") if int(st) <= state["frames"]]
        assert state["hooks"]["keep_best"]["best_return"] == max(covered)
    code, err = _run(tmp_path, "killed")
    assert code == 0, err[-2000:]
    killed = tmp_path / "runs" / "killed"
    # (a resumed run's returns need not equal the clean run's: episodes in flight at the
    # checkpoint are not saved; what must hold is the best-so-far carried across the kills)
    returns = [(int(st), float(v)) for st, v in _metric(killed, "eval/episode_return")]
    best_series = [(int(st), float(v)) for st, v in _metric(killed, "eval/best_return")]
    assert Counter(st for st, _ in best_series).most_common(1)[0][1] == 1  # one value per (metric, step)
    running, expected = float("-inf"), []
    for st, v in returns:
        running = max(running, v)
        expected.append((st, running))
    assert best_series == expected  # a best reset by a resume would drop below the running max
    top = max(v for _, v in returns)
    first = min(st for st, v in returns if v == top)  # ties: the earlier
    kept = json.loads((killed / "best" / "eval.json").read_text())
    assert (kept["frames"], kept["eval/episode_return"]) == (first, top)
    frames = _metric(killed, "eval/best_frame")[-1][1]
    assert float(frames) == first
    policy = torch.load(killed / "best" / "policy.pt", weights_only=True)
    assert policy["frames"] == first  # the policy beside eval.json is that evaluation's
