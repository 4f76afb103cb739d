"""multi_sync / multi_async: layout, consistency with SyncCollector, weight pushes, resume, no orphans.

Workers start from a forkserver that imports torch once per test session (the
first collector here pays it, ~5-10 s on a loaded 2-core machine); later
collectors start in well under a second.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest
import torch
from cli_utils import run_cli
from collector_fakes import MAX_STEPS, BiasPolicy, ExplodingEnv, counter_env
from process_utils import descendants, running, wait_gone  # noqa: F401

from rlrun.collectors.multiprocess import SEED_STRIDE, MultiCollector, WorkerError
from rlrun.collectors.sync import SyncCollector
from rlrun.core.contracts import Source
from rlrun.core.errors import ConfigError
from rlrun.envs.gym import GymVecEnv
from rlrun.modules.networks import Actor, mlp

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.timeout(120)]
TESTS = Path(__file__).resolve().parents[1] / "helpers"  # collector_fakes, for the script below
SYNC_KEYS = {"observation", "action", ("next", "observation"), ("next", "reward"), ("next", "done"),
             ("next", "terminated"), ("next", "truncated"), ("collector", "traj_ids")}


# ------------------------------------------------------------------ process helpers (Linux /proc)

def worker_tree(coll: MultiCollector) -> set[int]:
    """The workers and everything they started."""
    return set(coll.worker_pids).union(*(descendants(p) for p in coll.worker_pids))


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


# ------------------------------------------------------------------ batches

def rows_are_consistent(td) -> None:
    """next obs of step t is obs of step t+1 unless the episode ended; ids change exactly at ends."""
    obs, nxt = td["observation"], td["next", "observation"]
    done = td["next", "done"].squeeze(-1)
    traj = td["collector", "traj_ids"]
    cont = ~done[:, :-1]
    assert torch.equal(nxt[:, :-1][cont], obs[:, 1:][cont])
    assert torch.equal(traj[:, 1:] != traj[:, :-1], done[:, :-1])
    # the counter's step field: 0 at an episode start, +1 per step
    assert torch.equal(nxt[..., 0], obs[..., 0] + 1)
    assert (obs[:, 1:, 0][done[:, :-1]] == 0).all()


@linux_only
def test_multi_sync_batches_layout_consistency_and_exact_frames():
    with MultiCollector(counter_env, BiasPolicy((0.0, 1.0)), frames_per_batch=40, total_frames=98,
                        workers=2, method="forward") as coll:
        assert isinstance(coll, Source)
        batches = list(coll)
        assert coll.frames == coll.total_frames == 100  # rounded up to workers x num_envs = 4
    assert [b.batch_size for b in batches] == [torch.Size([4, 10])] * 2 + [torch.Size([4, 5])]
    td = torch.cat(batches, 1)  # rows are stable: row = worker * num_envs + sub-env
    assert set(td.keys(include_nested=True, leaves_only=True)) == SYNC_KEYS | {
        "value", ("collector", "policy_version"), ("collector", "worker")}
    assert torch.equal(td["collector", "worker"], torch.arange(4).div(2, rounding_mode="floor")[:, None]
                       .expand(4, 25))
    assert (td["collector", "policy_version"] == 0).all()
    rows_are_consistent(td)
    # worker w's sub-env i was seeded seed + w * SEED_STRIDE + i: the counter's marker field says so
    assert torch.equal(td["observation"][:, 0, 1], torch.tensor([0.0, 1.0, SEED_STRIDE, SEED_STRIDE + 1]))
    # terminations and truncations at MAX_STEPS both occur; ids are unique per episode
    term, trunc = td["next", "terminated"].squeeze(-1), td["next", "truncated"].squeeze(-1)
    assert term.any() and trunc.any() and (td["observation"][..., 0][trunc] == MAX_STEPS - 1).all()
    ids = td["collector", "traj_ids"]
    starts = torch.cat([torch.ones(4, 1, dtype=torch.bool), ids[:, 1:] != ids[:, :-1]], 1)
    assert ids[starts].unique().numel() == int(starts.sum())
    assert (td["action"] == 1).all()
    assert torch.equal(td["next", "reward"].squeeze(-1), td["next", "observation"][..., 0])  # (step + 1) * 1


@linux_only
def test_one_worker_reproduces_the_single_process_collector():
    env = counter_env()
    torch.manual_seed(0)
    actor = Actor(mlp(3, [8], 2), "categorical", 2)
    torch.manual_seed(5)  # a SyncCollector samples with the global RNG; worker 0 seeds it with `seed`
    ref = SyncCollector(env, actor.explore, 20, 60, seed=5)
    expected = list(ref)
    env.close()
    with MultiCollector(counter_env, actor, 20, 60, workers=1, seed=5) as coll:
        got = list(coll)
    assert len(got) == len(expected) == 3
    for a, b in zip(got, expected):
        for key in SYNC_KEYS | {"sample_log_prob"}:
            assert torch.equal(a[key], b[key]), key


@linux_only
def test_multi_async_yields_whole_rollouts_in_arrival_order_until_exact_frames():
    with MultiCollector(counter_env, BiasPolicy(), frames_per_batch=8, total_frames=70, workers=2,
                        mode="async", method="forward") as coll:
        batches = list(coll)
        returns, lengths = coll.pop_episode_stats()
    assert sum(b.numel() for b in batches) == coll.frames == 70  # rounded up to num_envs = 2
    # 35 vector steps: eight rollouts of 4 steps and the shortened last one of 3, one worker's each
    assert sorted(b.batch_size[1] for b in batches) == [3] + [4] * 8
    assert {b.batch_size[0] for b in batches} == {2}
    for b in batches:
        w = b["collector", "worker"]
        assert (w == w[0, 0]).all()
        assert set(b.keys(include_nested=True, leaves_only=True)) >= SYNC_KEYS
    by_worker = {w: torch.cat([b for b in batches if b["collector", "worker"][0, 0] == w], 1) for w in (0, 1)}
    for td in by_worker.values():  # each worker's rollouts follow on from each other
        rows_are_consistent(td)
    # every finished episode of action 0 pays -(1 + 2 + ... + length)
    assert lengths and all(r == -length * (length + 1) / 2 for r, length in zip(returns, lengths))


@linux_only
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pushed_weights_reach_the_workers_with_a_version(mode):
    source = BiasPolicy((1.0, 0.0))  # action 0
    with MultiCollector(counter_env, source, 8, 10**6, workers=2, mode=mode, method="forward") as coll:
        it = iter(coll)
        first = next(it)
        assert (first["action"] == 0).all() and (first["collector", "policy_version"] == 0).all()
        coll.update_policy_weights({"logits": torch.tensor([0.0, 2.0])})  # action 1
        assert coll.policy_version == 1
        seen = [next(it) for _ in range(6)]
        with torch.no_grad():
            source.logits.copy_(torch.tensor([3.0, 0.0]))  # back to action 0, pushed from the source
        coll.update_policy_weights()
        seen += [next(it) for _ in range(6)]
    assert coll.policy_version == 2
    for b in seen:  # a rollout never mixes versions, and its actions are its version's
        version = b["collector", "policy_version"]
        assert (version == version[0, 0]).all()
        assert (b["action"] == (1 if version[0, 0] == 1 else 0)).all()
        assert (b["value"] == (2.0 if version[0, 0] == 1 else 3.0 if version[0, 0] == 2 else 1.0)).all()
    versions = [int(b["collector", "policy_version"][0, 0]) for b in seen]
    assert versions[-1] == 2 and 1 in versions  # async may still deliver a rollout or two of older versions
    if mode == "sync":
        assert versions == [1] * 6 + [2] * 6


@linux_only
def test_state_dict_resumes_counters_and_rng_exactly():
    actor = Actor(mlp(3, [8], 2), "categorical", 2)
    with MultiCollector(counter_env, actor, 8, 64, workers=2, seed=3) as coll:
        it = iter(coll)
        early = [next(it) for _ in range(2)]
        state = coll.state_dict()
        rest = list(it)
    assert state["frames"] == 16 and len(state["workers"]) == 2

    def resumed():
        with MultiCollector(counter_env, actor, 8, 64, workers=2, seed=3) as c:
            c.load_state_dict(state)
            assert c.frames == 16
            return list(c)

    a, b = resumed(), resumed()
    assert sum(x.numel() for x in a) == 64 - 16
    for x, y in zip(a, b):  # the same state gives the same batches: RNG and counters are restored
        assert torch.equal(x["action"], y["action"]) and torch.equal(x["observation"], y["observation"])
    # fresh episodes with trajectory ids that continue (no clash with those handed out before)
    old_ids = torch.cat([x["collector", "traj_ids"].flatten() for x in early]).unique()
    new_ids = a[0]["collector", "traj_ids"][:, 0]
    assert (new_ids > old_ids.max()).all() and (a[0]["observation"][:, 0, 0] == 0).all()
    assert len(rest) == len(a)


@linux_only
def test_bad_frames_per_batch_is_a_config_error_and_leaves_no_workers():
    before = descendants(os.getpid())
    with pytest.raises(ConfigError, match="collector.frames_per_batch"):
        MultiCollector(counter_env, BiasPolicy(), 6, 100, workers=2, method="forward")  # 6 % (2 x 2) != 0
    assert not wait_gone(descendants(os.getpid()) - before - _mp_helpers())


def _mp_helpers() -> set[int]:
    """multiprocessing's forkserver and resource tracker: shared per process, not collector workers."""
    out = set()
    for pid in descendants(os.getpid()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forkserver" in cmd or b"resource_tracker" in cmd:
            out.add(pid)
    return out


# ------------------------------------------------------------------ no orphans, clear failures

@linux_only
def test_shutdown_leaves_no_worker_processes():
    before = descendants(os.getpid())  # what earlier tests in this xdist process left running
    coll = MultiCollector(functools.partial(GymVecEnv, "CartPole-v1", 2, "async"), BiasPolicy(), 8, 16,
                          workers=2, method="forward")  # async vector envs: the workers have children
    tree = worker_tree(coll)
    assert len(tree) >= 2 + 4
    list(coll)
    coll.shutdown()
    coll.shutdown()  # idempotent
    assert not wait_gone(tree)
    assert not (descendants(os.getpid()) - _mp_helpers() - before)


@linux_only
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_killed_mid_run_raises_a_clear_error_fast_and_leaves_no_orphans(mode):
    coll = MultiCollector(counter_env, BiasPolicy(), 8, 10**9, workers=2, mode=mode, method="forward",
                          timeout_s=60)
    tree = worker_tree(coll)
    it = iter(coll)
    next(it)
    os.kill(coll.worker_pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker 1 \(pid \d+\) was killed by SIGKILL"):
        for _ in range(10**6):
            next(it)
    assert time.monotonic() - start < 5.0
    assert not wait_gone(tree)
    with pytest.raises(RuntimeError, match="shut down"):
        next(iter(coll))


@linux_only
def test_a_failing_env_reports_its_traceback():
    with MultiCollector(ExplodingEnv, BiasPolicy(), 8, 10**6, workers=2, method="forward") as coll:
        tree = worker_tree(coll)
        with pytest.raises(WorkerError, match=r"(?s)worker \d \(pid \d+\) raised RuntimeError: the env "
                                              r"exploded at step 6; the run keeps its last checkpoint: fix "
                                              r"the error below.*Traceback.*RuntimeError: the env exploded"):
            list(coll)
    assert not wait_gone(tree)


SCRIPT = """
import functools, sys
sys.path.insert(0, {tests!r})
from collector_fakes import BiasPolicy
from rlrun.collectors.multiprocess import MultiCollector
from rlrun.envs.gym import GymVecEnv

if __name__ == "__main__":
    env_fn = functools.partial(GymVecEnv, "CartPole-v1", 2, "async")  # the workers have children too
    coll = MultiCollector(env_fn, BiasPolicy(), 8, 10**12, workers=2, mode="async", method="forward")
    print(*coll.worker_pids, flush=True)
    for batch in coll:
        pass
"""


@linux_only
def test_sigterm_to_a_collecting_process_leaves_no_orphans(tmp_path):
    script = tmp_path / "collect.py"
    script.write_text(SCRIPT.format(tests=str(TESTS)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = {int(p) for p in proc.stdout.readline().split()}
        assert len(pids) == 2
        time.sleep(0.5)  # mid-collection
        tree = descendants(proc.pid)
        assert pids <= tree and len(tree) >= 2 + 4
        proc.send_signal(signal.SIGTERM)  # no handler: Python dies at once, no atexit, no finally
        assert proc.wait(10) == -signal.SIGTERM
        assert not wait_gone(tree), "collector processes outlived their main process"
    finally:
        if proc.poll() is None:
            proc.kill()


# ------------------------------------------------------------------ registry

@linux_only
def test_registered_multi_sync_rebuilds_the_env_in_workers_and_follows_the_live_actor():
    from rlrun.core.policy import Policy
    from rlrun.core.registry import build

    env = GymVecEnv("CartPole-v1", 2)
    actor = BiasPolicy((1.0, 0.0))
    try:
        noisy = Policy(actor)
        noisy.exploration = object()
        with pytest.raises(ConfigError, match="exploration"):
            build("collector", {"name": "multi_sync", "frames_per_batch": 8}, env=env, policy=noisy,
                  total_frames=16)
        coll = build("collector", {"name": "multi_sync", "workers": 2, "frames_per_batch": 8}, env=env,
                     policy=Policy(actor), total_frames=24, seed=0)
    finally:
        env.close()
    with coll:
        it = iter(coll)
        assert (next(it)["action"] == 0).all()
        with torch.no_grad():  # what an optimiser step does to the live actor
            actor.logits.copy_(torch.tensor([0.0, 1.0]))
        coll.update_policy_weights()  # as the loop does after each batch's post_steps
        b = next(it)
    assert (b["action"] == 1).all() and (b["collector", "policy_version"] == 1).all()
    assert b["observation"].shape == (4, 2, 4)


@linux_only
def test_multi_async_gathers_rollouts_per_batch_in_arrival_order():
    with MultiCollector(counter_env, BiasPolicy(), frames_per_batch=16, total_frames=70, workers=2,
                        mode="async", method="forward", rollouts_per_batch=2) as coll:
        batches = list(coll)
    # 35 vector steps: eight rollouts of 4 steps (16 frames = 2 rollouts x 4 steps x 2 envs) and the
    # budget's shortened last one of 3, two per batch; a pair of unequal lengths is yielded as two batches
    assert sum(b.numel() for b in batches) == coll.frames == 70
    per_length = {}
    for b in batches:
        per_length[b.batch_size[1]] = per_length.get(b.batch_size[1], 0) + b.batch_size[0] // 2
    assert per_length == {4: 8, 3: 1}
    assert [tuple(b.batch_size) for b in batches[:3]] == [(4, 4)] * 3
    assert sorted(tuple(b.batch_size) for b in batches[3:]) in ([(2, 3), (4, 4)], [(2, 3), (2, 4), (2, 4)])
    for b in batches:  # each pair of rows is one worker's rollout, one policy version
        w = b["collector", "worker"].reshape(-1, 2, b.batch_size[1])
        assert (w == w[:, :1, :1]).all()
    with pytest.raises(ConfigError, match="rollouts_per_batch"):
        MultiCollector(counter_env, BiasPolicy(), 16, 70, workers=2, mode="async", rollouts_per_batch=3)


# ------------------------------------------------------------------ option values (issue 25 §6)

@pytest.fixture
def nothing_built(monkeypatch):
    """Fails the test if the run gets as far as building (env, model, workers)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the run was built: the bad value was not refused at the config check")
    monkeypatch.setattr("rlrun.lifecycle.run.build_run", refuse)


@pytest.mark.parametrize("override, key", [
    ("collector.timeout_s=0", "collector.timeout_s"),
    ("collector.timeout_s=-1", "collector.timeout_s"),
    ("collector.workers=1000", "collector.workers"),
    ("collector.workers=0", "collector.workers"),
    ("collector.rollouts_per_batch=0", "collector.rollouts_per_batch"),
    ("collector.frames_per_batch=0", "collector.frames_per_batch"),
    ("collector.init_random_frames=-5", "collector.init_random_frames"),
    ("collector.start_method=fork", "collector.start_method"),
    ("collector.backend=rayx", "collector.backend"),
    ("collector.ray_address=notahost:abc", "collector.ray_address"),
    ("collector.ray_address=10.0.0.1:70000", "collector.ray_address"),
])
@pytest.mark.parametrize("collector", ["multi_sync", "multi_async"])
def test_bad_collector_values_give_one_message_and_exit_2_before_anything_is_built(
        tmp_path, capsys, nothing_built, collector, override, key):
    if override.startswith("collector.rollouts_per_batch") and collector == "multi_sync":
        pytest.skip("multi_sync has no rollouts_per_batch")
    backend = ["collector.backend=ray"] if "ray_address" in override else []
    code, _, err = run_cli(["algo=impala", "env=cartpole", f"collector={collector}", *backend, override,
                            "logger=none", "progress=false"], tmp_path, capsys)
    assert code == 2, err
    assert err.startswith(f"rlrun: error: {key}: ") and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 2 and "  fix: " in err, err  # the message and its fix
    assert not list(tmp_path.rglob("checkpoint.pt"))


def test_every_numeric_option_of_every_collector_declares_its_range():
    from rlrun.core import registry
    from rlrun.core.registry import Range

    supplied = {"total_frames", "seed"}  # top-level keys, ranged in rlrun/core/config_schema.py
    missing = []
    for entry in registry.entries("collector"):
        hints = typing.get_type_hints(entry.factory, include_extras=True)
        for name, hint in hints.items():
            base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
            if base in (int, float) and name not in supplied:
                if not any(isinstance(m, Range) for m in typing.get_args(hint)[1:]):
                    missing.append(f"{entry.name}.{name}")
    assert not missing, f"numeric collector options without a Range: {missing}"


def test_the_worker_bound_follows_this_machine_and_a_cluster_is_not_bounded_by_it(monkeypatch):
    from rlrun.core import limits
    from rlrun.core.config_schema import check_component

    monkeypatch.setattr(limits, "available_memory", lambda: int(4e9))
    monkeypatch.setattr(limits, "open_files_limit", lambda: 1024)
    monkeypatch.setattr(limits, "open_files", lambda: 24)
    # local: (4 GB - 0.24 GB) / 190 MB = 19 workers by memory; (1024 - 24 - 64) / 8 = 117 by files
    assert limits.max_workers("local") == 19
    check_component("collector", {"name": "multi_async", "workers": 19}, "collector")
    with pytest.raises(ConfigError, match=r"20 workers do not fit this machine: they need about 4\.0 GB "
                       r"of memory .* this machine has 4\.0 GB available") as err:
        check_component("collector", {"name": "multi_async", "workers": 20}, "collector")
    assert err.value.key == "collector.workers" and "at most 19" in err.value.fix
    # a local Ray: (4 GB - 0.56 GB) / 330 MB = 10 actors
    with pytest.raises(ConfigError, match="11 workers do not fit"):
        check_component("collector", {"name": "multi_sync", "workers": 11, "backend": "ray"}, "collector")
    monkeypatch.setattr(limits, "open_files_limit", lambda: 256)  # (256 - 24 - 64) / 8 = 21 by files
    monkeypatch.setattr(limits, "available_memory", lambda: int(400e9))
    with pytest.raises(ConfigError, match=r"would hold 176 open files, over the limit of 256 \(ulimit -n\)"):
        check_component("collector", {"name": "multi_sync", "workers": 22}, "collector")
    # on a cluster the workers run elsewhere: only the cluster bounds them
    check_component("collector", {"name": "multi_async", "workers": 1000, "backend": "ray",
                                  "ray_address": "auto"}, "collector")


@linux_only
def test_a_worker_uses_at_least_the_memory_the_worker_bound_assumes():
    """The bound's per-worker figure is a lower bound: a CartPole worker (as measured) holds it."""
    from rlrun.core.limits import COSTS

    with MultiCollector(functools.partial(GymVecEnv, "CartPole-v1", 8), BiasPolicy(), 512, 10**9,
                        workers=1, method="forward") as coll:
        it = iter(coll)
        for _ in range(5):
            next(it)
        with open(f"/proc/{coll.worker_pids[0]}/status") as f:
            rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    assert 0.8 * COSTS["local"].memory <= rss <= 2 * COSTS["local"].memory, rss
