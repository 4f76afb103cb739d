"""Device check: every family trains briefly on ``--device`` and on CPU; tensors must be where they belong.

    python -m rlrun.benchmarks device --device cuda          # on a GPU machine, < 10 min
    python -m rlrun.benchmarks device --device cpu --quick   # CI: the script itself cannot rot

Each family (PPO, PPO-KL, SAC, TD3, DQN, IMPALA with ``collector=sync``, IQL, CQL, DT, oDT, MAPPO, QMIX,
MADDPG) runs in this process through ``rlrun.cli.main.main`` twice, once with ``device=<device>`` and once
with ``device=cpu``, same seed. Training code is not changed: ``rlrun.lifecycle.build.build_parts`` is wrapped
for the duration of a run so that the built run gets one more hook, ``DeviceProbe``, which checks

* every optimisation batch the loss sees (``post_loss``'s sub-batch) and every tensor the loss
  returns: on the run's device;
* every collected batch (``pre_steps_log``): on the run's device (the collector puts batches there;
  the env side stays on CPU inside the collector);
* the replay/trajectory storage after the run: on the storage's device, which is the run's device
  except for the ``memmap`` backend (CPU files by design);
* ``checkpoint.pt``, loaded with the devices it was saved with: the loss's weights and the
  optimiser's moments on the run's device (the optimiser's 0-dim ``step`` counters are CPU
  tensors in torch unless ``capturable``/``fused``, and LAMB's likewise: allowed). The
  checkpoint's buffer rows are CPU by design (``TensorStorage.state_dict``): not checked there.

Returns: ``--device cpu`` against CPU must be identical (first and last losses, final return;
asserted exactly). On another device the final return and the last losses must be finite and
|Δreturn| within ``RETURN_TOL`` (a fraction of the CPU return's magnitude plus an absolute
slack). Nothing tighter is sound: every random stream that matters is drawn on the device
(actions, dropout, CQL's sampled actions, and the dataset samplers' generators, which live on
the storage's device), and CUDA's streams differ from CPU's, so even the first batch differs;
this catches breakage (NaNs, a run that stops learning altogether), not rounding.

``--compile`` runs each family a third time, on ``--device`` with ``compile=true``
(``rlrun.trainer.compiled``), under the same probe and checked against the eager CPU run with
the cross-device tolerance (compiled kernels round differently, even on CPU); a fallback to
eager (the one stderr line ``compile=true: ...``) is a violation.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from rlrun.trainer.hooks import Hook

RETURN_TOL = (0.5, 50.0)  # |Δreturn| <= 0.5 * |cpu return| + 50
OFFLINE = "rlrun-device-check/pendulum/random-v0"
COMMON = ["logger=none", "progress=false", "threads=1", "seed=0", "checkpoint.buffer=true"]
OFFLINE_COMMON = ["env=pendulum", f"dataset={OFFLINE}", "eval.interval_updates=0", "eval.episodes=2",
                  "env.max_episode_steps=50"]
MARL_COMMON = ["env=vmas/navigation", "env.num_envs=4", "eval.interval_frames=0", "eval.episodes=1",
               "env.max_steps=25"]
# the presets' 1M-row replay is preallocated and (checkpoint.buffer=true) saved: keep it small
SMALL_REPLAY = ["buffer.capacity=5000"]
MARL_REPLAY = ["buffer.capacity=5000", "buffer.batch_size=256"]


def _pendulum_actor_critic(algo: str) -> tuple[list[str], list[str]]:
    """SAC's and TD3's runs (full, quick): the same Pendulum budgets for both."""
    full = [f"algo={algo}", "env=pendulum", "total_frames=600", "collector.init_random_frames=300",
            "collector.frames_per_batch=100", "eval.interval_frames=0", "eval.episodes=2", *SMALL_REPLAY]
    quick = [f"algo={algo}", "env=pendulum", "total_frames=150", "collector.init_random_frames=100",
             "collector.frames_per_batch=50", "buffer.batch_size=64", "eval.interval_frames=0",
             "eval.episodes=1", "env.max_episode_steps=50", *SMALL_REPLAY]
    return full, quick


# DT's 3-layer transformer over 64 x 20-step slices costs ~0.3 s an update on one CPU thread
DT_FULL = ["buffer.batch_size=32", "buffer.slice_len=10"]
# name -> (full overrides, --quick overrides); full runs are a few hundred updates at most
FAMILIES: dict[str, tuple[list[str], list[str]]] = {
    "ppo": (["algo=ppo", "env=cartpole", "total_frames=4096", "eval.interval_frames=0"],
            ["algo=ppo", "env=cartpole", "total_frames=512", "collector.frames_per_batch=256",
             "buffer.batch_size=128", "trainer.epochs_per_batch=2", "eval.interval_frames=0",
             "eval.episodes=1"]),
    "ppo_kl": (["algo=ppo_kl", "env=cartpole", "total_frames=4096", "eval.interval_frames=0"],
               ["algo=ppo_kl", "env=cartpole", "total_frames=512", "collector.frames_per_batch=256",
                "buffer.batch_size=128", "trainer.epochs_per_batch=2", "eval.interval_frames=0",
                "eval.episodes=1"]),
    "sac": _pendulum_actor_critic("sac"),
    "td3": _pendulum_actor_critic("td3"),
    "dqn": (["algo=dqn", "env=cartpole", "total_frames=1500", "collector.init_random_frames=1000",
             "eval.interval_frames=0", *SMALL_REPLAY],
            ["algo=dqn", "env=cartpole", "total_frames=400", "collector.init_random_frames=300",
             "eval.interval_frames=0", "eval.episodes=1", *SMALL_REPLAY]),
    "impala": (["algo=impala", "env=cartpole", "collector=sync", "total_frames=4096",
                "eval.interval_frames=0"],
               ["algo=impala", "env=cartpole", "collector=sync", "total_frames=1024",
                "eval.interval_frames=0", "eval.episodes=1"]),
    "iql": (["algo=iql", *OFFLINE_COMMON, "total_updates=300"],
            ["algo=iql", *OFFLINE_COMMON, "total_updates=30", "eval.episodes=1", "buffer.batch_size=64"]),
    "cql": (["algo=cql", *OFFLINE_COMMON, "total_updates=200", "buffer.batch_size=128"],
            ["algo=cql", *OFFLINE_COMMON, "total_updates=30", "eval.episodes=1", "buffer.batch_size=64"]),
    "dt": (["algo=dt", *OFFLINE_COMMON, "total_updates=200", "model.max_timestep=60", *DT_FULL],
           ["algo=dt", *OFFLINE_COMMON, "total_updates=30", "eval.episodes=1", "model.hidden=16",
            "model.max_timestep=60", "buffer.slice_len=4", "buffer.batch_size=8"]),
    "odt": (["algo=odt", *OFFLINE_COMMON, "total_updates=300", "online.offline_updates=100",
             "online.updates_per_round=100", "optim.warmup_steps=20", "model.max_timestep=60",
             "model.target_return=-100", *DT_FULL],
            ["algo=odt", *OFFLINE_COMMON, "total_updates=40", "online.offline_updates=20",
             "online.updates_per_round=20", "optim.warmup_steps=10", "model.hidden=16",
             "model.max_timestep=60", "buffer.slice_len=4", "buffer.batch_size=8",
             "model.target_return=-100", "eval.episodes=1"]),
    "mappo": (["algo=mappo", *MARL_COMMON, "buffer.batch_size=200", "trainer.epochs_per_batch=4",
               "total_frames=1600", "collector.frames_per_batch=400"],
              ["algo=mappo", *MARL_COMMON, "buffer.batch_size=100", "trainer.epochs_per_batch=2",
               "total_frames=200", "collector.frames_per_batch=200"]),
    "qmix": (["algo=qmix", *MARL_COMMON, *MARL_REPLAY, "total_frames=1600", "collector.frames_per_batch=400"],
             ["algo=qmix", *MARL_COMMON, *MARL_REPLAY, "total_frames=400", "collector.frames_per_batch=200",
              "trainer.epochs_per_batch=10"]),
    "maddpg": (["algo=maddpg", *MARL_COMMON, *MARL_REPLAY, "total_frames=1600",
                "collector.frames_per_batch=400"],
               ["algo=maddpg", *MARL_COMMON, *MARL_REPLAY, "total_frames=400",
                "collector.frames_per_batch=200", "trainer.epochs_per_batch=10"]),
}
OFFLINE_FAMILIES = ("iql", "cql", "dt", "odt")


def tensors(obj: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in ``obj`` (tensors, TensorDicts, dicts, lists, tuples), with a dotted path."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, TensorDictBase):
        for key, value in obj.items(include_nested=True, leaves_only=True):
            yield f"{path}.{'.'.join(key) if isinstance(key, tuple) else key}", value
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from tensors(value, f"{path}.{key}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from tensors(value, f"{path}.{i}")


def misplaced(obj: Any, device: torch.device, where: str,
              allow: Any = lambda path, t: False) -> list[str]:
    """``where.path: on X, expected Y`` for each tensor of ``obj`` not on ``device`` (and not allowed)."""
    device = torch.device(device)
    return [f"{where}{path}: on {t.device}, expected {device}" for path, t in tensors(obj)
            if not _same(t.device, device) and not allow(path, t)]


def _same(a: torch.device, b: torch.device) -> bool:
    # torch.device("cuda") has no index; tensors on it report cuda:0
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


class DeviceProbe(Hook):
    """Records where the loop's tensors are (added to a run by the check, never by a config)."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.violations: list[str] = []
        self.first_losses: dict[str, float] | None = None
        self.last_losses: dict[str, float] = {}
        self.updates = self.batches = 0

    def _add(self, found: list[str]) -> None:
        if found and len(self.violations) < 50:  # a wrong device repeats every step: keep the first
            self.violations += [v for v in found if v not in self.violations]

    def pre_steps_log(self, trainer, batch) -> None:
        self.batches += 1
        self._add(misplaced(batch, self.device, "collected batch"))

    def post_loss(self, trainer, sub, losses: dict) -> None:
        self.updates += 1
        self._add(misplaced(sub, self.device, "loss input"))
        self._add(misplaced(losses, self.device, "loss output"))
        if self.first_losses is None:
            self.first_losses = _scalars(losses)
        self.last_losses = losses  # converted once at the end: no host sync per step

    def post_steps_log(self, trainer, batch) -> None:
        if trainer.done or trainer.stop_reason:
            self._add(storage_misplaced(trainer.buffer, self.device))


