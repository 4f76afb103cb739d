"""TensorBoard as a logger, and several loggers at once (logger=multi)."""

from __future__ import annotations

import pytest
from cli_utils import only_run_dir, run_cli, summary_of

FAST = ["total_frames=2048", "collector.frames_per_batch=512", "eval.episodes=2", "eval.interval_frames=1024",
        "progress=false"]


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_logger_writes_the_metrics(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    code, _, err = run_cli(["logger=tensorboard", *FAST], tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    scalars = _scalars(run_dir / "tensorboard")
    evals = scalars["eval/episode_return"]
    assert [s for s, _ in evals] == [1024, 2048]
    assert [s for s, _ in scalars["frames"]] == [512, 1024, 1536, 2048]
    assert evals[-1][1] == pytest.approx(summary_of(run_dir)["eval/episode_return"])
    assert not (tmp_path / "mlflow.db").exists()


def test_multi_logs_to_mlflow_and_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from mlflow.tracking import MlflowClient

    code, _, err = run_cli(["logger=multi", *FAST], tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    summary = summary_of(run_dir)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = client.get_metric_history(summary["mlflow_run_id"], "eval/episode_return")
    tb = _scalars(run_dir / "tensorboard")["eval/episode_return"]
    logged = sorted((m.step, m.value) for m in history)
    assert [s for s, _ in logged] == [s for s, _ in tb]
    assert [v for _, v in logged] == pytest.approx([v for _, v in tb])  # TensorBoard stores float32
    assert client.get_run(summary["mlflow_run_id"]).info.status == "FINISHED"
