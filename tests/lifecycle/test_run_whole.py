"""A run is built whole (``rlrun.lifecycle.build.build_run``) and closed as one; its tracker run
opens only once a checkpoint is restored."""

from __future__ import annotations

import torch
from cli_utils import run_cli
from mlflow.tracking import MlflowClient

from rlrun.lifecycle.build import Parts, Run, build_run
from rlrun.loggers.deferred import DeferredLogger


def _runs(tmp_path) -> list:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def test_a_checkpoint_that_does_not_fit_leaves_no_tracker_run(tmp_path, capsys):
    base = ["algo=ppo", "env=cartpole", "collector.frames_per_batch=256", "eval.episodes=1",
            "logger=mlflow", "hydra.run.dir=r", "progress=false"]
    code, _, err = run_cli([*base, "total_frames=512"], tmp_path, capsys)
    assert code == 0, err
    assert len(_runs(tmp_path)) == 1
    path = tmp_path / "r/checkpoint.pt"
    state = torch.load(path, weights_only=True)
    state["loss"] = {k.replace("net.0.", "layers.0."): v for k, v in state["loss"].items()}
    torch.save(state, path)
    code, _, err = run_cli([*base, "total_frames=1024"], tmp_path, capsys)
    assert code == 2 and "does not fit this run" in err, err
    assert len(_runs(tmp_path)) == 1  # no second, empty tracker run


def test_build_run_returns_the_whole_run_closed_as_one(tmp_path, monkeypatch):
    from resume_utils import composed

    monkeypatch.chdir(tmp_path)
    cfg = composed("algo=ppo", "env=cartpole", "total_frames=512", "collector.frames_per_batch=256",
                   "eval.episodes=1", "logger=csv", "progress=false")
    closed: list[str] = []
    close = Parts.close
    monkeypatch.setattr(Parts, "close", lambda parts: (closed.append("envs"), close(parts)))
    with build_run(cfg, tmp_path / "run", torch.device("cpu")) as run:
        assert isinstance(run, Run) and isinstance(run.logger, DeferredLogger)
        assert run.trainer.logger is run.logger and run.logger.opened is None  # opened by the run, later
        assert run.trainer.hooks["checkpoint"] is not None and "progress" in run.trainer.hooks
        assert closed == []
    assert closed == ["envs"]
