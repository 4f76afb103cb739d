"""``compile=true`` against eager on a device: the update alone, the whole training loop, one paper cell.

    python -m rlrun.benchmarks compiled --device cuda                 # on a GPU machine, ~6 min
    python -m rlrun.benchmarks compiled --device cpu --quick          # CI: the script cannot rot

Three parts, each writing its rows to the JSON file as soon as it has them (``--json``):

* ``updates``: for SAC, TD3, PPO (HalfCheetah's Table 1 cells), PPO on Pong (the Atari CNN) and DQN
  (CartPole), the run's own loss and optimiser are built on the device from the preset (as
  ``rlrun`` builds them) and its first optimisation batch is taken from a real collection. Two
  copies from the same weights then make 100 updates each, one eager and one as ``compile=true``
  wires it (``rlrun.trainer.compiled``: CUDA graphs, ``mode="reduce-overhead"``, on CUDA). The
  compiled copy's weights must match eager's within the compiled tests' tolerance (rtol 1e-4,
  atol 1e-5; ``tests/trainer/test_compiled.py``), and its losses must have compiled (no fallback
  to eager). Both copies draw their random numbers from torch's generator (inductor's
  ``fallback_random``), so SAC's and TD3's sampled actions are the same on both sides; this costs
  the compiled side its fused random kernels, so its timings are a lower bound. Then ms per
  update of each, interleaved repetitions (medians), the compile time (the first two compiled
  calls), and the updates it takes to repay it.
* ``loop``: the four workloads LeanRL publishes compiled-over-eager ratios for (PPO Atari, PPO
  continuous, SAC, TD3), each trained eager and with ``compile=true`` for a fixed number of frames
  in this process; frames/s over the second half of the run (after compilation and warm-up) and
  the wall time of the whole run (compilation included).
* ``e2e``: ``rlrun +paper=table1/sac_halfcheetah device=<device>`` for a fixed wall-clock budget
  (``--e2e-seconds``): frames/s and the device memory's high-water mark.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlrun.trainer.hooks import Hook

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}  # tests/trainer/test_compiled.py's, CPU against CPU
QUIET = ["logger=none", "progress=false", "seed=0", "eval.interval_frames=0"]
OFF_POLICY_SMALL = ["collector.frames_per_batch=1000", "collector.init_random_frames=1000",
                    "buffer.capacity=100000"]
# name -> overrides of the run whose loss, optimiser and first batch the update part times
UPDATE_CASES: dict[str, list[str]] = {
    "sac": ["+paper=table1/sac_halfcheetah", *OFF_POLICY_SMALL],
    "td3": ["+paper=table1/td3_halfcheetah", *OFF_POLICY_SMALL],
    "ppo": ["+paper=table1/ppo_halfcheetah"],
    # the loop part's batches (LOOP_CASES): inductor's caches then serve its compile
    "ppo_atari": ["+paper=table1/ppo_pong", "collector.frames_per_batch=2048", "buffer.batch_size=512"],
    "dqn": ["algo=dqn", "env=cartpole", "collector.init_random_frames=1000", "buffer.capacity=10000"],
}
# smaller networks and batches for --quick (CPU, CI): the same code paths at a fraction of the cost
QUICK_UPDATE = {"sac": ["model.hidden=[32]", "model.critic_hidden=[32]", "buffer.batch_size=32"],
                "td3": ["model.hidden=[32]", "model.critic_hidden=[32]", "buffer.batch_size=32"],
                "ppo": ["collector.frames_per_batch=256", "model.hidden=[16]"],
                "ppo_atari": ["collector.frames_per_batch=256", "buffer.batch_size=64"],
                "dqn": ["model.hidden=[16]"]}
# LeanRL's published compile + CUDA graphs over CleanRL's eager (H100), github.com/pytorch-labs/LeanRL
LEANRL = {"ppo_atari": 6.8, "ppo": 2.7, "sac": 5.7, "td3": 3.4}
# (frames, quick frames) of each loop workload; off-policy ones start learning after 1000 frames
LOOP_CASES: dict[str, tuple[list[str], int, int]] = {
    "ppo_atari": (["+paper=table1/ppo_pong", "collector.frames_per_batch=2048", "buffer.batch_size=512"],
                  4 * 2048, 2 * 256),
    "ppo": (["+paper=table1/ppo_halfcheetah"], 4 * 2048, 2 * 256),
    "sac": (["+paper=table1/sac_halfcheetah", *OFF_POLICY_SMALL], 4000, 1200),
    "td3": (["+paper=table1/td3_halfcheetah", *OFF_POLICY_SMALL], 4000, 1200),
}
QUICK_LOOP = {"ppo_atari": ["collector.frames_per_batch=256", "buffer.batch_size=64"],
              "ppo": ["collector.frames_per_batch=256", "model.hidden=[16]"],
              "sac": ["collector.frames_per_batch=100", "model.hidden=[32]", "model.critic_hidden=[32]",
                      "buffer.batch_size=32"],
              "td3": ["collector.frames_per_batch=100", "model.hidden=[32]", "model.critic_hidden=[32]",
                      "buffer.batch_size=32"]}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_batch(overrides: list[str], device: torch.device, run_dir: Path) -> tuple[Any, Any, Any]:
    """The built run, its config and its first optimisation batch (as the loop forms it)."""
    from rlrun.lifecycle.build import build_parts
    from rlrun.lifecycle.explain import compose_config
    from rlrun.trainer.loop import Trainer

    cfg = compose_config([*overrides, *QUIET, "eval.episodes=1", f"device={device}"])
    torch.manual_seed(0)
    run = build_parts(cfg, run_dir, device)
    trainer = Trainer(run.collector, run.loss, run.optimizer, run.hooks, run.epochs_per_batch,
                      run.optim_steps_per_epoch, run.learning_starts, run.buffer, None, policy=run.policy,
                      provided=run.provided, budget=run.budget)
    for batch in run.collector:
        batch = trainer.chain("process_batch", batch)
        if trainer.frames >= trainer.learning_starts:
            break
    trainer.call_hooks("pre_epoch", batch)
    sub = trainer.chain("process_optim_batch", batch).clone()
    return run, cfg, sub


def _updater(loss: Any, optimizer: Any, sub: Any, compiled: Any | None) -> Callable[[int], None]:
    def updates(n: int) -> None:
        for _ in range(n):
            losses = loss(sub) if compiled is None else compiled.loss(sub)
            (optimizer if compiled is None else compiled).step(losses)
            if loss.has_targets:
                loss.update_targets()
    return updates


def max_deviation(a: torch.nn.Module, b: torch.nn.Module) -> tuple[float, list[str]]:
    """The largest |a - b| over float state and the keys outside ``TOLERANCE`` (integer and other
    state must be equal)."""
    worst, off = 0.0, []
    for (key, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            worst = max(worst, float((x.double() - y.double()).abs().max().cpu()) if x.numel() else 0.0)
            if not torch.allclose(y, x, **TOLERANCE):
                off.append(key)
        elif isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                off.append(key)
        elif x != y:
            off.append(key)
    return worst, off


def update_row(name: str, device: torch.device, quick: bool, work: Path, reps: int) -> dict:
    """Eager against compiled updates of ``name`` on ``device`` (the module's ``updates`` part)."""
    import torch._inductor.config as inductor
    from torch._dynamo.utils import counters

    from rlrun.core.registry import build
    from rlrun.trainer.compiled import CompiledUpdate

    overrides = UPDATE_CASES[name] + (QUICK_UPDATE[name] if quick else [])
    run, cfg, sub = first_batch(overrides, device, work / f"update-{name}")
    row: dict[str, Any] = {"workload": name, "device": str(device), "batch": sub.batch_size[0],
                           "problems": []}
    try:
        eager, compiled = run.loss, copy.deepcopy(run.loss)
        initial = [p.detach().clone() for p in eager.parameters()]
        optimizer = build("optim", cfg.optim, param_groups=compiled.param_groups())
        fallbacks: list[str] = []
        update = CompiledUpdate(compiled, optimizer, warn=fallbacks.append)
        row["mode"] = update.mode
        eager_steps, compiled_steps = (_updater(eager, run.optimizer, sub, None),
                                       _updater(compiled, optimizer, sub, update))
        n = 10 if quick else 100
        graphs = counters["stats"]["unique_graphs"]
        with inductor.patch(fallback_random=True):  # torch's random streams on both sides
            torch.manual_seed(1)
            start = time.perf_counter()
            compiled_steps(2)  # compiles: the loss, its backward, the optimiser step (twice: its state)
            sync(device)
            row["compile_s"] = time.perf_counter() - start
            compiled_steps(n - 2)
            torch.manual_seed(1)
            eager_steps(n)
            sync(device)
            # a loss that recompiles on every call ends at dynamo's recompile limit and then runs
            # eager without a word (TD3's call counter did): a few graphs per workload, not n
            row["graphs"] = counters["stats"]["unique_graphs"] - graphs
            if row["graphs"] > 12:
                row["problems"].append(f"{row['graphs']} graphs compiled in {n} updates: it recompiles")
            worst, off = max_deviation(eager, compiled)
            row.update(max_abs_diff=worst, weights_match=not off)
            if off:
                row["problems"].append(f"after {n} updates {len(off)} tensors differ beyond "
                                       f"rtol {TOLERANCE['rtol']}, atol {TOLERANCE['atol']}: "
                                       f"{', '.join(off[:4])}")
            if all(torch.equal(p, q) for p, q in zip(eager.parameters(), initial)):
                row["problems"].append("eager weights did not move: nothing was trained")
            per_rep = 5 if quick else 100
            times: dict[str, list[float]] = {"eager": [], "compiled": []}
            for rep in range(reps):  # interleaved, alternating order; a sync closes each repetition
                for side in (("eager", "compiled") if rep % 2 == 0 else ("compiled", "eager")):
                    fn = eager_steps if side == "eager" else compiled_steps
                    sync(device)
                    t0 = time.perf_counter()
                    fn(per_rep)
                    sync(device)
                    times[side].append(time.perf_counter() - t0)
        row["problems"] += fallbacks  # a part that fell back to eager was not compiled: a failure here
        ms = {k: 1e3 * sorted(v)[len(v) // 2] / per_rep for k, v in times.items()}
        gain = ms["eager"] - ms["compiled"]
        row.update(eager_ms=ms["eager"], compiled_ms=ms["compiled"], speedup=ms["eager"] / ms["compiled"],
                   break_even_updates=math.ceil(1e3 * row["compile_s"] / gain) if gain > 0 else None,
                   times_s=times)
    finally:
        run.close()
        torch.compiler.reset()
    return row


class ThroughputProbe(Hook):
    """(seconds, frames) at the end of every collected batch's updates (added by this benchmark)."""

    def __init__(self, device: torch.device):
        self.device, self.marks = device, []

    def post_steps(self, trainer) -> None:
        sync(self.device)
        self.marks.append((time.perf_counter(), trainer.frames))


def steady_fps(marks: list[tuple[float, int]]) -> float | None:
    """Frames/s over the second half of the run's batches (compilation and warm-up are in the first)."""
    if len(marks) < 3:
        return None
    (t0, f0), (t1, f1) = marks[len(marks) // 2 - 1], marks[-1]
    return (f1 - f0) / (t1 - t0) if t1 > t0 else None


def train_in_process(overrides: list[str], device: torch.device, run_dir: Path,
                     probe: Hook | None = None) -> tuple[int, str, float, dict]:
    """``rlrun <overrides>`` in this process (``probe``: one more hook); (rc, last stderr line,
    wall seconds, summary)."""
    import rlrun.lifecycle.build as build_module
    from rlrun.cli.main import main

    original = build_module.build_parts

    def build_with_probe(*args: Any, **kwargs: Any) -> Any:
        built = original(*args, **kwargs)
        if probe is not None:
            built.hooks["throughput_probe"] = probe
        return built

    stderr = io.StringIO()
    build_module.build_parts = build_with_probe
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            rc = main([*overrides, *QUIET, "eval.episodes=1", f"device={device}", f"hydra.run.dir={run_dir}"])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        build_module.build_parts = original
    wall = time.perf_counter() - start
    lines = stderr.getvalue().strip().splitlines()
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    fell_back = [ln for ln in lines if "compile=true:" in ln]
    return rc, (fell_back or lines or [""])[-1], wall, summary


def loop_row(name: str, device: torch.device, quick: bool, work: Path) -> dict:
    """One LeanRL workload trained eager, then compiled, for the same frames (the ``loop`` part)."""
    overrides, frames, quick_frames = LOOP_CASES[name]
    overrides = [*overrides, f"total_frames={quick_frames if quick else frames}",
                 *(QUICK_LOOP[name] if quick else [])]
    row: dict[str, Any] = {"workload": name, "device": str(device), "leanrl": LEANRL[name], "problems": []}
    for side in ("eager", "compiled"):
        probe = ThroughputProbe(device)
        rc, line, wall, summary = train_in_process(
            [*overrides, f"compile={side == 'compiled'}"], device, work / f"loop-{name}-{side}", probe)
        torch.compiler.reset()
        if rc != 0 or "compile=true:" in line:
            row["problems"].append(f"{side} run: rc {rc}: {line}")
        row[f"{side}_wall_s"], row[f"{side}_fps"] = wall, steady_fps(probe.marks)
        row[f"{side}_frames"] = summary.get("frames")
        row[f"{side}_return"] = summary.get("eval/episode_return")
    if row.get("eager_fps") and row.get("compiled_fps"):
        row["fps_ratio"] = row["compiled_fps"] / row["eager_fps"]
        row["wall_ratio"] = row["eager_wall_s"] / row["compiled_wall_s"]
    return row


def e2e_row(device: torch.device, seconds: float, work: Path, compile: bool = False) -> dict:
    """``+paper=table1/sac_halfcheetah`` on ``device`` for ``seconds`` of training: frames/s, memory."""
    probe = ThroughputProbe(device)

    class Deadline(Hook):  # ends the run at the first batch boundary past the budget, as a target would
        def __init__(self) -> None:
            self.start = time.perf_counter()

        def post_steps(self, trainer) -> None:
            if time.perf_counter() - self.start > seconds:
                trainer.request_stop(f"the benchmark's {seconds:.0f} s budget", interrupted=False)

    class Both(Hook):
        def __init__(self) -> None:
            self.deadline = Deadline()

        def post_steps(self, trainer) -> None:
            probe.post_steps(trainer)
            self.deadline.post_steps(trainer)

    if device.type == "cuda":  # this run's own high-water mark, not the earlier parts' cache
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    rc, line, wall, summary = train_in_process(
        ["+paper=table1/sac_halfcheetah", f"compile={compile}"], device, work / "e2e", Both())
    row: dict[str, Any] = {"workload": "sac_halfcheetah (Table 1 preset)", "device": str(device), "rc": rc,
                           "wall_s": wall, "frames": summary.get("frames"),
                           "optim_steps": summary.get("optim_steps"), "problems": []}
    if rc != 0:
        row["problems"].append(f"rc {rc}: {line}")
    marks = probe.marks
    if len(marks) >= 2:
        learning = [m for m in marks if m[1] > 10000]  # after the preset's 10,000 random frames
        row["fps_all"] = (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])
        if len(learning) >= 2:
            row["fps_learning"] = (learning[-1][1] - learning[0][1]) / (learning[-1][0] - learning[0][0])
    if device.type == "cuda":
        row["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        row["max_memory_reserved_mib"] = torch.cuda.max_memory_reserved(device) / 2**20
    return row


def render(result: dict) -> str:
    """The results as Markdown tables."""
    from rlrun.benchmarks.common import table

    out = []
    if result.get("updates"):
        out.append("compile=true against eager, the update alone (compile time excluded from ms/update):\n\n"
                   + table(result["updates"], [
                       ("workload", "workload", "s"), ("batch", "batch", "d"), ("mode", "mode", "s"),
                       ("eager_ms", "eager ms/update", ".3f"), ("compiled_ms", "compiled ms/update", ".3f"),
                       ("speedup", "speedup", ".2f"), ("compile_s", "compile s", ".1f"),
                       ("graphs", "graphs", "d"),
                       ("break_even_updates", "break-even updates", "d"),
                       ("max_abs_diff", "max |Δw| after 100", ".2e"), ("weights_match", "within tol", "")]))
    if result.get("loop"):
        out.append("The whole training loop (collection included), compiled over eager, beside LeanRL's:\n\n"
                   + table(result["loop"], [
                       ("workload", "workload", "s"), ("eager_fps", "eager frames/s", ".0f"),
                       ("compiled_fps", "compiled frames/s", ".0f"), ("fps_ratio", "rlrun ratio", ".2f"),
                       ("leanrl", "LeanRL ratio (H100)", ".1f"), ("eager_wall_s", "eager wall s", ".1f"),
                       ("compiled_wall_s", "compiled wall s", ".1f"), ("wall_ratio", "wall ratio", ".2f")]))
    if result.get("e2e"):
        out.append("End to end:\n\n" + table(result["e2e"], [
            ("workload", "workload", "s"), ("wall_s", "wall s", ".1f"), ("frames", "frames", "d"),
            ("optim_steps", "updates", "d"), ("fps_all", "frames/s", ".0f"),
            ("fps_learning", "frames/s learning", ".0f"),
            ("max_memory_allocated_mib", "max allocated MiB", ".0f"),
            ("max_memory_reserved_mib", "max reserved MiB", ".0f")]))
    problems = [f"{r['workload']}: {p}" for part in ("updates", "loop", "e2e") for r in result.get(part, [])
                for p in r["problems"]]
    out.append("problems: " + ("none" if not problems else "\n- " + "\n- ".join(problems)))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m rlrun.benchmarks compiled [--device D] [--quick] [--parts ...] [--json PATH]``."""
    from rlrun.benchmarks.common import header

    p = argparse.ArgumentParser(prog="python -m rlrun.benchmarks compiled",
                                description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="small networks and a few updates (CI)")
    p.add_argument("--parts", default="updates,loop,e2e", help="comma-separated: updates, loop, e2e")
    p.add_argument("--cases", default="", help="comma-separated subset of the workloads (default: all)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per side (default 7, quick 3)")
    p.add_argument("--e2e-seconds", type=float, default=120.0)
    p.add_argument("--json", type=Path, default=Path("bench_results/compiled.json"))
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    if not set(parts) <= {"updates", "loop", "e2e"}:
        p.error(f"unknown parts in {args.parts!r}; choose from updates, loop, e2e")
    cases = [c for c in args.cases.split(",") if c]
    try:
        from rlrun.core.errors import RlrunError
        from rlrun.lifecycle.build import resolve_device

        device = resolve_device(args.device)
    except RlrunError as err:
        print(f"rlrun.benchmarks compiled: error: {err.render()}", file=sys.stderr)
        return 2
    reps = args.reps or (3 if args.quick else 7)
    result: dict[str, Any] = {"header": header(), "quick": args.quick, "updates": [], "loop": [], "e2e": []}
    if device.type == "cuda":
        result["header"]["gpu"] = torch.cuda.get_device_name(device)
    args.json.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        args.json.write_text(json.dumps(result, indent=1, default=str))

    def guarded(part: str, name: str, fn: Callable[[], dict]) -> None:
        try:
            row = fn()
        except Exception as exc:  # one workload's failure is a row with its reason, not the end
            import traceback

            row = {"workload": name, "device": str(device), "problems": [f"{type(exc).__name__}: {exc}"],
                   "traceback": traceback.format_exc()}
        result[part].append(row)
        save()
        shown = {k: v for k, v in row.items() if k not in ("times_s", "traceback")}
        print(f"  {part} {name}: " + json.dumps(shown, default=str), flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "updates" in parts:
            for name in cases or list(UPDATE_CASES):
                if name in UPDATE_CASES:
                    guarded("updates", name,
                            lambda name=name: update_row(name, device, args.quick, work, reps))
        if "loop" in parts:
            for name in cases or list(LOOP_CASES):
                if name in LOOP_CASES:
                    guarded("loop", name, lambda name=name: loop_row(name, device, args.quick, work))
        if "e2e" in parts:
            seconds = 5.0 if args.quick else args.e2e_seconds
            guarded("e2e", "sac_halfcheetah", lambda: e2e_row(device, seconds, work))
    print(render(result), flush=True)
    print(f"wrote {args.json}")
    return 1 if any(r["problems"] for part in ("updates", "loop", "e2e") for r in result[part]) else 0
