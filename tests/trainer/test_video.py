"""Videos of evaluation episodes: playable MP4s with one frame per step (plus the reset frame)."""

from __future__ import annotations

import json

import pytest
import torch
from cli_utils import only_run_dir, run_cli, summary_of
from mlflow.tracking import MlflowClient

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
pytest.importorskip("moviepy")


def frames_of(path) -> int:
    """Frames decoded by ffmpeg (imageio-ffmpeg's own binary), reading every frame back."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    count = sum(1 for _ in reader)
    assert count > 0 and meta["size"][0] > 0
    assert imageio_ffmpeg.count_frames_and_secs(str(path))[0] == count
    return count


def test_cartpole_videos_in_training_and_eval_leave_the_run_unchanged(tmp_path, capsys):
    base = ["total_frames=1024", "collector.frames_per_batch=256", "eval.episodes=2",
            "eval.interval_frames=256"]
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    code, _, err = run_cli([*base, "logger=none"], tmp_path / "off", capsys)
    assert code == 0, err
    code, _, err = run_cli([*base, "eval.video=true", "eval.video_every=2"], tmp_path / "on", capsys)
    assert code == 0, err
    off, on = only_run_dir(tmp_path / "off"), only_run_dir(tmp_path / "on")
    # rendering never touches the training or evaluation envs: the same run, frame for frame
    s_off, s_on = summary_of(off), summary_of(on)
    for key in ("eval/episode_return", "eval/episode_return_std", "train/episode_return_recent"):
        assert s_off[key] == s_on[key], key
    w_off = torch.load(off / "checkpoint.pt", weights_only=True)["loss"]
    w_on = torch.load(on / "checkpoint.pt", weights_only=True)["loss"]
    assert all(torch.equal(w_off[k], w_on[k]) for k in w_off)

    # evaluations at 256, 512, 768, 1024 frames; every 2nd recorded
    videos = sorted(p.name for p in (on / "videos").glob("*.mp4"))
    assert videos == ["eval-frame0000000256.mp4", "eval-frame0000000768.mp4"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'on' / 'mlflow.db'}")
    artifacts = {a.path for a in client.list_artifacts(s_on["mlflow_run_id"])}
    assert set(videos) <= artifacts

    # every evaluation episode, recorded; CartPole pays 1 per step, so a return is a length
    code, _, err = run_cli(["eval", str(on), "video=true", "episodes=2", "out=ev.json"], tmp_path, capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "ev.json").read_text())
    assert result["mean"] == s_on["eval/episode_return"]  # recording does not change the episodes
    assert len(result["videos"]) == 2
    lengths = sorted(frames_of(v) - 1 for v in result["videos"])  # + the frame after reset
    assert lengths == sorted(int(r) for r in result["returns"])


def _egl_missing() -> bool:
    """MuJoCo renders headless through EGL (Debian: libegl1 libegl-mesa0 libgbm1 libgl1-mesa-dri)."""
    import ctypes.util
    import os

    return ctypes.util.find_library("EGL") is None and os.environ.get("RLRUN_REQUIRE_EGL") != "1"


@pytest.mark.skipif(_egl_missing(), reason="no EGL library (apt-get install libegl1 libegl-mesa0 libgbm1 "
                    "libgl1-mesa-dri); CI installs it and sets RLRUN_REQUIRE_EGL=1")
def test_halfcheetah_videos_render_headless(tmp_path, capsys):
    steps = 30
    code, _, err = run_cli(["env=halfcheetah", f"env.max_episode_steps={steps}", "total_frames=256",
                            "collector.frames_per_batch=128", "eval.episodes=1", "eval.video=true"],
                           tmp_path, capsys)
    assert code == 0, err
    run_dir = only_run_dir(tmp_path)
    (video,) = (run_dir / "videos").glob("*.mp4")
    assert frames_of(video) == steps + 1
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert video.name in {a.path for a in client.list_artifacts(summary_of(run_dir)["mlflow_run_id"])}
    code, out, err = run_cli(["eval", str(run_dir), "video=true", "episodes=2"], tmp_path, capsys)
    assert code == 0, err
    listed = [line.split("video: ")[1] for line in out.splitlines() if "video: " in line]
    assert len(listed) == 2 and all(frames_of(v) == steps + 1 for v in listed)


def test_atari_render_env_records_one_frame_per_agent_step(tmp_path):
    pytest.importorskip("ale_py")
    from omegaconf import OmegaConf

    from rlrun.lifecycle.compose import CONF_DIR
    from rlrun.trainer.evaluation import Evaluator
    from rlrun.trainer.video import record, render_env

    env_cfg = OmegaConf.load(CONF_DIR / "env" / "breakout.yaml")
    env_cfg.max_episode_steps = 200  # emulator frames: a short episode
    env = render_env(env_cfg, 1)
    record(env, tmp_path, [1])
    steps = []

    def act(obs):
        steps.append(1)
        return torch.zeros(obs.shape[0], dtype=torch.int64)

    try:
        Evaluator(env, 1, seed=0).evaluate(act)
    finally:
        env.close()
    (video,) = tmp_path.glob("*.mp4")
    assert frames_of(video) == len(steps) + 1


def test_video_hook_is_wired_only_when_asked_for(tmp_path, capsys):
    code, out, err = run_cli(["explain", "eval.video=true", "eval.video_every=3"], tmp_path, capsys)
    assert code == 0, err
    assert "eval_video         EvalVideo        [built in: eval.video=true]" in out
    code, out, err = run_cli(["explain"], tmp_path, capsys)
    assert code == 0, err
    assert "EvalVideo" not in out and "post_eval:" not in out
    code, _, err = run_cli(["explain", "eval.video=true", "eval.video_every=0"], tmp_path, capsys)
    assert code == 2 and "eval.video_every" in err