def _scalars(losses: dict) -> dict[str, float]:
    return {k: float(v.detach().double().cpu()) for k, v in losses.items()
            if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_meta}  # meta: no values


def storage_misplaced(buffer: Any, device: torch.device) -> list[str]:
    """Tensors of a buffer's storage not on the storage's device, or storage off the run's device
    where it should be on it (ram storage; ``memmap`` storage is CPU files by design)."""
    storage = getattr(buffer, "_storage", None)
    if storage is None:
        return []
    expected = storage.device if getattr(storage, "backend", "ram") == "memmap" else device
    return misplaced(getattr(storage, "_data", None), expected, "buffer storage")


def checkpoint_misplaced(path: Path, device: torch.device) -> list[str]:
    """The checkpoint's loss weights and optimiser moments not on ``device`` (0-dim ``step``: CPU ok)."""
    state = torch.load(path, weights_only=True)  # no map_location: the devices as saved
    if not any(True for _ in tensors(state.get("loss"))):
        return [f"checkpoint {path.name} holds no loss weights to check"]

    def step(p: str, t: torch.Tensor) -> bool:
        return p.endswith(".step") and t.ndim == 0 and t.device.type == "cpu"
    return (misplaced(state.get("loss"), device, "checkpoint loss")
            + misplaced(state.get("optimizer"), device, "checkpoint optimizer", step))


