"""Files an older rlrun saved still load (issue 40 §4): the run directories under tests/golden/<commit>/
were written by running that commit (tests/golden/README.md says how); today's rlrun evaluates each
(the return the old run's own final evaluation gave), exports it and resumes it.

A change to a saved format without a migration and a golden file fails here too: every current
format version has a golden file, and every older golden version has a migration chain.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_utils import run_cli, summary_of

from rlrun.core import formats

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
_PPO_NOW = ["algo=ppo", "env=cartpole", "collector.frames_per_batch=256", "buffer.batch_size=64",
            "trainer.epochs_per_batch=1", "model.hidden=[8]", "eval.episodes=2", "eval.interval_frames=0",
            "logger=csv"]
_PPO = [*_PPO_NOW, "hooks.gae.every_epoch=true"]  # PPO's preset then: GAE every epoch (now once a batch)
_OFF = ["collector.frames_per_batch=100", "collector.init_random_frames=200", "buffer.capacity=400",
        "buffer.batch_size=32", "model.hidden=[8]", "eval.interval_frames=0", "logger=csv"]
# DQN on CartPole had no tuned preset then (conf/tuned/dqn_cartpole.yaml): its values then, spelled out
_DQN_THEN = ["exploration.annealing_frames=25000", "exploration.eps_end=0.05", "optim.lr=0.00025",
             "hooks.target_update.interval_updates=125", "optim.lr_schedule=constant",
             "trainer.updates_per_frame=0.25"]
_MARL = ["env=vmas/navigation", "env.num_envs=2", "env.max_steps=10", "env.n_agents=2",
         "collector.frames_per_batch=20", "buffer.batch_size=10", "trainer.epochs_per_batch=1",
         "model.hidden=[8]", "eval.episodes=2", "eval.interval_frames=0", "logger=csv"]
# run dir -> (the command that continues it, its frames so far, the budget to resume to)
RUNS = {
    "837d2f0/ppo": (_PPO, 512, 768),
    "837d2f0/sac": (["algo=sac", "env=pendulum", *_OFF, "eval.episodes=1"], 400, 500),
    "837d2f0/dqn": (["algo=dqn", "env=cartpole", *_OFF, "eval.episodes=2", *_DQN_THEN], 400, 500),
    "176d35c/mappo": (["algo=mappo", *_MARL], 40, 60),
    "176d35c/ippo": (["algo=ippo", *_MARL], 40, 60),
    "20c6036/mappo": (["algo=mappo", *_MARL], 40, 60),
    "20c6036/ippo": (["algo=ippo", *_MARL], 40, 60),
    "20c6036/ppo": (_PPO, 512, 768),
    "4dece35/ppo": (_PPO_NOW, 512, 768),  # checkpoint 3, summary 1: the formats of today
    "4dece35/mappo": (["algo=mappo", *_MARL], 40, 60),
}
DATASETS = ["176d35c/datasets", "20c6036/datasets", "4dece35/datasets"]
GROUP = ("mappo", "ippo")  # a multi-agent policy has no single-env export (rlrun export is single-agent)


def _copy(tmp_path: Path, name: str) -> Path:
    """The golden run dir copied (rlrun writes eval JSONs and checkpoints into a run dir)."""
    return Path(shutil.copytree(GOLDEN / name, tmp_path / name.replace("/", "-")))


@pytest.mark.parametrize("name", sorted(RUNS))
@pytest.mark.parametrize("target", ["run dir", "policy.pt"])
def test_an_older_run_evaluates_to_its_own_final_evaluation(tmp_path, capsys, name, target):
    run = _copy(tmp_path, name)
    path = run if target == "run dir" else run / "policy.pt"
    code, out, err = run_cli(["eval", str(path)], tmp_path, capsys)
    assert code == 0, err
    result = json.loads(Path(out.strip().rsplit(" -> ", 1)[1]).read_text())
    then = summary_of(run)["eval/episode_return"]  # what the commit that wrote it evaluated
    assert result["frames"] == RUNS[name][1]
    assert result["mean"] == pytest.approx(then, abs=1e-4), (result, then)


@pytest.mark.parametrize("name", sorted(n for n in RUNS if not n.endswith(GROUP)))
def test_an_older_run_exports(tmp_path, capsys, name):
    run = _copy(tmp_path, name)
    code, _, err = run_cli(["export", str(run)], tmp_path, capsys)
    assert code == 0, err
    program = torch.export.load(run / "policy.pt2")
    import rlrun

    pi = rlrun.load(run)
    obs = torch.zeros(3, *pi.spec.observation_shape)
    assert torch.equal(program.module()(obs), pi.forward(obs))


@pytest.mark.parametrize("name", sorted(n for n in RUNS if n.endswith(GROUP)))
def test_a_multi_agent_runs_export_is_refused_in_one_line(tmp_path, capsys, name):
    """A group policy acts on the agents' keys, which ``rlrun.load``/export do not take: exit 2 and
    one error line naming the way that works, not a traceback (it was ``'Environment' object has
    no attribute 'envs'`` after ``env.vectorization: unknown option``)."""
    run = _copy(tmp_path, name)
    code, _, err = run_cli(["export", str(run)], tmp_path, capsys)
    assert code == 2, err
    assert "Traceback" not in err and "multi-agent env" in err and "rlrun eval" in err, err
    assert not (run / "policy.pt2").exists()


@pytest.mark.parametrize("name", sorted(RUNS))
def test_an_older_run_resumes_from_its_checkpoint(tmp_path, capsys, name):
    args, frames, budget = RUNS[name]
    run = _copy(tmp_path, name)
    code, _, err = run_cli([*args, f"total_frames={budget}", f"hydra.run.dir={run}"], tmp_path, capsys)
    assert code == 0, err
    assert f"resuming from frame {frames} of {budget}" in err, err
    assert summary_of(run)["frames"] == budget
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert state["format_version"] == formats.CURRENT["checkpoint"][1] and state["policy"], sorted(state)


@pytest.mark.parametrize("name", DATASETS)
def test_an_older_dataset_trains_an_offline_run(tmp_path, capsys, name):
    root = _copy(tmp_path, name)
    code, _, err = run_cli(["algo=iql", "env=pendulum", "dataset=rlrun/pendulum/medium-replay-v0",
                            f"dataset_root={root}", "total_updates=4", "model.hidden=[8]", "eval.episodes=1",
                            "logger=csv", f"hydra.run.dir={tmp_path / 'iql'}"], tmp_path, capsys)
    assert code == 0, err
    assert summary_of(tmp_path / "iql")["status"] == "finished"


def test_an_older_finished_run_reads_its_summary_and_a_newer_one_is_refused(tmp_path, capsys):
    """summary.json from before it held a version is read as format 0; one of a newer format is one
    line (rerunning a finished run reads its summary)."""
    args, frames, _ = RUNS["20c6036/ppo"]
    run = _copy(tmp_path, "20c6036/ppo")
    assert "format_version" not in summary_of(run)
    code, _, err = run_cli([*args, f"total_frames={frames}", f"hydra.run.dir={run}"], tmp_path, capsys)
    assert code == 0 and "already finished" in err, err
    summary = summary_of(run)
    (run / "summary.json").write_text(json.dumps({**summary, "format_version": 99}))
    code, _, err = run_cli([*args, f"total_frames={frames}", f"hydra.run.dir={run}"], tmp_path, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert "newer rlrun" in lines[-2] and "summary.json" in lines[-2] and "upgrade" in lines[-1], err


def test_a_dataset_of_a_newer_format_is_refused_in_one_line(tmp_path, capsys):
    root = _copy(tmp_path, "20c6036/datasets")
    meta_path = root / "rlrun/pendulum/medium-replay-v0/data/metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["rlrun"]["format_version"] = 99
    meta_path.write_text(json.dumps(meta))
    code, _, err = run_cli(["algo=iql", "env=pendulum", "dataset=rlrun/pendulum/medium-replay-v0",
                            f"dataset_root={root}", "total_updates=4", "logger=csv",
                            f"hydra.run.dir={tmp_path / 'iql'}"], tmp_path, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "newer rlrun" in lines[0] and "metadata.json" in lines[0], err


_FILES = {"checkpoint": "*/*/checkpoint.pt", "policy": "*/*/policy.pt", "summary": "*/*/summary.json",
          "dataset": "*/datasets/**/data/metadata.json"}


def _golden_versions(kind: str) -> set[int | None]:
    def read(p: Path):
        return torch.load(p, weights_only=True) if p.suffix == ".pt" else json.loads(p.read_text())

    return {formats.version_of(kind, read(p)) for p in GOLDEN.glob(_FILES[kind])}


@pytest.mark.parametrize("kind", sorted(formats.CURRENT))
def test_each_current_format_has_a_golden_file_and_each_older_one_a_migration_chain(kind):
    """The CI rule: bumping a saved format in rlrun.core.formats.CURRENT (or adding a kind) needs a
    golden file written at the new version (tests/golden/<commit>/, README) and a migration from
    every older golden version."""
    assert kind in _FILES, f"a new saved kind {kind!r}: say where its golden files are in _FILES"
    versions, current = _golden_versions(kind), formats.CURRENT[kind][1]
    assert None not in versions, f"a golden {kind} file holds no readable version"
    assert current in versions, f"no golden {kind} of format {current} under {GOLDEN}: add one (README)"
    for old in versions:
        assert old <= current, f"a golden {kind} of format {old} is newer than this rlrun's {current}"
        missing = [v for v in range(old, current) if (kind, v) not in formats.MIGRATIONS]
        assert not missing, f"{kind} format {old} has no migration from {missing} to {current}"
