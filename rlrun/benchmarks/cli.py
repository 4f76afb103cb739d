"""CLI latency: whole-process wall time of everyday commands, before and after a change.

Cases, each ``python -m rlrun ...`` in a fresh process and a fresh empty directory:

* ``list``: ``rlrun list``.
* ``config_error``: ``rlrun algo=nope``, an error caught before Hydra composes.
* ``late_error``: ``rlrun env.id=Nope-v0 logger=none``, an error caught while building.
* ``run_mlflow``: a 1,024-frame PPO CartPole run with the default MLflow logger (a new store).
* ``run_none``: the same with ``logger=none``.

``after`` is the installed rlrun. With ``RLRUN_BENCH_BEFORE=<source tree>`` set (a checkout of
an older commit whose ``rlrun/conf`` and ``rlrun/sweeps`` link to its ``conf/`` and
``sweeps/``), each case also runs with that tree first on ``PYTHONPATH`` as ``before``,
interleaved with ``after``; ``ratio`` is before / after per repetition (above 1: faster now).
Targets (issue 13): ``list`` and config errors <= 1.5 s, ``run_mlflow`` <= 3.5 s.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlrun.benchmarks.common import median, ratio, table

BEFORE_ENV = "RLRUN_BENCH_BEFORE"
CASES = {
    "list": (["list"], 0, 1.5),
    "config_error": (["algo=nope"], 2, 1.5),
    "late_error": (["env.id=Nope-v0", "logger=none"], 2, 1.5),
    "run_mlflow": (["total_frames=1024", "progress=false"], 0, 3.5),
    "run_none": (["total_frames=1024", "progress=false", "logger=none"], 0, None),
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(args: list[str], expect: int, source: str | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of ``python -m rlrun *args`` in a new empty directory.

    CPU time is reported beside wall time because it moves much less with the load of a
    shared machine; the targets are wall times on an idle one. Checks the exit code.
    """
    with tempfile.TemporaryDirectory() as cwd:
        return time_python(["-m", "rlrun", *args], expect, Path(cwd), source)


def time_python(args: list[str], expect: int, cwd: Path, source: str | None = None,
                write_bytecode: bool = False) -> tuple[float, float]:
    """``(wall, CPU)`` seconds of ``python *args`` in ``cwd``, with ``source`` first on
    ``PYTHONPATH`` when given (a before side); checks the exit code. ``write_bytecode`` lets
    the child write ``__pycache__`` even where ``PYTHONDONTWRITEBYTECODE`` is set (a warm-up run
    leaves the caches a user's first run leaves)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if source:
        env["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != expect:
        raise RuntimeError(f"python {' '.join(args)} exited {done.returncode}, expected {expect}: "
                           f"{done.stderr[-500:]}")
    return seconds, cpu


def run(quick: bool = False, reps: int | None = None) -> dict:
    """Times every case (and its ``before`` twin when ``RLRUN_BENCH_BEFORE`` is set)."""
    reps = reps or (1 if quick else 5)
    before = os.environ.get(BEFORE_ENV)
    sides = {"after": None, **({"before": before} if before else {})}
    times: dict[str, dict[str, list[float]]] = {c: {s: [] for s in sides} for c in CASES}
    cpu: dict[str, dict[str, list[float]]] = {c: {s: [] for s in sides} for c in CASES}
    for rep in range(reps):
        order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
        for case, (args, expect, _) in CASES.items():
            for side in order:
                wall, used = time_command(args, expect, sides[side])
                times[case][side].append(wall)
                cpu[case][side].append(used)
    rows = []
    for case, (args, _, target) in CASES.items():
        row = {"case": case, "command": "rlrun " + " ".join(args), "after_s": median(times[case]["after"]),
               "after_cpu_s": median(cpu[case]["after"]),
               "target_s": target if target is not None else float("nan")}
        if before:
            row["before_s"] = median(times[case]["before"])
            row["before_cpu_s"] = median(cpu[case]["before"])
            r = ratio(times[case]["before"], times[case]["after"])
            row.update(ratio=r["median"], ratio_min=r["min"], ratio_max=r["max"])
        rows.append(row)
    return {"reps": reps, "before": before, "rows": rows, "times": times, "cpu": cpu}


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("case", "case", "s"), ("command", "command", "s")]
    if result["before"]:
        cols += [("before_s", "before s", ".2f"), ("before_cpu_s", "before CPU s", ".2f")]
    cols += [("after_s", "after s", ".2f"), ("after_cpu_s", "after CPU s", ".2f")]
    if result["before"]:
        cols += [("ratio", "before / after", ".2f"), ("ratio_min", "min", ".2f"), ("ratio_max", "max", ".2f")]
    cols += [("target_s", "target s", ".1f")]
    note = (f"Medians of {result['reps']} whole-process repetitions (wall and CPU seconds; ratio: "
            "median of per-repetition wall-time ratios)"
            + (f"; before: {result['before']}" if result["before"] else "") + ".")
    return table(result["rows"], cols) + f"\n\n{note}"