@dataclass
class Outcome:
    """One run of one family on one device."""

    device: str
    rc: int = 0
    error: str = ""
    updates: int = 0
    eval_return: float = float("nan")
    first_losses: dict = field(default_factory=dict)
    last_losses: dict = field(default_factory=dict)
    violations: list = field(default_factory=list)
    wall_s: float = 0.0


def run_family(name: str, device: str, quick: bool, work: Path, compile: bool = False) -> Outcome:
    """Trains ``name`` on ``device`` in this process with a ``DeviceProbe``; returns what it saw
    (``compile``: with ``compile=true``; a fallback to eager is a violation)."""
    import rlrun.lifecycle.build as build_module
    from rlrun.cli.main import main

    overrides = FAMILIES[name][1 if quick else 0] + (["compile=true"] if compile else [])
    run_dir = work / f"{name}-{device.replace(':', '_')}{'-compiled' if compile else ''}"
    probe = DeviceProbe(torch.device(device))
    original = build_module.build_parts

    def build_with_probe(*args, **kwargs):
        built = original(*args, **kwargs)
        built.hooks["device_probe"] = probe
        return built

    out = Outcome(device)
    start = time.perf_counter()
    build_module.build_parts = build_with_probe
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            out.rc = main([*overrides, *COMMON, f"device={device}", f"hydra.run.dir={run_dir}"])
    except SystemExit as exc:
        out.rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        build_module.build_parts = original
    out.wall_s = time.perf_counter() - start
    if out.rc != 0:
        out.error = (stderr.getvalue().strip().splitlines() or ["(no message)"])[-1]
        return out
    summary = json.loads((run_dir / "summary.json").read_text())
    ret = summary.get("eval/episode_return")
    out.eval_return = float("nan") if ret is None else float(ret)
    out.updates, out.first_losses = probe.updates, probe.first_losses or {}
    out.last_losses = _scalars(probe.last_losses)
    out.violations = probe.violations + checkpoint_misplaced(run_dir / "checkpoint.pt", probe.device)
    out.violations += [line for line in stderr.getvalue().splitlines() if "compile=true:" in line]
    if probe.updates == 0 or not out.first_losses:  # nothing seen, nothing checked: not a pass
        out.violations.append("the probe saw no update (the run is too short to check anything)")
    return out


