"""Start-up: a 1,024-frame run's whole process against ``python -c 'import torch'`` (issue 27).

Cases, each a fresh process, interleaved per repetition (one pair = one repetition):

* ``import_torch``: ``python -c 'import torch'``, the floor every run pays.
* ``run_none``: ``rlrun total_frames=1024 progress=false logger=none`` (PPO CartPole).
* ``run_mlflow``: the same with the default MLflow logger, in a directory whose embedded store
  exists already (made by an untimed warm-up run: the everyday case). The warm-up also writes
  rlrun's bytecode caches, as a user's first run does, even where ``PYTHONDONTWRITEBYTECODE`` is
  set (this project's machines set it: every timed run then compiled rlrun's modules again).
* ``env_error``: ``rlrun env.id=Nope-v0 logger=none``, an error found while building.

Per repetition the excess over ``import_torch`` (run - torch, seconds) and the ratio run / torch
are taken, then their medians. Targets: ``run_none`` <= torch + 0.7 s, ``run_mlflow`` <= torch
+ 1.0 s. With ``RLRUN_BENCH_BEFORE=<source tree>`` every case also runs with that tree first on
``PYTHONPATH`` (as ``rlrun.benchmarks.cli`` does), interleaved, for before/after figures.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rlrun.benchmarks.cli import BEFORE_ENV, time_python
from rlrun.benchmarks.common import median, table

RUN = ["total_frames=1024", "progress=false"]
CASES = {
    "import_torch": (["-c", "import torch"], 0, None),
    "run_none": (["-m", "rlrun", *RUN, "logger=none"], 0, 0.7),
    "run_mlflow": (["-m", "rlrun", *RUN], 0, 1.0),
    "env_error": (["-m", "rlrun", "env.id=Nope-v0", "logger=none"], 2, None),
}


def run(quick: bool = False, reps: int | None = None) -> dict:
    """Times every case ``reps`` times (default 5, 1 with ``quick``), interleaved."""
    reps = reps or (1 if quick else 5)
    before = os.environ.get(BEFORE_ENV)
    sides = {"after": None, **({"before": before} if before else {})}
    times = {c: {s: [] for s in sides} for c in CASES}
    cpu = {c: {s: [] for s in sides} for c in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {s: Path(tmp, s) for s in sides}
        for side, d in dirs.items():  # the store the MLflow runs find, and the bytecode caches
            d.mkdir()                   # of a user's first run (both made untimed)
            time_python([*CASES["run_mlflow"][0], "hydra.run.dir=runs/warm-up"], 0, d, sides[side],
                        write_bytecode=True)
        for rep in range(reps):
            for case, (args, expect, _) in CASES.items():
                for side in (list(sides) if rep % 2 == 0 else list(sides)[::-1]):
                    extra = [f"hydra.run.dir=runs/{case}-{rep}"] if args[:2] == ["-m", "rlrun"] else []
                    wall, used = time_python([*args, *extra], expect, dirs[side], sides[side])
                    times[case][side].append(wall)
                    cpu[case][side].append(used)
    rows = []
    for case, (args, _, target) in CASES.items():
        for side in sides:
            t, torch_t = times[case][side], times["import_torch"][side]
            c, torch_c = cpu[case][side], cpu["import_torch"][side]
            rows.append({"case": case, "side": side, "command": "python " + " ".join(args),
                         "wall_s": median(t), "excess_s": median([a - b for a, b in zip(t, torch_t)]),
                         "ratio": median([a / b for a, b in zip(t, torch_t)]),
                         "target_excess_s": target if target is not None else float("nan"),
                         "cpu_s": median(c), "cpu_excess_s": median([a - b for a, b in zip(c, torch_c)]),
                         "cpu_ratio": median([a / b for a, b in zip(c, torch_c)])})
    return {"reps": reps, "before": before, "rows": rows, "times": times, "cpu": cpu,
            "load": os.getloadavg()}


def render(result: dict) -> str:
    """The result as a Markdown table."""
    cols = [("case", "case", "s"), ("side", "side", "s"), ("wall_s", "wall s", ".2f"),
            ("excess_s", "- import torch s", ".2f"), ("ratio", "/ import torch", ".2f"),
            ("target_excess_s", "target excess s", ".1f"), ("cpu_s", "CPU s", ".2f"),
            ("cpu_excess_s", "CPU - import torch s", ".2f"), ("cpu_ratio", "CPU / import torch", ".2f")]
    note = (f"Medians over {result['reps']} interleaved repetitions of whole processes; excess and ratio "
            "are per repetition against that repetition's `import torch`"
            + (f"; before: {result['before']}" if result["before"] else "")
            + (f"; load average at the end {result['load'][0]:.2f}" if result.get("load") else "") + ".")
    return table(result["rows"], cols) + f"\n\n{note}"
