"""Exact resume, component by component, through ``rlrun.lifecycle.run.train``.

Each run is stopped at frame N as a signal would stop it (checkpoint written),
then rebuilt and restored. Every component of the restored run must equal both
what the checkpoint holds and what the run that wrote it held at the save; and
a run built afresh must differ in that component, so that each comparison can
fail (removing any restore in ``rlrun.lifecycle.run._restore`` fails its test here).

A resumed run does not continue bit for bit as the uninterrupted run: the
collector starts fresh episodes on resume (the envs are reset with seed
``seed + 7919 * frames // num_envs``; env states are not checkpointed), so the
batches collected after frame N, and all that is trained from them, differ.
``test_interrupted_run_matches_the_uninterrupted_one`` checks everything else:
at frame N every component equals the uninterrupted run's (save the collector's
trajectory counter, which skips the ids of the abandoned episodes), and at the
end the schedules, counters and learning rates agree.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import resume_utils
import torch
from resume_utils import (
    TIMING_KEYS,
    ProbeTrainer,
    checkpoint_states,
    composed,
    differences,
    scramble_global_rngs,
)

import rlrun
from rlrun.lifecycle import run

SMALL = ["logger=none", "device=cpu", "progress=false", "model.hidden=[16,16]", "eval.episodes=1"]
OFF_POLICY = [*SMALL, "env=pendulum", "total_frames=400", "collector.frames_per_batch=50",
              "collector.init_random_frames=50", "trainer.optim_steps_per_epoch=5",
              "buffer.batch_size=16", "buffer.capacity=1000", "eval.interval_frames=75",
              "checkpoint.interval_frames=125", "hooks.target_update.interval_updates=3"]
CONFIGS = {
    "sac_prioritized": ["algo=sac", "buffer=prioritized", *OFF_POLICY],
    "ddpg_ou": ["algo=ddpg", *OFF_POLICY],
    "td3_gaussian": ["algo=td3", *OFF_POLICY],
    "ppo_normalizer_linear_lr": [
        *SMALL, "algo=ppo", "env=cartpole", "model.normalize_observations=true",
        "optim.lr_schedule=linear", "total_frames=512", "env.num_envs=2",
        "collector.frames_per_batch=64", "buffer.batch_size=32", "trainer.epochs_per_batch=2",
        "eval.interval_frames=96", "checkpoint.interval_frames=160"],
}
# Agent groups on VMAS (skipped without vmas): the same loop, the same checkpoint, keys under "agents"
VMAS_SMALL = [*SMALL, "env=vmas/navigation", "env.num_envs=4", "env.max_steps=10", "total_frames=400",
              "collector.frames_per_batch=40", "eval.interval_frames=80", "checkpoint.interval_frames=120"]
if importlib.util.find_spec("vmas") is not None:
    CONFIGS["qmix_vmas"] = ["algo=qmix", *VMAS_SMALL, "trainer.epochs_per_batch=1",
                            "trainer.optim_steps_per_epoch=2", "buffer.batch_size=16", "buffer.capacity=1000",
                            "exploration.annealing_frames=200", "hooks.target_update.interval_updates=3"]
    CONFIGS["mappo_vmas"] = ["algo=mappo", *VMAS_SMALL, "optim.lr_schedule=linear", "buffer.batch_size=20",
                             "trainer.epochs_per_batch=2"]
WRITER_SEED = 777
STOP_AT = {"sac_prioritized": 150, "ddpg_ou": 150, "td3_gaussian": 150, "ppo_normalizer_linear_lr": 256,
           "qmix_vmas": 160, "mappo_vmas": 160}
# Interval hooks (evaluation, checkpoint, target_update) keep no schedule: the trainer's restored
# clock says when they are due; test_interrupted_run_matches_the_uninterrupted_one compares when they fire.
BASE = ["models", "optimizer", "lr", "rng", "buffer", "priorities", "collector", "counters",
        "hook:evaluation"]
COMPONENTS = {
    "sac_prioritized": BASE,
    "ddpg_ou": [*BASE, "exploration"],
    "td3_gaussian": [*BASE, "exploration"],
    "ppo_normalizer_linear_lr": BASE,
    "qmix_vmas": [*BASE, "exploration"],
    "mappo_vmas": BASE,
}
# a constant learning rate, and a uniform sampler (no state), are the same in a fresh run
INSENSITIVE = {"sac_prioritized": {"lr"}, "ddpg_ou": {"lr", "priorities"},
               "td3_gaussian": {"lr", "priorities"}, "ppo_normalizer_linear_lr": set(),
               "qmix_vmas": {"lr", "priorities"}, "mappo_vmas": set()}


def _build_only(cfg, run_dir: Path) -> dict:
    """Builds (and restores, if ``run_dir`` holds a checkpoint) without training; returns the snapshot."""
    ProbeTrainer.reset(train_at_all=False)
    run.train(cfg, run_dir)
    return ProbeTrainer.snapshots["start"]


class Resumed:
    """One config's writer run (stopped at N), its checkpoint, and the states around it."""

    def __init__(self, name: str, root: Path):
        self.name, self.root = name, root
        self.cfg = composed(*CONFIGS[name])
        self.n = STOP_AT[name]
        saves: list[dict] = []
        with pytest.MonkeyPatch.context() as mp:
            resume_utils.install(mp, saves)
            ProbeTrainer.reset(stop_at=self.n)
            scramble_global_rngs(WRITER_SEED)  # rlrun seeds torch only; numpy and python keep theirs
            summary = run.train(self.cfg, root / "writer")
            assert summary["status"] == "interrupted" and summary["frames"] == self.n
            self.writer = saves[-1]
            self.fired = list(ProbeTrainer.last.fired)
            self.pristine = root / "pristine"
            shutil.copytree(root / "writer", self.pristine)
            self.checkpoint = checkpoint_states(torch.load(self.pristine / run.CHECKPOINT,
                                                           weights_only=True))
            scramble_global_rngs()
            self.restored = _build_only(self.cfg, self.copy("restored"))
            scramble_global_rngs(54321)
            self.fresh = _build_only(self.cfg, root / "fresh")

    def copy(self, name: str) -> Path:
        dest = self.root / name
        shutil.copytree(self.pristine, dest)
        return dest


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    cache: dict[str, Resumed] = {}

    def get(name: str) -> Resumed:
        if name not in cache:
            cache[name] = Resumed(name, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def _expected_restore(r: Resumed, component: str):
    """What the restored component must equal: the checkpoint's, but for documented changes."""
    want = r.checkpoint[component]
    if component == "collector":
        # the abandoned episodes keep their ids: the fresh ones get the next num_envs
        want = {**want, "next_traj": want["next_traj"] + r.cfg.env.num_envs}
    return want


CASES = [(name, c) for name in CONFIGS for c in COMPONENTS[name]]


@pytest.mark.parametrize(("config", "component"), CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_restored_component_equals_checkpoint_and_writer(resumed, config, component):
    r = resumed(config)
    assert component in r.restored, f"{component} missing from the restored run"
    assert not differences(r.checkpoint[component], r.writer[component], component), \
        "the checkpoint does not hold what the writer had"
    assert not differences(r.restored[component], _expected_restore(r, component), component)
    if component not in INSENSITIVE[config]:
        assert differences(r.fresh[component], r.checkpoint[component], component), \
            f"a fresh run already equals the checkpoint in {component}: this check cannot fail"


@pytest.mark.parametrize("config", list(CONFIGS))
def test_every_stateful_component_is_compared(resumed, config):
    r = resumed(config)
    assert set(r.restored) == set(COMPONENTS[config]) == set(r.checkpoint)


def test_checkpoint_holds_non_trivial_state(resumed):
    """Guards against vacuous equality: the compared states are the ones that matter."""
    sac, ppo, ddpg = resumed("sac_prioritized"), resumed("ppo_normalizer_linear_lr"), resumed("ddpg_ou")
    adam = next(iter(sac.checkpoint["optimizer"]["critic"].values()))
    assert int(adam["step"]) == sac.checkpoint["counters"]["optim_steps"] == 3 * 5
    assert adam["exp_avg"].abs().sum() > 0 and adam["exp_avg_sq"].abs().sum() > 0
    assert sac.checkpoint["buffer"]["storage"]["length"] == 150
    tree = sac.checkpoint["priorities"]["sum_tree"]
    assert tree.unique().numel() > 2, "priorities were never updated"
    assert [f for f, _, _ in sac.fired if f == "target_update"] == ["target_update"] * 5  # every 3 of 15
    batch_events = [(f, frames) for f, frames, _ in sac.fired if f != "target_update"]
    assert batch_events == [("evaluation", 100), ("evaluation", 150), ("checkpoint", 150)]
    assert ddpg.checkpoint["exploration"]["frames"] == 150 - 50  # not the 50 random frames
    assert ddpg.checkpoint["exploration"]["state"].abs().sum() > 0
    td3 = resumed("td3_gaussian")
    assert td3.checkpoint["exploration"] == {"frames": 100}
    # TD3's actor-delay counter keeps its phase: 15 updates with policy_delay 2 leave it at 1
    assert td3.checkpoint["models"]["_extra_state"] == {"calls": 15 % 2}
    assert ppo.checkpoint["models"]["policy.normalizer.count"] > 0
    assert ppo.checkpoint["lr"]["all"] == [pytest.approx(1e-3 * (1 - 256 / 512))]


@pytest.mark.parametrize("config", ["sac_prioritized", "ppo_normalizer_linear_lr"])
def test_fresh_process_restores_every_component(resumed, config, tmp_path):
    r = resumed(config)
    run_dir, out = r.copy(f"process-{tmp_path.name}"), tmp_path / "state.pt"
    script = Path(resume_utils.__file__)
    # the child imports the rlrun this process runs (a mutation tool's copy included)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(rlrun.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script), str(run_dir / "config.yaml"), str(run_dir), str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = torch.load(out, weights_only=False)
    for component in COMPONENTS[config]:
        assert not differences(state[component], _expected_restore(r, component), component)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_interrupted_run_matches_the_uninterrupted_one(resumed, config, tmp_path):
    r = resumed(config)
    with pytest.MonkeyPatch.context() as mp:
        resume_utils.install(mp)
        ProbeTrainer.reset(snapshot_at=r.n)
        scramble_global_rngs(WRITER_SEED)  # the global RNGs the interrupted run started from
        whole = run.train(r.cfg, tmp_path / "whole")
        at_n, whole_end = ProbeTrainer.snapshots["at"], resume_utils.component_states(ProbeTrainer.last)
        whole_fired = ProbeTrainer.last.fired
        ProbeTrainer.reset()
        scramble_global_rngs()
        resumed_summary = run.train(r.cfg, r.copy(f"continued-{tmp_path.name}"))
        restored, resumed_end = ProbeTrainer.snapshots["start"], resume_utils.component_states(
            ProbeTrainer.last)
        resumed_fired = ProbeTrainer.last.fired
    # the interval hooks fire at the same clocks (frames, optimiser steps) after the resume
    after_n = [e for e in whole_fired if e[1] > r.n]
    assert resumed_fired == after_n and {"evaluation", "checkpoint"} <= {e[0] for e in after_n}
    assert whole_fired[:len(whole_fired) - len(after_n)] == r.fired[:len(whole_fired) - len(after_n)]
    for component in COMPONENTS[config]:
        assert not differences(restored[component], _at_n(at_n, component, r), component,
                               ignore=TIMING_KEYS)
    assert resumed_summary["frames"] == whole["frames"] == r.cfg.total_frames
    assert resumed_summary["optim_steps"] == whole["optim_steps"]
    for component in ("counters", "lr", *(c for c in COMPONENTS[config] if c.startswith("hook:"))):
        assert not differences(resumed_end[component], whole_end[component], component,
                               ignore=(*TIMING_KEYS, "last"))
    if "exploration" in COMPONENTS[config]:
        assert resumed_end["exploration"]["frames"] == whole_end["exploration"]["frames"]
    assert resumed_end["collector"]["frames"] == whole_end["collector"]["frames"]


def _at_n(at_n: dict, component: str, r: Resumed):
    if component != "collector":
        return at_n[component]
    return {**at_n["collector"], "next_traj": at_n["collector"]["next_traj"] + r.cfg.env.num_envs}