def make_offline_dataset(root: Path) -> None:
    """A small random-action Pendulum dataset (12 episodes of 50 steps) under ``root``, seed 0."""
    import gymnasium as gym
    import numpy as np

    from rlrun.datasets.minari_format import Episode, write_dataset

    env = gym.make("Pendulum-v1", max_episode_steps=50)
    env.action_space.seed(0)
    episodes = []
    for i in range(12):
        obs, _ = env.reset(seed=i)
        o, a, r, te, tr = [obs], [], [], [], []
        done = False
        while not done:
            act = env.action_space.sample()
            obs, rew, term, trunc, _ = env.step(act)
            o.append(obs), a.append(act), r.append(rew), te.append(term), tr.append(trunc)
            done = term or trunc
        episodes.append(Episode(np.array(o), np.array(a), np.array(r), np.array(te), np.array(tr)))
    write_dataset(OFFLINE, episodes, env.observation_space, env.action_space, env_spec=env.spec,
                  root=root, algorithm_name="random", overwrite=True)
    env.close()


def compare(name: str, dev: Outcome, cpu: Outcome, exact: bool) -> list[str]:
    """Why ``dev`` does not match ``cpu`` (empty when it does), per the module's tolerances."""
    problems = []
    if exact:
        same_return = dev.eval_return == cpu.eval_return or (
            math.isnan(dev.eval_return) and math.isnan(cpu.eval_return))
        if (dev.first_losses, dev.last_losses) != (cpu.first_losses, cpu.last_losses) or not same_return:
            problems.append("cpu vs cpu runs differ (they must be identical)")
        return problems
    if not math.isfinite(dev.eval_return):
        problems.append(f"return {dev.eval_return} is not finite")
    elif abs(dev.eval_return - cpu.eval_return) > RETURN_TOL[0] * abs(cpu.eval_return) + RETURN_TOL[1]:
        problems.append(f"|Δreturn| {abs(dev.eval_return - cpu.eval_return):.1f} over tolerance")
    bad = [k for k, v in dev.last_losses.items() if not math.isfinite(v)]
    if bad:
        problems.append(f"non-finite final losses: {', '.join(bad)}")
    return problems


