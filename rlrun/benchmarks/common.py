"""Shared helpers: interleaved timing, per-repetition ratios, machine header, tables."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from rlrun.core.rundir import git_commit


def interleave(cases: dict[str, Callable[[], Any]], reps: int, warmup: int = 1) -> dict[str, list[float]]:
    """Times each case ``reps`` times, interleaved, and returns the seconds of each repetition.

    Repetitions alternate the order (A, B, C, then C, B, A, ...) so that a slow
    drift of the machine's load favours no case. Each case runs ``warmup``
    times first, untimed.

    Args:
        cases: Name to a callable doing one measurement's work.
        reps: Timed repetitions per case.
        warmup: Untimed calls per case before timing.

    Returns:
        Name to the list of ``reps`` durations in seconds, in repetition order.
    """
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    names = list(cases)
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - start)
    return times


def ratio(num: Sequence[float], den: Sequence[float]) -> dict[str, float]:
    """Median, min and max of the per-repetition ratios ``num[i] / den[i]``.

    Pairing each repetition with its neighbour in time cancels load changes
    that last longer than one repetition.
    """
    r = [a / b for a, b in zip(num, den)]
    return {"median": statistics.median(r), "min": min(r), "max": max(r)}


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def header() -> dict[str, Any]:
    """The machine and library versions the figures were measured with."""
    import torch

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "rlrun_commit": git_commit(mark_dirty=True),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),  # huge pages for large tensors
        "python": platform.python_version(),
        **{pkg: _version(pkg) for pkg in ("torch", "numpy", "gymnasium", "tensordict", "mujoco",
                                          "numba", "ale-py", "envpool")},
    }


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """A Markdown table of ``rows``.

    Args:
        rows: One dict per row.
        columns: ``(key, title, format spec)``; a missing or None value prints as ``-``.
    """
    def cell(row: dict[str, Any], key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r, k, s) for k, _, s in columns) + " |" for r in rows]
    return "\n".join(lines)
