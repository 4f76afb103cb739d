"""Using a trained policy: `rlrun eval`, `rlrun.load`, `rlrun export`, the policy artifact."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from cli_utils import only_run_dir, run_cli, summary_of
from mlflow.tracking import MlflowClient

import rlrun
from rlrun.core.rundir import RunLock

PPO_TINY = ["total_frames=2048", "collector.frames_per_batch=512", "eval.episodes=3"]


def train(tmp_path, capsys, *overrides: str):
    code, _, err = run_cli([*PPO_TINY, *overrides], tmp_path, capsys)
    assert code == 0, err
    return only_run_dir(tmp_path)


def test_eval_reproduces_the_runs_final_evaluation_while_it_is_locked(tmp_path, capsys):
    run_dir = train(tmp_path, capsys, "logger=none")
    summary = summary_of(run_dir)
    ckpt = (run_dir / "checkpoint.pt").read_bytes()
    with RunLock(run_dir):  # as if the run were still training: eval neither needs nor takes the lock
        code, out, err = run_cli(["eval", str(run_dir), "episodes=3", "out=eval.json"], tmp_path, capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["mean"] == summary["eval/episode_return"]          # exactly, with the run's eval seed
    assert result["std"] == summary["eval/episode_return_std"]
    assert result["episodes"] == 3 and result["frames"] == 2048
    assert f"return {summary['eval/episode_return']:.2f} ±" in out
    assert (run_dir / "checkpoint.pt").read_bytes() == ckpt
    # another seed: other episodes; stochastic: the behaviour policy (sampling)
    code, _, err = run_cli(["eval", str(run_dir), "seed=5", "deterministic=false", "episodes=4"],
                           tmp_path, capsys)
    assert code == 0, err
    other = json.loads(next((run_dir / "eval").glob("*seed5-stochastic-4ep.json")).read_text())
    assert other["episodes"] == 4 and not other["deterministic"]
    code, _, err = run_cli(["eval", str(run_dir), "episode=3"], tmp_path, capsys)
    assert code == 2 and "Did you mean 'episodes'" in err
    code, _, err = run_cli(["eval", str(tmp_path / "nowhere")], tmp_path, capsys)
    assert code == 2 and "no run directory or checkpoint" in err


EXPORTED = """
import sys, torch
program = torch.export.load(sys.argv[1]).module()
torch.save(program(torch.load(sys.argv[2])), sys.argv[3])
assert not any(m == "rlrun" or m.startswith("rlrun.") for m in sys.modules), "rlrun was imported"
"""


@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_load_and_exported_program_agree_action_for_action(tmp_path, capsys, env):
    overrides = ["logger=none"] + (["env=pendulum", "model.normalize_observations=true"] if env == "pendulum"
                                   else [])
    run_dir = train(tmp_path, capsys, *overrides)
    pi = rlrun.load(run_dir)
    assert pi.config.env.id == ("Pendulum-v1" if env == "pendulum" else "CartPole-v1")
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(100, *pi.spec.observation_shape, generator=gen) * 3
    torch.save(obs, tmp_path / "obs.pt")

    live = pi(obs)
    # the same actions from the policy's own networks, mapped into the env's action space by hand
    with torch.no_grad():
        raw = pi.policy.act(obs)
    if env == "pendulum":
        assert pi.policy.normalizer is not None and pi.policy.normalizer.count > 500
        torch.testing.assert_close(live, 2.0 * raw.clamp(-1, 1))  # Pendulum's torque bounds: [-2, 2]
        assert live.abs().max() <= 2.0
    else:
        assert torch.equal(live, raw)
    assert np.array_equal(pi(obs.numpy()), live.numpy())              # numpy in, numpy out
    # one observation, unbatched: a batch of one takes another matmul kernel, which may round the last bit
    np.testing.assert_allclose(pi(obs[7].numpy()), live[7].numpy(), rtol=0, atol=1e-6)

    code, out, err = run_cli(["export", str(run_dir), "--format", "pt2", "--out", str(tmp_path / "pi.pt2")],
                             tmp_path, capsys)
    assert code == 0, err
    files = [str(tmp_path / f) for f in ("pi.pt2", "obs.pt", "actions.pt")]
    snippet = subprocess.run([sys.executable, "-c", EXPORTED, *files], capture_output=True, text=True)
    assert snippet.returncode == 0, snippet.stderr
    assert torch.equal(torch.load(tmp_path / "actions.pt"), live)

    # a plain gymnasium env takes the actions as they come
    plain = gym.make(pi.config.env.id)
    o, _ = plain.reset(seed=0)
    for _ in range(5):
        o, *_ = plain.step(pi(o))

    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    code, _, err = run_cli(["export", str(run_dir), "--format", "onnx"], tmp_path, capsys)
    assert code == 0, err
    session = ort.InferenceSession(str(run_dir / "policy.onnx"))
    onnx_actions = session.run(None, {"observation": obs.numpy()})[0]
    if env == "pendulum":  # ONNX Runtime's kernels round differently from torch's
        np.testing.assert_allclose(onnx_actions, live.numpy(), rtol=0, atol=1e-5)
    else:
        assert np.array_equal(onnx_actions, live.numpy())


def test_final_policy_is_a_tracker_artifact_that_loads(tmp_path, capsys):
    run_dir = train(tmp_path, capsys)
    summary = summary_of(run_dir)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    artifacts = {a.path for a in client.list_artifacts(summary["mlflow_run_id"])}
    assert "policy.pt" in artifacts
    downloaded = client.download_artifacts(summary["mlflow_run_id"], "policy.pt", str(tmp_path / "dl"))
    obs = torch.randn(50, 4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(rlrun.load(downloaded)(obs), rlrun.load(run_dir)(obs))
    code, _, err = run_cli(["eval", downloaded, "episodes=3", "out=from_artifact.json"], tmp_path, capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "from_artifact.json").read_text())["mean"] == summary["eval/episode_return"]


def test_the_checkpoint_saves_the_policy_under_its_own_key_and_load_reads_it(tmp_path, capsys):
    run_dir = train(tmp_path, capsys, "logger=none", "total_frames=1024")
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    from_loss = {k.removeprefix("policy."): v for k, v in state["loss"].items() if k.startswith("policy.")}
    assert set(state["policy"]) == set(from_loss)
    assert all(torch.equal(state["policy"][k], from_loss[k]) for k in from_loss)
    # load reads that key, not the loss's entries: a policy saved apart is the one that acts
    state["policy"] = {k: torch.zeros_like(v) if v.is_floating_point() else v
                       for k, v in state["policy"].items()}
    torch.save(state, tmp_path / "zeroed.pt")
    loaded = rlrun.load(tmp_path / "zeroed.pt")
    assert all(not p.any() for p in loaded.policy.parameters())
    # a checkpoint of an older rlrun (no policy key): one line, exit 2, pointing at policy.pt
    del state["policy"]
    torch.save(state, tmp_path / "old.pt")
    code, _, err = run_cli(["eval", str(tmp_path / "old.pt"), "episodes=1"], tmp_path, capsys)
    assert code == 2 and "holds no policy of its own" in err and "policy.pt" in err
    assert err.startswith("rlrun: error: path: "), err  # the key at fault: the file given
    assert "Traceback" not in err