def check(device: str, quick: bool, families: list[str], work: Path,
          compile: bool = False) -> tuple[list[dict], int]:
    """Runs the families on ``device`` and on CPU (``compile``: and compiled on ``device``);
    returns one row per family (and compiled variant) and the exit status."""
    os.environ["MINARI_DATASETS_PATH"] = str(work / "datasets")
    if any(f in OFFLINE_FAMILIES for f in families):
        make_offline_dataset(work / "datasets")
    rows, status = [], 0
    exact = torch.device(device).type == "cpu"
    for name in families:
        dev = run_family(name, device, quick, work)
        cpu = run_family(name, "cpu", quick, work / "reference")
        problems = [f"{o.device} run failed (rc {o.rc}): {o.error}" for o in (dev, cpu) if o.rc]
        if not problems:
            problems = dev.violations + cpu.violations + compare(name, dev, cpu, exact)
        status = status or (1 if problems else 0)
        delta = abs(dev.eval_return - cpu.eval_return)
        rows.append({"family": name, "device": device, "updates": dev.updates, "return": dev.eval_return,
                     "cpu_return": cpu.eval_return, "max_abs_d_return": delta, "problems": problems,
                     "wall_s": round(dev.wall_s + cpu.wall_s, 1)})
        verdict = "OK" if not problems else f"{len(problems)} violation(s)"
        print(f"{name:7s} device={device} updates={dev.updates} max|Δreturn|={delta:.3g} placement/match: "
              f"{verdict} ({dev.wall_s + cpu.wall_s:.1f} s)", flush=True)
        for p in problems[:10]:
            print(f"    {p}", flush=True)
        if compile and cpu.rc == 0:
            row = _compiled_row(name, device, quick, work, cpu)
            status = status or (1 if row["problems"] else 0)
            rows.append(row)
    return rows, status


def _compiled_row(name: str, device: str, quick: bool, work: Path, cpu: Outcome) -> dict:
    """The family on ``device`` with ``compile=true`` against the eager CPU run: placement, no
    fallback to eager, and returns within the cross-device tolerance (compiled kernels round
    differently, so never exact)."""
    import torch._dynamo

    torch._dynamo.reset()  # the families before it filled dynamo's caches (Adam.step's among them)
    out = run_family(name, device, quick, work / "compiled", compile=True)
    problems = ([f"compiled {device} run failed (rc {out.rc}): {out.error}"] if out.rc
                else out.violations + compare(name, out, cpu, exact=False))
    delta = abs(out.eval_return - cpu.eval_return)
    verdict = "OK" if not problems else f"{len(problems)} violation(s)"
    print(f"{name:7s} device={device} compile=true updates={out.updates} max|Δreturn|={delta:.3g} "
          f"placement/match: {verdict} ({out.wall_s:.1f} s)", flush=True)
    for p in problems[:10]:
        print(f"    {p}", flush=True)
    return {"family": name, "device": device, "compile": True, "updates": out.updates,
            "return": out.eval_return, "cpu_return": cpu.eval_return, "max_abs_d_return": delta,
            "problems": problems, "wall_s": round(out.wall_s, 1)}


def main(argv: list[str] | None = None) -> int:
    """``python -m rlrun.benchmarks device [--device D] [--quick] [--families a,b] [--compile]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m rlrun.benchmarks device", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="the device to check against CPU (default: cuda)")
    p.add_argument("--quick", action="store_true", help="a few dozen updates per family (CI)")
    p.add_argument("--families", default="", help=f"comma-separated subset of {','.join(FAMILIES)}")
    p.add_argument("--compile", action="store_true",
                   help="also run every family with compile=true on --device (against the eager CPU run)")
    p.add_argument("--work", type=Path, default=None, help="where runs go (default: a temporary directory)")
    p.add_argument("--ranks", type=int, default=0,
                   help="only the data-parallel case: PPO on this many torchrun ranks "
                   "(gloo on cpu, NCCL on cuda)")
    args = p.parse_args(argv)
    if args.ranks > 1:  # issue 39's case (rlrun.benchmarks.ddp.ranks_check)
        from rlrun.benchmarks.ddp import ranks_check

        with tempfile.TemporaryDirectory() as tmp:
            problems = ranks_check(args.device, str(args.work or tmp), args.ranks)
        print(f"device check: {args.ranks} ranks on {args.device}: " + ("; ".join(problems) or "OK"),
              flush=True)
        return 1 if problems else 0
    families = [f for f in args.families.split(",") if f] or list(FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        p.error(f"unknown families {','.join(unknown)}; choose from {','.join(FAMILIES)}")
    try:
        from rlrun.core.errors import RlrunError
        from rlrun.lifecycle.build import resolve_device

        resolve_device(args.device)
    except RlrunError as err:
        print(f"rlrun.benchmarks device: error: {err.render()}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        rows, status = check(args.device, args.quick, families, work, args.compile)
    bad = sum(bool(r["problems"]) for r in rows)
    unit = "runs" if args.compile else "families"
    print(f"device check: {len(rows) - bad}/{len(rows)} {unit} OK on {args.device} "
          f"({time.perf_counter() - start:.0f} s)", flush=True)
    return status
